"""The instructor's view of a whole class: a Gradescope export read safely
(:mod:`.exports`), its results kept in a SQLite gradebook (:mod:`.gradebook`), and a
spreadsheet an LMS imports (:mod:`.spreadsheet`), a report of where the class struggles
(:mod:`.summary`); ``m2l-nlp class ...`` (:mod:`.commands`)."""
