"""Tests of m2l_nlp.grading.local.notebook: ``check()`` on a notebook's objects (its messages,
the checking flags, the CPU beside an accelerator, compiled programs kept on disk)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from m2l_nlp.impl import repo_root

ROOT = repo_root()


def _notebook(source: str) -> dict:
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<ipython-input-1>", "exec"), namespace)
    exec("from m2l_nlp.grading import check", namespace)
    return namespace


def test_check_in_a_notebook(capsys, _apply):
    nb = _notebook(_apply(("scaled_dot_product", "softmax over the queries")))
    exec("result = check('scaled_dot_product', scaled_dot_product)", nb)
    result = nb["result"]
    assert result.status == "failed" and result.points == 0
    out = capsys.readouterr().out
    assert "scaled_dot_product: failed (1/5 checks passed" in out and "last axis" in out
    # sinusoidal_encoding is found in the notebook's namespace
    exec("result = check('positional_encoding', PositionalEncoding)", nb)
    assert (
        nb["result"].status == "passed" and "positional_encoding: passed" in capsys.readouterr().out
    )
    with pytest.raises(TypeError, match="not one of EncoderBlock"):
        exec("check('encoder_block', MultiheadAttention)", nb)
    with pytest.raises(KeyError, match="no exercise called 'attention'"):
        exec("check('attention', MultiheadAttention)", nb)


def test_check_in_a_notebook_gives_its_programs_the_checking_flags(monkeypatch):
    """A notebook's kernel starts without the checking flags (it trains too), so check()
    compiles its programs with them as per-program options (devices.checking_compiler_options;
    under pytest XLA_FLAGS has them and there are none). A made-up option, which XLA refuses
    by name, shows which programs receive them: the checks that compile fail on it."""
    from m2l_nlp import devices

    made_up = "xla_m2l_nlp_no_such_option"
    monkeypatch.setattr(devices, "checking_compiler_options", lambda: {made_up: 1})
    nb = _notebook((ROOT / "solutions" / "practical2_transformers.py").read_text())
    exec("result = check('multihead_attention', MultiheadAttention, verbose=False)", nb)
    checks = nb["result"].checks
    assert all(c.status != "passed" and made_up in c.message for c in checks), checks
    monkeypatch.setattr(devices, "checking_compiler_options", lambda: {})
    exec("result = check('multihead_attention', MultiheadAttention, verbose=False)", nb)
    assert nb["result"].status == "passed"


def test_check_runs_the_students_code_on_the_cpu_beside_an_accelerator(monkeypatch):
    """In a GPU kernel (pretended here) check() runs the checks on the CPU: the student's
    code sees the CPU as its default device, and passes as it would there."""
    import jax

    nb = _notebook((ROOT / "solutions" / "practical2_transformers.py").read_text())
    exec(
        "seen = []\ndef scaled_dot_product(*a, _f=scaled_dot_product, **k):\n"
        "    seen.append(jax.config.jax_default_device)\n    return _f(*a, **k)",
        nb,
    )
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    exec("result = check('scaled_dot_product', scaled_dot_product, verbose=False)", nb)
    assert nb["result"].status == "passed", nb["result"].checks
    assert nb["seen"] and set(nb["seen"]) == {jax.devices("cpu")[0]}


def test_check_in_a_notebook_keeps_every_program_on_disk(tmp_path):
    """In a kernel whose setup cell named a compilation cache (threshold: JAX's default 1 s),
    check() keeps every program it compiles, so the same cell run again compiles nothing
    new; the kernel's threshold comes back afterwards. A fresh interpreter, as a kernel."""
    script = textwrap.dedent(
        """
        import json, os
        from pathlib import Path
        import jax
        from m2l_nlp.grading import check
        from m2l_nlp.grading.checks.catalog import get_exercise
        from m2l_nlp.grading.checks.runner import reference

        ref = reference("practical2_transformers")
        parts = [getattr(ref, t) for t in get_exercise("scaled_dot_product").targets]
        folder = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
        files = []
        for _ in range(2):
            assert check("scaled_dot_product", *parts, verbose=False).status == "passed"
            files.append(len(list(folder.iterdir())))
        after = jax.config.values["jax_persistent_cache_min_compile_time_secs"]
        print(json.dumps({"files": files, "after": after}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "programs")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["files"][0] >= 5 and found["files"][1] == found["files"][0], found
    assert found["after"] == 1.0
