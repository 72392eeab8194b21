"""Graded checks of practical 3 (``practical3_translation``): the transformer decoder and the
character language model.

- :mod:`.decoder`: ``causal_mask``, ``decoder_block``, ``transformer_decoder``;
- :mod:`.language_model`: ``language_model``, ``next_token_loss``, ``sample_next``;
- :mod:`.writing`: ``attention_cache``;

and :mod:`.common` holds what they share (sizes, padded batches, the check that no position
sees the future).
"""
