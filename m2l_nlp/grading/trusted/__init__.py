"""Grading for credit, where the student cannot reach the grader (Gradescope): ``worker``
(the student's code in its own bounded process) < ``remote`` (the grader's side of it),
``submission`` (what a student uploaded), ``recording`` (the reference's answers) < ``grader``
(``python -m m2l_nlp.grading.trusted SUBMISSION out.json``), ``bundle`` (``make autograder``,
``make handout``); ``gradescope/``: the scripts Gradescope runs."""
