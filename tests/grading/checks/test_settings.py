"""The instructor's grading.toml: read and checked in words, partial credit that pays no
trivial code, and results.json feedback that Gradescope renders (and students cannot mark up)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from m2l_nlp.grading.checks import catalog
from m2l_nlp.grading.checks import settings as grading_settings
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.settings import GradingSettings, SettingsError, parse
from m2l_nlp.grading.local.notebook import check
from m2l_nlp.impl import repo_root

CHECKS = {"sdp": ["shapes", "matches_reference"], "mha": ["masks"]}


def test_the_repository_settings_are_read_and_every_exercise_has_a_gate():
    chosen = catalog.read_settings()
    assert isinstance(chosen, GradingSettings) and not chosen.partial_credit
    for ex in load_exercises().values():
        assert any(c.gate for c in ex.checks), f"{ex.name} has no gate check"


def test_no_file_means_the_defaults(tmp_path):
    assert grading_settings.read(tmp_path, CHECKS) == GradingSettings()


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("partial = true", "unknown key partial; the keys are: partial_credit"),
        ("partial_credit = 1", "partial_credit must be true or false"),
        ("time_limit_factor = 0.5", "time_limit_factor must be >= 1"),
        ("time_limit_factor = nan", "time_limit_factor must be a number"),
        ("[points]\nsdpp = 3", "no exercise called sdpp; the exercises are: sdp, mha"),
        ("[points]\nsdp = -1", "[points] sdp must be >= 0"),
        ("[weights]\nsdp = { shape = 2 }", "[weights] sdp: unknown key shape"),
        ("[weights]\nsdp = { shapes = 0 }", "must be > 0"),
        ("[gates]\nsdp = 'shapes'", "[gates] sdp must be a list of check names"),
        ("[gates]\nmha = ['mask']", '[gates] mha: unknown check "mask"; the checks are: masks'),
        ("[hidden]\nvisibility = 'later'", "visibility must be one of visible, hidden"),
        ("[hidden]\ncount = true", "[hidden]: unknown key count"),
        ("partial_credit = ", "is not valid TOML"),
        (
            "partial_credit = True",
            "TOML writes true and false in lower case; line 1 should read `partial_credit = true`",
        ),
        (
            "[hidden]\nin_total = False  # the hidden points apart",
            "line 2 should read `in_total = false  # the hidden points apart`",
        ),
        ("[weights]\nsdp = { shapes = None }", "TOML has no None; leave that key out (line 2)"),
        ("partial_credit = yes", "TOML's booleans are true and false; write true for yes (line 1)"),
    ],
)
def test_a_mistake_in_the_settings_is_said_in_words(text, words):
    with pytest.raises(SettingsError) as caught:
        parse(text, CHECKS, "grading.toml")
    assert words in str(caught.value)
    assert "\n" not in str(caught.value).strip() or "TOML" in str(caught.value)


def test_settings_set_points_weights_gates_and_the_hidden_checks_display():
    chosen = parse(
        "partial_credit = true\ntime_limit_factor = 3\n[points]\nsdp = 30\n"
        "[weights]\nsdp = { matches_reference = 3 }\n[gates]\nsdp = []\n"
        "[hidden]\nvisibility = 'visible'\nin_total = false\n[hidden.points]\np2 = 10\n",
        CHECKS,
    )
    assert chosen == GradingSettings(
        True, 3.0, {"sdp": 30.0}, {"sdp": {"matches_reference": 3.0}}, {"sdp": ()},
        "visible", False, {"p2": 10.0},
    )  # fmt: skip


@pytest.fixture
def partial_credit(monkeypatch):
    """The repository's exercises as if grading.toml said ``partial_credit = true``."""
    real = grading_settings.read

    def read(root, checks):
        return GradingSettings(**{**vars(real(root, checks)), "partial_credit": True})

    monkeypatch.setattr(grading_settings, "read", read)


def uniform_attention(q, k, v, mask=None):
    """Trivial code: every visible key gets the same weight (no scores, no softmax)."""
    import jax.numpy as jnp

    w = jnp.ones(q.shape[:-1] + k.shape[-2:-1], jnp.float32)
    if mask is not None:
        w = w * (jnp.broadcast_to(mask, w.shape) != 0)
    w = w / jnp.maximum(w.sum(-1, keepdims=True), 1)
    return w @ v, w


def naive_softmax_attention(q, k, v, mask=None):
    """Right but for scores in the thousands: exp without subtracting the row's maximum."""
    import jax.numpy as jnp

    scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = jnp.where(mask == 0, -1e9, scores)
    e = jnp.exp(scores)
    w = e / e.sum(-1, keepdims=True)
    return w @ v, w


def test_under_partial_credit_uniform_attention_earns_nothing(partial_credit):
    result = check("scaled_dot_product", scaled_dot_product=uniform_attention, verbose=False)
    passed = [c.check for c in result.checks if c.status == "passed"]
    assert "rows_sum_to_one" in passed and "masked_keys_get_zero_weight" in passed
    assert result.points == 0  # the gate, the comparison with the reference, failed


def test_under_partial_credit_a_near_miss_earns_its_share(partial_credit):
    result = check("scaled_dot_product", scaled_dot_product=naive_softmax_attention, verbose=False)
    failed = [c.check for c in result.checks if c.status != "passed"]
    assert failed == ["large_scores_stay_finite"]
    assert result.points == 12  # 4 of 5 checks of equal weight, of 15 points
    assert "[large_scores_stay_finite] (3 points)" in str(result)


def test_all_or_nothing_pays_the_near_miss_nothing():
    result = check("scaled_dot_product", scaled_dot_product=naive_softmax_attention, verbose=False)
    assert result.status == "failed" and result.points == 0
    assert "\n  [large_scores_stay_finite] the attention weights" in str(result)  # no worth


def test_a_broken_settings_file_stops_pytest_with_one_line(tmp_path):
    import shutil
    import subprocess
    import sys

    root = repo_root()
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("pyproject.toml", "solutions", "exercises", "tests"):
        src = root / name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, copy / name)
    (copy / "grading.toml").write_text("partial = true\n")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "multi_hot"],
        cwd=copy,
        env={"M2L_ROOT": str(copy), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0 and "unknown key partial;" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
    np.testing.assert_equal(run.returncode, 4)  # pytest's usage error


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("time_limit_factor = true", "must be a number, not true"),
        ('partial_credit = "yes"', 'must be true or false, not "yes"'),
        ("points = [1, false]", "not [1, false]"),
        ("[hidden]\nin_total = 'yes'", 'in_total must be true or false, not "yes"'),
        (
            '[hidden]\nvisibility = "after\\nlater"',  # a line break in the value
            'hidden, after_due_date, after_published, not "after\\nlater"',
        ),
        ('"partial credit" = true', 'unknown key "partial credit";'),
        ("[points]\n'sdp p' = 3", 'no exercise called "sdp p";'),
        ("[gates]\nmha = ['mask']", 'unknown check "mask"'),
        ("points = { sdp = true }", "[points] sdp must be a number, not true"),
        ("hidden = { visibility = 1979-05-27T07:32:00Z }", "not 1979-05-27 07:32:00+00:00"),
    ],
)
def test_errors_spell_values_as_toml_does(text, said):
    """The instructor wrote TOML: `true`, not Python's `True`; strings in double quotes."""
    with pytest.raises(SettingsError) as caught:
        parse(text, CHECKS)
    message = str(caught.value)
    assert said in message and "\n" not in message
    assert "True" not in message and "'" not in message  # Python's spellings
