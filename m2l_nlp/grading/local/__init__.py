"""Grading on the student's own machine: ``pytest_plugin`` (``pytest``'s options, one test per
check, the score table), ``notebook`` (``from m2l_nlp.grading import check`` in a notebook)
and ``cli`` (``python -m m2l_nlp.grading``, ``m2l-nlp grade``)."""
