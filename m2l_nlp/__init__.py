"""m2l-nlp: support library of the course (data, tokenizer, training, grading, plots).

Everything that is not an exercise lives here; the exercises live in ``solutions/`` (reference)
and ``exercises/`` (student stubs generated from the reference).
"""

__version__ = "0.1.0"
