"""m2l_nlp.grading.classroom.commands: ``m2l-nlp class import | export`` as an instructor
runs them."""

from __future__ import annotations

import csv
import json

from m2l_nlp.cli import main


def test_an_export_is_imported_then_written_as_csv_whose_totals_are_the_results(
    export, tmp_path, capsys
):
    book = tmp_path / "book.sqlite"
    assert main(["class", "import", str(export), "--gradebook", str(book)]) == 0
    said = capsys.readouterr().out
    assert "imported 4 submissions (1 without results)" in said and "6 checks" in said
    assert (
        main(["class", "export", "--gradebook", str(book), "--csv", str(tmp_path / "g.csv")]) == 0
    )
    assert "5 students' rows from 4 submissions" in capsys.readouterr().out
    with open(tmp_path / "g.csv", newline="", encoding="utf-8") as handle:
        totals = {r["Submission"]: r["Total"] for r in csv.DictReader(handle)}
    metadata = (export / "submission_metadata.yml").read_text()
    for line in metadata.splitlines():
        if ":results:" in line:  # each total is the score of the results it came from
            results = json.loads(line.split(":results: ", 1)[1])
            assert f"{results['score']:g}" in totals.values()
    assert totals["submission_104"] == ""


def test_the_default_gradebook_lies_beside_the_export(export, capsys):
    assert main(["class", "import", str(export)]) == 0
    assert (export.parent / "gradebook.sqlite").is_file()
    assert f"--gradebook {export.parent / 'gradebook.sqlite'}" in capsys.readouterr().out


def test_bad_input_gets_one_line_and_exit_status_2(tmp_path, capsys):
    assert main(["class", "import", str(tmp_path / "none.zip")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    csv_path = tmp_path / "g.csv"
    assert (
        main(["class", "export", "--gradebook", str(tmp_path / "x"), "--csv", str(csv_path)]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "m2l-nlp class import EXPORT" in err
    assert not csv_path.exists()


def test_a_report_is_written_from_the_gradebook(export, tmp_path, capsys):
    book = tmp_path / "book.sqlite"
    assert main(["class", "import", str(export), "--gradebook", str(book)]) == 0
    out = tmp_path / "report"
    assert main(["class", "report", "--gradebook", str(book), "--out", str(out)]) == 0
    assert f"open {out / 'report.html'}" in capsys.readouterr().out
    markdown = (out / "report.md").read_text()
    assert "| tfidf | matches_reference | 67% |" in markdown and "extra" not in markdown
    assert (
        main(
            ["class", "report", "--gradebook", str(book), "--out", str(out), "--due", "2026-01-01"]
        )
        == 0
    )
    assert "| extra | 5 |" in (out / "report.md").read_text()  # after the due date


def test_a_dry_run_needs_a_regrade(export, capsys):
    assert main(["class", "grade", str(export), "--dry-run"]) == 2
    assert "--dry-run goes with --regrade" in capsys.readouterr().err


def test_similar_lists_the_pair_that_shares_its_code_and_says_it_is_a_lead(tmp_path, capsys):
    from m2l_nlp.impl import repo_root

    solution = (repo_root() / "solutions" / "practical1_baselines.py").read_text()
    stub = (repo_root() / "exercises" / "practical1_baselines.py").read_text()
    for name, text in (("ann", solution), ("ben", solution), ("cat", stub)):
        (tmp_path / "class" / name).mkdir(parents=True)
        (tmp_path / "class" / name / "practical1_baselines.py").write_text(text)
    out = tmp_path / "report"
    assert main(["class", "similar", str(tmp_path / "class"), "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith("Similarity is a lead to read, not a verdict")
    assert "ann ~ ben: 100% / 100% of their code shared" in said and "cat" not in said
    assert "1 of 3 pairs" in said and (out / "similar.html").is_file()
