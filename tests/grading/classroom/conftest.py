"""A small Gradescope export (its shape: ``submission_metadata.yml`` beside one folder per
submission), made up: no real student's data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _results(scores: dict[str, float], hidden: float | None = None) -> dict:
    """results.json as the trusted grader writes it: one test per exercise (10 points
    each), the score, and every check's verdict."""
    tests = [
        {
            "name": name,
            "score": s,
            "max_score": 10.0,
            "status": "passed" if s == 10 else "failed",
            "tags": ["practical1_baselines", name],
        }
        for name, s in scores.items()
    ]
    if hidden is not None:
        tests.append(
            {
                "name": "extra (hidden)",
                "score": hidden,
                "max_score": 5.0,
                "status": "passed",
                "tags": ["practical1_baselines", "extra", "hidden"],
            }
        )
    checks = [
        {
            "exercise": name,
            "check": "matches_reference",
            "status": "passed" if s == 10 else "failed",
        }
        for name, s in scores.items()
    ]
    total = sum(scores.values()) + (hidden or 0)
    return {"score": total, "tests": tests, "extra_data": {"seed": 7, "checks": checks}}


def _yaml_results(results: dict) -> str:
    """The results as the export's YAML carries them (JSON is YAML), indented under :results:."""
    return "  :results: " + json.dumps(results) + "\n"


@pytest.fixture
def export(tmp_path) -> Path:
    """Four submissions: two graded (one with a hidden exercise), a group of two whose
    results are partial and one of whose names would be a spreadsheet formula, and one that
    Gradescope did not grade."""
    folder = tmp_path / "assignment_1_export"
    folder.mkdir()
    entries = {
        "submission_101": (
            [("Ada Lovelace", "ada@example.org", "1001")],
            _results({"multi_hot": 10, "tfidf": 10}, hidden=5),
        ),
        "submission_102": (
            [("Alan Turing", "alan@example.org", "1002")],
            _results({"multi_hot": 10, "tfidf": 0}),
        ),
        "submission_103": (
            [
                ('=HYPERLINK("http://x")', "eve@example.org", "1003"),
                ("Grace Hopper", "grace@example.org", "1004"),
            ],
            _results({"multi_hot": 5, "tfidf": 2.5}),
        ),
        "submission_104": ([("Edsger Dijkstra", "ed@example.org", "1005")], None),
    }
    text = ""
    for key, (people, results) in entries.items():
        (folder / key).mkdir()
        text += f"{key}:\n  :submitters:\n"
        for name, email, sid in people:
            text += f"  - :name: {json.dumps(name)}\n    :email: {email}\n    :sid: '{sid}'\n"
        text += "  :created_at: 2026-11-30 12:34:56.000000000 -08:00\n"
        if results is not None:
            text += _yaml_results(results)
    (folder / "submission_metadata.yml").write_text(text, encoding="utf-8")
    return folder
