"""Model configuration shared by training, checkpoints and the CLI."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
    """Sizes of the transformer classifier of practical 2.

    The defaults are the seed tutorial's model (d_model 32, 2 layers, 8 heads, d_ff 32,
    sequences of 600 tokens); the training recipes override them.
    """

    vocab_size: int = 20000
    num_layers: int = 2
    num_heads: int = 8
    d_model: int = 32
    d_ff: int = 32
    p_dropout: float = 0.1
    max_len: int = 600
    pooling: str = "mean"

    def __post_init__(self) -> None:
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        if self.pooling not in ("mean", "max", "mean_max"):
            raise ValueError(f"pooling must be 'mean', 'max' or 'mean_max', not {self.pooling!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ClassifierConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model settings {unknown}; known: {sorted(known)}")
        return cls(**values)
