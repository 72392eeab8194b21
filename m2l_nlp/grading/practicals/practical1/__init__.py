"""Graded checks of practical 1 (``practical1_baselines``): bag-of-words features, TF-IDF,
an MLP and an LSTM classifier.

The checks are split in two modules:

- :mod:`.features`: ``multi_hot``, ``bag_of_bigrams``, ``tfidf`` (the encodings, checked
  against small examples worked out by hand and against the reference on random inputs);
- :mod:`.models`: ``mlp_classifier``, ``lstm_classifier`` (compared with the reference on the
  same perturbed haiku parameters, plus padding invariance and dropout only in training);

and :mod:`.common` holds what both use (the practical's name, random padded batches).
"""
