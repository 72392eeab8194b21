"""Moved to :mod:`m2l_nlp.data.splits`; kept so saved notebooks run
(the same module object)."""

import sys

from m2l_nlp.data import splits

sys.modules[__name__] = splits
