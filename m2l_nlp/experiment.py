"""Moved to :mod:`m2l_nlp.runs.experiment`; kept so saved notebooks run
(the same module object)."""

import sys

from m2l_nlp.runs import experiment

sys.modules[__name__] = experiment
