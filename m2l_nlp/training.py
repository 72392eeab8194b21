"""Moved to :mod:`m2l_nlp.train.loop`; kept so saved notebooks run
(the same module object)."""

import sys

from m2l_nlp.train import loop

sys.modules[__name__] = loop
