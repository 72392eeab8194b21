"""Test configuration: load the auto-grader's pytest plugin (``--impl``, score table, ...)."""

pytest_plugins = ["m2l_nlp.grading.pytest_plugin"]
