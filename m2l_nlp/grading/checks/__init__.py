"""The graded checks and what runs them, shared by every front end, bottom to top:
``settings`` (grading.toml), ``stubs`` (exercises/ from solutions/), ``wire`` (plain data
between processes) < ``registry`` (exercises and their checks) < ``tools`` (what a check
calls) < ``expected`` (the reference's recorded answers) < ``runner`` (one exercise's checks
against a student's code) < ``report`` (score table, results JSON) < ``practical1/``,
``practical2/`` (the checks) < ``catalog`` (every exercise, in teaching order).

Nothing here is imported on ``import m2l_nlp.grading.checks``: the stub generator stays free
of JAX."""
