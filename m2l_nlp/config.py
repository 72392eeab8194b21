"""Model configuration shared by training, checkpoints and the CLI."""

from __future__ import annotations

import dataclasses
import functools
import numbers
import typing
from typing import Any


@functools.cache
def _declared_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)  # evaluates the annotations: once per class


def check_field_types(settings: Any) -> None:
    """Raise ``ValueError`` if a field of the dataclass ``settings`` does not hold the type
    it is declared with: a whole number for ``int``, a number for ``float`` (NumPy numbers
    count), ``true``/``false`` for ``bool``, text for ``str``. Other declarations (``dict``,
    ``int | None``, ...) are not checked. Values typed on a command line meet this first."""
    words = {bool: "true or false", int: "a whole number", float: "a number", str: "text"}
    hints = _declared_types(type(settings))
    for field in dataclasses.fields(settings):
        kind = hints.get(field.name)
        if kind not in words:
            continue
        value = getattr(settings, field.name)
        if kind is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise ValueError(f"{field.name} must be {words[kind]}, not {value!r}")


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
        check_field_types(self)
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
