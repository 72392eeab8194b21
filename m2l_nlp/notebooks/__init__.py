"""The Colab notebooks: ``setup_cell`` (the cell that installs the course in Colab) < ``make``
(``python -m m2l_nlp.notebooks.make``: notebooks/ from exercises/ and solutions/)."""
