"""Figures for practical 2: positional encodings, attention maps, training curves, confusions.

Every function builds a :class:`matplotlib.figure.Figure` directly (no ``pyplot`` state), so
it works with the Agg backend on a server, in a test, or in a notebook: in Jupyter or Colab
make the figure the last expression of a cell to show it (it renders itself as a PNG), or call
:func:`save_figure` to write a PNG file.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from m2l_nlp.fileio import atomic_file

SENTIMENT_LABELS = ("neg", "pos")


class NotebookFigure(Figure):
    """A figure that Jupyter and Colab show as a PNG when it ends a cell (no pyplot needed)."""

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()


def _as_numpy(x: Any) -> np.ndarray:
    """A NumPy copy of an array-like (JAX arrays included), as float64."""
    return np.asarray(x, dtype=np.float64)


def plot_positional_encoding(
    table: Any, title: str = "Sinusoidal positional encoding", max_positions: int | None = None
) -> Figure:
    """Heatmap of a position table `(S, D)`: positions down, features across.

    Args:
        table: `(S, D)` array, e.g. ``sinusoidal_encoding(max_len, d_model)``.
        title: figure title.
        max_positions: show only the first positions (all if ``None``).

    Returns:
        A figure with one heatmap panel and a colour bar.
    """
    values = _as_numpy(table)
    if values.ndim != 2 or values.size == 0:
        raise ValueError(
            f"expected a non-empty (positions, features) table, got shape {values.shape}: "
            "pass e.g. sinusoidal_encoding(max_len, d_model)"
        )
    if max_positions is not None:
        values = values[:max_positions]
    n_pos, n_feat = values.shape
    fig = NotebookFigure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(values, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="none")
    ax.set_xlabel(f"feature (0 .. {n_feat - 1})")
    ax.set_ylabel(f"position (0 .. {n_pos - 1})")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label="value")
    return fig


def _attention_stack(maps: Any, example: int) -> np.ndarray:
    """Stack attention maps into `(layers, heads, S_q, S_k)` for one example."""
    if isinstance(maps, (list, tuple)):
        layers = [_as_numpy(m) for m in maps]
    else:
        arr = _as_numpy(maps)
        layers = [arr] if arr.ndim in (3, 4) else [arr[i] for i in range(arr.shape[0])]
    if not layers:
        raise ValueError("no attention maps given: pass the list from get_attention_maps(...)")
    out = []
    for i, layer in enumerate(layers):
        if layer.ndim == 4:  # (B, h, S, S): pick one example
            if not 0 <= example < layer.shape[0]:
                raise ValueError(f"example {example} is out of range for a batch of {len(layer)}")
            layer = layer[example]
        if layer.ndim != 3:
            raise ValueError(
                f"attention map {i} has shape {layer.shape}; expected (B, h, S, S) or (h, S, S)"
            )
        out.append(layer)
    return np.stack(out)


def plot_attention_maps(
    maps: Any,
    tokens: Sequence[str] | None = None,
    example: int = 0,
    mask: Any = None,
    title: str = "Attention maps",
    vmax: float | None = None,
) -> Figure:
    """A layers x heads grid of attention weights for one example.

    Args:
        maps: list (one entry per layer) of `(B, h, S, S)` or `(h, S, S)` weights, as
            returned by ``get_attention_maps``; rows are queries, columns are keys.
        tokens: labels for the positions (shown on the outer axes); the plot is cut to the
            first ``len(tokens)`` positions.
        example: which example of the batch to draw.
        mask: optional `(B, S)` or `(S,)` padding mask (1 = token): cuts the plot to the
            real tokens when ``tokens`` is not given.
        title: figure title.
        vmax: weight shown in the brightest colour; ``None`` uses the largest weight drawn
            (a long review spreads its attention thin), 1.0 fixes the scale across figures.

    Returns:
        A figure with ``layers * heads`` panels.
    """
    weights = _attention_stack(maps, example)
    n_layers, n_heads, s_q, s_k = weights.shape
    length = min(s_q, s_k)
    if tokens is not None:
        tokens = [str(t) for t in tokens]
        if len(tokens) > length:
            raise ValueError(f"{len(tokens)} token labels for attention maps of length {length}")
        length = len(tokens)
    elif mask is not None:
        m = np.asarray(mask)
        m = m[example] if m.ndim == 2 else m
        length = max(int((m != 0).sum()), 1)
    weights = weights[:, :, :length, :length]
    if vmax is None:
        vmax = float(weights.max()) if weights.max() > 0 else 1.0

    size = min(2.2 + 0.12 * length, 4.5)
    fig = NotebookFigure(figsize=(size * n_heads, size * n_layers + 0.6), layout="constrained")
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    image = None
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            image = ax.imshow(
                weights[layer, head], cmap="viridis", vmin=0, vmax=vmax, interpolation="none"
            )
            ax.set_title(f"layer {layer + 1}, head {head + 1}", fontsize=9)
            ticks = np.arange(length)
            show_labels = tokens is not None and length <= 40
            ax.set_xticks(ticks if show_labels and layer == n_layers - 1 else [])
            ax.set_yticks(ticks if show_labels and head == 0 else [])
            if show_labels and layer == n_layers - 1:
                ax.set_xticklabels(tokens, rotation=90, fontsize=7)
            if show_labels and head == 0:
                ax.set_yticklabels(tokens, fontsize=7)
        axes[layer, 0].set_ylabel("query", fontsize=8)
    for head in range(n_heads):
        axes[-1, head].set_xlabel("key", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight")
    fig.suptitle(title)
    return fig


def plot_alignment(
    weights: Any,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    title: str = "Cross-attention: which English tokens each Greek token read",
) -> Figure:
    """One translation's cross-attention as an alignment matrix.

    Args:
        weights: `(T, S)` weights (e.g. one block's, averaged over its heads), or `(h, T, S)`
            (averaged here); rows are the target's tokens, columns the source's.
        source_tokens: the `S'` <= `S` source tokens to show (columns).
        target_tokens: the `T'` <= `T` target tokens to show (rows).
        title: figure title.

    Returns:
        A figure with one panel.
    """
    w = np.asarray(weights, dtype=np.float64)
    w = w.mean(axis=0) if w.ndim == 3 else w
    rows, cols = len(target_tokens), len(source_tokens)
    if w.ndim != 2 or rows > w.shape[0] or cols > w.shape[1]:
        raise ValueError(
            f"{rows} target and {cols} source tokens for weights of shape {np.shape(weights)}: "
            "give (T, S) or (h, T, S) weights at least that large"
        )
    w = w[:rows, :cols]
    fig = NotebookFigure(figsize=(2.5 + 0.4 * cols, 1.5 + 0.35 * rows), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(w, cmap="viridis", vmin=0, interpolation="none", aspect="auto")
    ax.set_xticks(np.arange(cols), [str(t) for t in source_tokens], rotation=60, ha="right")
    ax.set_yticks(np.arange(rows), [str(t) for t in target_tokens])
    ax.set_xlabel("English (source) token")
    ax.set_ylabel("Greek (target) token")
    fig.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    ax.set_title(title, fontsize=10)
    return fig


def _history_series(history: Any) -> dict[str, np.ndarray]:
    """Normalise a history (dict of lists, or list of per-epoch dicts) to name -> values."""
    if isinstance(history, Mapping):
        items = dict(history)
    elif isinstance(history, Sequence) and all(isinstance(h, Mapping) for h in history):
        names = [k for h in history for k in h]
        items = {k: [h.get(k, np.nan) for h in history] for k in dict.fromkeys(names)}
    else:
        raise TypeError(
            "history must be a dict of per-epoch lists (e.g. {'loss': [...], 'test_acc': [...]}) "
            f"or a list of per-epoch dicts, not {type(history).__name__}"
        )
    series = {}
    for name, values in items.items():
        arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
        if arr.ndim == 1 and arr.size:
            series[str(name)] = arr
    return series


def plot_training_curves(history: Any, title: str = "Training curves") -> Figure:
    """Loss and accuracy per epoch, side by side.

    Args:
        history: dict of per-epoch lists, e.g. ``{"loss": [...], "train_acc": [...],
            "test_acc": [...]}`` (or a list of per-epoch dicts). Names containing "loss" go
            to the left panel, names containing "acc" to the right one.
        title: figure title.

    Returns:
        A figure with two panels (loss, accuracy).
    """
    series = _history_series(history)
    losses = {k: v for k, v in series.items() if "loss" in k.lower()}
    accs = {k: v for k, v in series.items() if "acc" in k.lower()}
    if not losses and not accs:
        raise ValueError(
            f"nothing to plot in the history {sorted(series)}: expected names containing "
            "'loss' or 'acc' (e.g. 'loss', 'train_acc', 'test_acc')"
        )
    fig = NotebookFigure(figsize=(10, 4), layout="constrained")
    ax_loss, ax_acc = fig.subplots(1, 2)
    for ax, group, ylabel in ((ax_loss, losses, "loss"), (ax_acc, accs, "accuracy")):
        for name, values in group.items():
            epochs = np.arange(1, len(values) + 1)
            ax.plot(epochs, values, marker="o", label=name)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if group:
            ax.legend()
            longest = max(len(v) for v in group.values())
            ax.set_xticks(np.arange(1, longest + 1, max(1, longest // 10)))
        else:
            ax.text(0.5, 0.5, f"no {ylabel} recorded", ha="center", va="center")
    ax_loss.set_title("loss")
    ax_acc.set_title("accuracy")
    fig.suptitle(title)
    return fig


def plot_confusion_matrix(
    confusion: Any,
    labels: Sequence[str] = SENTIMENT_LABELS,
    title: str = "Confusion matrix",
) -> Figure:
    """A 2x2 (or n x n) confusion matrix with the counts written in the cells.

    Args:
        confusion: `(n, n)` counts, ``confusion[true, predicted]`` (rows are the true
            labels; for IMDB index 0 = neg, 1 = pos).
        labels: class names, in index order.
        title: figure title; the accuracy is appended.

    Returns:
        A figure with one panel.
    """
    counts = np.asarray(confusion)
    if counts.ndim != 2 or counts.shape[0] != counts.shape[1] or counts.shape[0] != len(labels):
        raise ValueError(
            f"confusion matrix of shape {counts.shape} does not match {len(labels)} labels "
            f"{list(labels)}: expected ({len(labels)}, {len(labels)}) counts[true, predicted]"
        )
    total = counts.sum()
    accuracy = np.trace(counts) / total if total else float("nan")
    fig = NotebookFigure(figsize=(4.5, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.imshow(counts, cmap="Blues", vmin=0, vmax=max(counts.max(), 1))
    threshold = counts.max() / 2
    for i in range(counts.shape[0]):
        for j in range(counts.shape[1]):
            share = f"\n{counts[i, j] / total:.1%}" if total else ""
            ax.text(
                j,
                i,
                f"{counts[i, j]:g}{share}",
                ha="center",
                va="center",
                color="white" if counts[i, j] > threshold else "black",
                fontsize=12,
            )
    ticks = np.arange(len(labels))
    ax.set_xticks(ticks, labels=list(labels))
    ax.set_yticks(ticks, labels=list(labels))
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(f"{title} (accuracy {accuracy:.1%})")
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically (temporary file, then rename).

    Parent folders are created. Returns the path written.
    """
    with atomic_file(path) as handle:
        fig.savefig(handle, format="png", dpi=dpi)
    return Path(path)
