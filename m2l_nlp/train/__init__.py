"""Training and evaluation, bottom to top: ``metrics`` (objectives, scores) and ``optim``
(optimizer, train state) < ``progress`` (an epoch's end, on the host) < ``evaluation`` <
``step`` (one readable gradient step) < ``loop`` (:func:`~m2l_nlp.train.loop.train`, the speed
machinery around the step) < ``reverse`` (the reverse-sequence task, trained by the loop).
"""
