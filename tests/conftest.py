"""Test configuration: load the auto-grader's pytest plugin (``--impl``, score table, ...)."""

import os

pytest_plugins = ["m2l_nlp.grading.pytest_plugin"]

# The CLI keeps compiled programs on disk (JAX_COMPILATION_CACHE_DIR); an empty value turns
# that off, so tests that run the CLI, and the subprocesses they start, write none.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", "")
