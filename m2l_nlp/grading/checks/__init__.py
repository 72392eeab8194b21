"""The check engine, shared by every front end, bottom to top: ``settings`` (grading.toml),
``wire`` (plain data between processes) < ``registry`` (exercises and their checks) <
``tools`` (what a check calls) < ``expected`` (the reference's recorded answers) < ``runner``
(one exercise's checks against a student's code) < ``report`` (score table, results JSON) <
``catalog`` (the exercises of the practicals found in ``m2l_nlp/grading/practicals/``, in
teaching order). What each practical is checked for lives in ``grading/practicals/``."""
