"""The one override syntax: ``KEY=VALUE`` assignments (``m2l-nlp train --set``) applied to a
:class:`~m2l_nlp.config.Preset` or another settings dataclass of :mod:`m2l_nlp.config`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from m2l_nlp.config import MODEL_CONFIGS, Preset, TrainSettings


def _parse_value(text: str) -> Any:
    """A ``--set`` value: JSON (numbers, ``true``/``false``, ``null``, lists), else text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def override(settings: Any, assignments: Sequence[str]) -> Any:
    """``settings`` (a :class:`Preset` or another settings dataclass) with ``KEY=VALUE``
    assignments applied: the one override syntax (``m2l-nlp train --set``).

    Top-level fields by name (``bigram_tokens=100000``); a preset's model sizes and training
    settings with a prefix (``model.d_model=64``, ``train.crop_len=512``). A value is read
    as JSON and otherwise kept as text (``model.pooling=max``). Raises ``ValueError``
    naming the valid keys when a key is unknown.
    """
    groups: dict[str, set[str]] = {}
    if isinstance(settings, Preset):
        model_cls = MODEL_CONFIGS[settings.architecture]
        groups = {
            "model": {f.name for f in dataclasses.fields(model_cls)}
            - {"vocab_size", "max_len", "model"},
            "train": {f.name for f in dataclasses.fields(TrainSettings)},
        }
    top = {f.name for f in dataclasses.fields(settings)} - {"description", "architecture", *groups}
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. train.crop_len=512")
        value = _parse_value(text)
        group, dot, name = key.partition(".")
        if dot and name in groups.get(group, ()):
            group_values = {**getattr(settings, group), name: value}
            settings = dataclasses.replace(settings, **{group: group_values})
        elif not dot and key in top:
            settings = dataclasses.replace(settings, **{key: value})
        else:
            known = ", ".join(sorted(top))
            for prefix, names in groups.items():
                known += f", {prefix}.NAME ({', '.join(sorted(names))})"
            raise ValueError(f"--set {item!r}: unknown key {key!r}; use one of {known}")
    return settings
