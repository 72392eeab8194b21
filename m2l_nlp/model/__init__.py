"""The course's models: ``baselines`` (practical 1) < ``classifiers`` (practical 2's transformer
and every architecture by name, built through ``funcs_from_stateful``).

``m2l_nlp.model`` itself re-exports :mod:`m2l_nlp.model.classifiers`, its import path before
the layout by package.
"""

from m2l_nlp.model.classifiers import *  # noqa: F403
