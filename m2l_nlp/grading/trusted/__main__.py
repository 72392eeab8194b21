"""``python -m m2l_nlp.grading.trusted SUBMISSION RESULTS``: the trusted grader (Gradescope's
``run_autograder`` runs it)."""

import sys

from m2l_nlp.grading.trusted.grader import main

sys.exit(main())
