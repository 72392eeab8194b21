"""A run of ``m2l-nlp train`` and what it leaves: ``experiment`` (``train_and_evaluate``, the one
run of every kind) < one module per kind of model (``classifier``, ``language_model``,
``translation``; ``kinds``: their interface and registry) < ``checkpoint`` (one format for all)
< ``folders`` (atomic, locked, resumable run folders); ``predict_input`` reads the inputs of
``m2l-nlp predict`` and ``translate``."""
