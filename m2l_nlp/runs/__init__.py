"""A run of ``m2l-nlp train`` and its folder: ``folders`` (atomic, locked, resumable run folders)
< ``checkpoint`` (save, load, predict) < ``experiment`` (``train_and_evaluate``: the whole job)
; ``predict_input`` reads the reviews of ``m2l-nlp predict``."""
