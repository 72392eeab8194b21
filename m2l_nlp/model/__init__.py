"""The course's models: ``baselines`` (practical 1) < ``classifiers`` (practical 2's transformer
and every architecture by name, built through ``funcs_from_stateful``)."""
