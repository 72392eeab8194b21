"""Graded checks of practical 2 (``practical2_transformers``): the transformer encoder.

Each check compares the student's component with the reference on the same inputs and the
same (perturbed) haiku parameters, or tests a property that needs no reference. Inputs are
small and seeded; tolerances hold on CPU and GPU (float32, matmuls at highest precision).

The checks are split by exercise group, one module each:

- :mod:`.attention`: ``scaled_dot_product``, ``masked_embedding``, ``multihead_attention``;
- :mod:`.blocks`: ``positionwise_feed_forward``, ``encoder_block``, ``transformer_encoder``;
- :mod:`.positional`: ``positional_encoding``;
- :mod:`.classifier`: ``classifier`` (masked pooling and the full model);

and :mod:`.common` holds what they share (sizes, masks, the comparison with the reference).
"""
