# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Practical 9: self-attention from practical 2's attention

# %%
import jax

from .practical2_transformers import scaled_dot_product


# %%
def self_attention(x: jax.Array, mask: jax.Array) -> jax.Array:
    """Every position of `x (B, S, D)` attends to the real positions of `mask (B, S)`;
    returns `(B, S, D)`."""
    # BEGIN SOLUTION
    return scaled_dot_product(x, x, x, mask[:, None, :])[0]
    # END SOLUTION
