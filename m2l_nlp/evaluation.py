"""Moved to :mod:`m2l_nlp.train.evaluation`; kept so saved notebooks run
(the same module object)."""

import sys

from m2l_nlp.train import evaluation

sys.modules[__name__] = evaluation
