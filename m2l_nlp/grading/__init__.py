"""The auto-grader: student stubs, graded checks per exercise, score table, notebook checks."""
