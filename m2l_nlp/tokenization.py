"""Moved to :mod:`m2l_nlp.data.tokenization`; kept so saved notebooks run
(the same module object)."""

import sys

from m2l_nlp.data import tokenization

sys.modules[__name__] = tokenization
