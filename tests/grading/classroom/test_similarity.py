"""m2l_nlp.grading.classroom.similarity: a planted copy is found under renamed names; honest
work written independently is not flagged; the starter code counts for nothing."""

from __future__ import annotations

import json

from m2l_nlp.grading.classroom.similarity import (
    LEAD,
    code_of,
    notebook_code,
    similar_pairs,
    write_pairs,
)
from m2l_nlp.impl import repo_root

STUB = (repo_root() / "exercises" / "practical1_baselines.py").read_text()

# Three students' own answers to practical 1's multi_hot, fit_idf and tfidf.
HONEST = {
    "ada": """
def multi_hot(ids, mask, vocab_size):
    rows = jnp.arange(ids.shape[0])[:, None]
    present = (jnp.asarray(mask) != 0).astype(jnp.float32)
    out = jnp.zeros((ids.shape[0], vocab_size), jnp.float32)
    return out.at[rows, ids].max(present)


def fit_idf(features):
    n = features.shape[0]
    df = (features != 0).sum(axis=0)
    return jnp.log((1.0 + n) / (1.0 + df)) + 1.0


def tfidf(features, idf):
    weighted = features * idf
    norm = jnp.sqrt((weighted ** 2).sum(axis=-1, keepdims=True))
    return weighted / jnp.maximum(norm, 1e-12)
""",
    "alan": """
def multi_hot(ids, mask, vocab_size):
    one_hot = jax.nn.one_hot(ids, vocab_size) * mask[..., None]
    return jnp.clip(one_hot.sum(axis=1), 0.0, 1.0)


def fit_idf(features):
    count = features.shape[0]
    seen_in = jnp.count_nonzero(features, axis=0)
    return 1.0 + jnp.log1p(count) - jnp.log1p(seen_in)


def tfidf(features, idf):
    scaled = jnp.einsum("bv,v->bv", features, idf)
    length = jnp.linalg.norm(scaled, axis=1, keepdims=True)
    return jnp.where(length > 0, scaled / jnp.where(length > 0, length, 1.0), 0.0)
""",
    "grace": """
def multi_hot(ids, mask, vocab_size):
    vocab = jnp.arange(vocab_size)
    hits = (ids[:, :, None] == vocab[None, None, :]) & (mask[:, :, None] > 0)
    return hits.any(axis=1).astype(jnp.float32)


def fit_idf(features):
    documents = float(len(features))
    frequency = jnp.sum(jnp.where(features > 0, 1.0, 0.0), axis=0)
    smoothed = (documents + 1.0) / (frequency + 1.0)
    return jnp.log(smoothed) + 1.0


def tfidf(features, idf):
    values = features * idf[None, :]
    size = jnp.sqrt(jnp.sum(values * values, axis=-1))[:, None]
    size = jnp.maximum(size, 1e-12)
    return values / size
""",
}
# Ada's, every name changed and a comment added: a copy all the same.
COPY = (
    HONEST["ada"]
    .replace("rows", "r_idx")
    .replace("present", "keep")
    .replace("out", "result")
    .replace("weighted", "w")
    .replace("norm", "nrm")
    .replace("df", "doc_freq")
    .replace("    n = ", "    # number of documents\n    n = ")
)


def test_the_planted_copy_is_found_and_no_honest_pair_is_flagged(tmp_path):
    codes = {name: STUB + code for name, code in HONEST.items()}
    codes["eve"] = STUB + COPY
    codes["bob"] = ""  # nothing submitted
    pairs = similar_pairs(codes, [STUB])
    assert [(p.first, p.second) for p in pairs] == [("ada", "eve")]
    (pair,) = pairs
    assert min(pair.similarity) > 0.8
    assert any("jnp.log((1.0 + n) / (1.0 + doc_freq)) + 1.0" in right for _, right in pair.shared)
    md, page = write_pairs(pairs, tmp_path, 0.5)
    assert LEAD in md.read_text() and "ada ~ eve" in page.read_text()


def test_the_starter_code_alone_makes_no_pair():
    codes = {"a": STUB, "b": STUB, "c": STUB + HONEST["alan"]}
    assert similar_pairs(codes, [STUB]) == []
    assert similar_pairs({"a": STUB, "b": STUB}, [])[0].score == 1.0  # without it: identical


def test_a_submissions_code_is_its_python_files_and_notebooks_links_not_followed(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "helper.PY").write_text("two\n")
    (tmp_path / "a.py").write_text("one\n")
    cells = [
        {"cell_type": "markdown", "source": "words"},
        {"cell_type": "code", "source": ["x = 1"]},
    ]
    (tmp_path / "c.ipynb").write_text(json.dumps({"cells": cells}))
    (tmp_path / "d.ipynb").write_text("not a notebook")
    (tmp_path / "e.py").symlink_to("/etc/passwd")
    (tmp_path / "f").symlink_to("/etc", target_is_directory=True)
    assert code_of(tmp_path) == "one\n\ntwo\n\nx = 1\n"
    assert notebook_code(json.dumps({"cells": "x"})) == ""


def test_passages_without_a_backtick_are_fenced(tmp_path):
    from m2l_nlp.grading.classroom.similarity import Pair

    md, _ = write_pairs([Pair("a", "b", (1.0, 1.0), [("x = 1", "y = 1")])], tmp_path, 0.5)
    assert "```python\nx = 1\n```" in md.read_text()
