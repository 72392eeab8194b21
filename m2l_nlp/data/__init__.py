"""IMDB from the archive to token ids on the device, bottom to top:

``imdb_archive`` (download, checksum, read, clean) < ``tokenization`` (the WordPiece tokenizer)
< ``bigrams`` (pair tokens) < ``splits`` (the validation split) < ``pipeline`` (frames, caches,
the prepared arrays) and ``batching`` (length buckets, the arrays on the device, each epoch's plan).

``m2l_nlp.data`` itself re-exports :mod:`m2l_nlp.data.pipeline`, its import path before the
layout by package: ``from m2l_nlp.data import prepare_for`` in a saved notebook still runs.
"""

from m2l_nlp.data.pipeline import *  # noqa: F403
