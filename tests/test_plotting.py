"""Tests of m2l_nlp.plotting: panels, data shown, PNG written atomically."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from m2l_nlp import plotting

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def image_axes(fig: Figure) -> list:
    """The panels of a figure that hold an image (colour bars excluded)."""
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def test_positional_encoding_heatmap_shows_the_table():
    table = np.sin(np.arange(30 * 8, dtype=np.float32).reshape(30, 8) / 7)
    fig = plotting.plot_positional_encoding(table, title="PE")
    panels = image_axes(fig)
    assert len(panels) == 1
    shown = np.asarray(panels[0].images[0].get_array())
    np.testing.assert_allclose(shown, table, rtol=1e-6)
    assert panels[0].get_title() == "PE"


def test_positional_encoding_max_positions_and_bad_shape():
    fig = plotting.plot_positional_encoding(np.ones((50, 4)), max_positions=10)
    assert image_axes(fig)[0].images[0].get_array().shape == (10, 4)
    with pytest.raises(ValueError, match="positions, features"):
        plotting.plot_positional_encoding(np.ones(5))


def random_maps(layers: int, batch: int, heads: int, seq: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    maps = []
    for _ in range(layers):
        w = rng.random((batch, heads, seq, seq))
        maps.append(w / w.sum(-1, keepdims=True))
    return maps


def test_attention_maps_grid_is_layers_by_heads_with_token_labels():
    maps = random_maps(layers=3, batch=2, heads=4, seq=7)
    tokens = ["a", "good", "film", "!"]
    fig = plotting.plot_attention_maps(maps, tokens=tokens, example=1)
    panels = image_axes(fig)
    assert len(panels) == 3 * 4
    # Panel (layer 2, head 3) shows example 1, cut to the 4 labelled tokens.
    shown = np.asarray(panels[1 * 4 + 2].images[0].get_array())
    np.testing.assert_allclose(shown, maps[1][1, 2, :4, :4])
    bottom_left = panels[2 * 4]
    assert [t.get_text() for t in bottom_left.get_xticklabels()] == tokens
    assert [t.get_text() for t in bottom_left.get_yticklabels()] == tokens


def test_an_alignment_averages_the_heads_and_shows_the_labelled_tokens():
    weights = np.random.default_rng(0).random((4, 6, 5))  # (h, T, S)
    fig = plotting.plot_alignment(weights, ["I", "love", "you"], ["σ", "α", "γ", "."])
    (panel,) = image_axes(fig)
    np.testing.assert_allclose(panel.images[0].get_array(), weights.mean(0)[:4, :3])
    assert [t.get_text() for t in panel.get_xticklabels()] == ["I", "love", "you"]
    with pytest.raises(ValueError, match="give \\(T, S\\) or \\(h, T, S\\) weights"):
        plotting.plot_alignment(weights, ["w"] * 9, ["σ"])


def test_attention_maps_mask_cuts_padding_and_single_example_input():
    maps = random_maps(layers=1, batch=2, heads=2, seq=6)
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    fig = plotting.plot_attention_maps(maps, mask=mask, example=1)
    assert image_axes(fig)[0].images[0].get_array().shape == (5, 5)
    fig = plotting.plot_attention_maps([maps[0][0]])  # (h, S, S) without batch axis
    assert len(image_axes(fig)) == 2


def test_attention_maps_errors():
    maps = random_maps(layers=1, batch=1, heads=2, seq=3)
    with pytest.raises(ValueError, match="token labels"):
        plotting.plot_attention_maps(maps, tokens=list("abcd"))
    with pytest.raises(ValueError, match="out of range"):
        plotting.plot_attention_maps(maps, example=3)
    with pytest.raises(ValueError, match="get_attention_maps"):
        plotting.plot_attention_maps([])


def test_attention_maps_of_the_reference_model():
    """The list returned by the solution's get_attention_maps plots as layers x heads."""
    import haiku as hk
    import jax
    import jax.numpy as jnp

    from m2l_nlp.config import ClassifierConfig
    from m2l_nlp.impl import load_practical

    sol = load_practical("practical2_transformers", "solutions")
    config = ClassifierConfig(vocab_size=20, num_layers=2, num_heads=2, d_model=8, d_ff=8)

    def maps_fn(ids, mask):
        return sol.TransformerClassifier(config, name="classifier").get_attention_maps(ids, mask)

    ids = jnp.array([[3, 4, 5, 0]])
    mask = (ids != 0).astype(jnp.int32)
    model = hk.transform(maps_fn)
    maps = model.apply(model.init(jax.random.PRNGKey(0), ids, mask), None, ids, mask)
    fig = plotting.plot_attention_maps(maps, tokens=["x", "y", "z"])
    panels = image_axes(fig)
    assert len(panels) == 2 * 2
    for panel in panels:
        np.testing.assert_allclose(panel.images[0].get_array().sum(-1), 1.0, rtol=1e-5)


def line_data(ax) -> dict[str, np.ndarray]:
    return {line.get_label(): np.asarray(line.get_ydata()) for line in ax.get_lines()}


def test_training_curves_two_panels_with_every_series():
    history = {"loss": [0.7, 0.5, 0.4], "train_acc": [0.5, 0.7, 0.8], "test_acc": [0.5, 0.6, 0.7]}
    fig = plotting.plot_training_curves(history)
    assert len(fig.axes) == 2
    loss_ax, acc_ax = fig.axes
    np.testing.assert_allclose(line_data(loss_ax)["loss"], history["loss"])
    acc = line_data(acc_ax)
    assert set(acc) == {"train_acc", "test_acc"}
    np.testing.assert_allclose(acc["test_acc"], history["test_acc"])
    np.testing.assert_allclose(loss_ax.get_lines()[0].get_xdata(), [1, 2, 3])


def test_training_curves_accepts_per_epoch_dicts_and_rejects_junk():
    fig = plotting.plot_training_curves([{"loss": 1.0, "val_acc": 0.5}, {"loss": 0.5}])
    np.testing.assert_allclose(line_data(fig.axes[0])["loss"], [1.0, 0.5])
    with pytest.raises(ValueError, match="'loss' or 'acc'"):
        plotting.plot_training_curves({"lr": [0.1, 0.2]})
    with pytest.raises(TypeError, match="dict of per-epoch lists"):
        plotting.plot_training_curves(3.0)


def test_confusion_matrix_annotates_counts():
    counts = np.array([[40, 10], [5, 45]])
    fig = plotting.plot_confusion_matrix(counts)
    panels = image_axes(fig)
    assert len(panels) == 1
    ax = panels[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), counts)
    texts = [t.get_text().split("\n")[0] for t in ax.texts]
    assert sorted(texts) == sorted(["40", "10", "5", "45"])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["neg", "pos"]
    assert "85.0%" in ax.get_title()
    with pytest.raises(ValueError, match="counts\\[true, predicted\\]"):
        plotting.plot_confusion_matrix(np.ones((3, 3)))


def test_save_figure_writes_png_atomically(tmp_path: Path):
    fig = plotting.plot_confusion_matrix(np.array([[1, 2], [3, 4]]))
    target = tmp_path / "sub" / "cm.png"
    assert plotting.save_figure(fig, target) == target
    assert target.read_bytes()[:8] == PNG_MAGIC
    assert os.stat(target).st_mode & 0o044, "the PNG should be readable by others (umask)"
    assert sorted(p.name for p in target.parent.iterdir()) == ["cm.png"]


def test_save_figure_failure_keeps_old_file_and_leaves_no_temp(tmp_path: Path, monkeypatch):
    target = tmp_path / "plot.png"
    target.write_bytes(b"old")
    fig = plotting.plot_positional_encoding(np.zeros((4, 4)))

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(fig, "savefig", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        plotting.save_figure(fig, target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


def test_figures_show_themselves_as_png_in_notebooks():
    """Jupyter and Colab display an object through `_repr_png_` when it ends a cell."""
    figures = [
        plotting.plot_positional_encoding(np.zeros((4, 4))),
        plotting.plot_attention_maps(random_maps(1, 1, 1, 3)),
        plotting.plot_training_curves({"loss": [1.0, 0.5]}),
        plotting.plot_confusion_matrix(np.eye(2)),
    ]
    for fig in figures:
        assert fig._repr_png_()[:8] == PNG_MAGIC


def test_attention_colour_scale_defaults_to_the_largest_weight():
    maps = [np.full((1, 1, 4, 4), 0.25)]
    maps[0][0, 0, 0, 1] = 0.4
    image = image_axes(plotting.plot_attention_maps(maps))[0].images[0]
    assert image.get_clim() == (0.0, 0.4)
    image = image_axes(plotting.plot_attention_maps(maps, vmax=1.0))[0].images[0]
    assert image.get_clim() == (0.0, 1.0)
