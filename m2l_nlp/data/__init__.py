"""IMDB from the archive to token ids on the device, bottom to top:

``masks`` (a padding mask from lengths, the one copy) < ``imdb_archive`` (download, checksum,
read, clean) < ``tokenization`` (the Unigram tokenizer) < ``bigrams`` (pair tokens) <
``splits`` (the validation split) < ``pipeline`` (frames, caches, the prepared arrays) and
``batching`` (length buckets, the arrays on the device, each epoch's plan).
"""
