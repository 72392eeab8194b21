"""``python -m m2l_nlp.grading [pytest args]``: grade exercises/ (or ``--impl solutions``)."""

import sys

from m2l_nlp.grading.local.cli import main

sys.exit(main())
