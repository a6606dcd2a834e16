"""outputs_match on hand-written metrics logs: every row against the reference's, evidence that
never holds the reference's figure, and files that cannot be read."""

from __future__ import annotations

import json
import os

import pytest

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.builders import make_run
from tests.grader.fakes import FakeManifest, spec

REF = [{"step": s, "val_loss": 1.0 / s} for s in range(2, 34, 2)]


def _judge(tmp_path, rows=None, raw=None, fields=("val_loss",)):
    runs = {}
    for role, content in (("main", raw if raw is not None else rows), ("reference", REF)):
        root = make_run(tmp_path / role, steps=16)
        (root / "work" / "out").mkdir(parents=True)
        if content is not None:
            text = content if isinstance(content, str) else "".join(json.dumps(r) + "\n" for r in content)
            (root / "work" / "out" / "metrics.jsonl").write_text(text)
        runs[role] = load_run(role, root)
    return run_check(spec("outputs_match", path="out/metrics.jsonl", fields=list(fields)),
                     Context(FakeManifest(), runs))


@pytest.mark.parametrize("rows, passed, says", [
    (REF, True, "all 16 rows' val_loss match"),
    ([r | {"val_loss": r["val_loss"] * (1 + 1e-6)} for r in REF], True, "match"),
    (REF[::2], False, "has 8 rows where the job writes 16: no row for step 4, 8"),   # evaluates half as often
    ([r | {"val_loss": 0.35} for r in REF], False, "val_loss at step 2 differs from the reference run's by 30.00%"),
    ([r | {"val_loss": "nan"} for r in REF], False, "has no number in 'val_loss'"),
    (None, False, "out/metrics.jsonl does not exist"),
])
def test_outputs_match(tmp_path, rows, passed, says):
    c = _judge(tmp_path, rows)
    assert c.passed is passed and says in c.message, c.message


def test_the_evidence_never_holds_the_reference_values(tmp_path):
    c = _judge(tmp_path, [r | {"val_loss": 0.123} for r in REF])
    assert not c.passed and "0.5" not in json.dumps(c.evidence)  # 1/2, the reference's first value


@pytest.mark.parametrize("raw, says", [("not json\n", "line 1 is not JSON"), ("[1, 2]\n", "not a JSON object")])
def test_an_unreadable_log_says_why(tmp_path, raw, says):
    c = _judge(tmp_path, raw=raw)
    assert not c.passed and says in c.message


def test_a_fifo_is_refused_without_blocking(tmp_path):
    root = make_run(tmp_path / "main", steps=16)
    (root / "work" / "out").mkdir(parents=True)
    os.mkfifo(root / "work" / "out" / "metrics.jsonl")
    ref = make_run(tmp_path / "reference", steps=16)
    (ref / "work" / "out").mkdir(parents=True)
    (ref / "work" / "out" / "metrics.jsonl").write_text(json.dumps(REF[0]) + "\n")
    c = run_check(spec("outputs_match", path="out/metrics.jsonl", fields=["val_loss"]),
                  Context(FakeManifest(), {"main": load_run("main", root), "reference": load_run("reference", ref)}))
    assert not c.passed and "is not a regular file" in c.message


@pytest.mark.parametrize("report, passed, says", [
    ({"steps": 32, "final_val_loss": 0.5}, True, "out/report.json: final_val_loss match"),
    ({"steps": 32, "final_val_loss": 0.0}, False, "out/report.json: final_val_loss differs from the reference run's by"),
    ({"steps": 32, "final_val_loss": float("nan")}, False, "out/report.json has no number in 'final_val_loss'"),
    (None, False, "the job's output out/report.json does not exist"),
])
def test_a_final_report_is_judged_too(tmp_path, report, passed, says):
    runs = {}
    for role, rep in (("main", report), ("reference", {"steps": 32, "final_val_loss": 0.5})):
        root = make_run(tmp_path / role, steps=16)
        (root / "work" / "out").mkdir(parents=True)
        (root / "work" / "out" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in REF))
        if rep is not None:  # written as a script writes a report: indented, over several lines
            (root / "work" / "out" / "report.json").write_text(json.dumps(rep, indent=2))
        runs[role] = load_run(role, root)
    res = run_check(spec("outputs_match", path="out/metrics.jsonl", fields=["val_loss"],
                         also=[{"path": "out/report.json", "key": "steps", "fields": ["final_val_loss"]}]),
                    Context(FakeManifest(), runs))
    assert res.passed is passed and says in res.message
    assert "0.5" not in json.dumps(res.evidence)  # never the reference's figure


def test_a_final_report_is_not_judged_when_the_run_never_reached_its_end(tmp_path):
    runs = {}
    for role, status in (("main", "failed"), ("reference", "ok")):
        root = make_run(tmp_path / role, steps=16, status=status)
        (root / "work" / "out").mkdir(parents=True)
        (root / "work" / "out" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in REF))
        runs[role] = load_run(role, root)
    res = run_check(spec("outputs_match", path="out/metrics.jsonl", fields=["val_loss"],
                         also=[{"path": "out/report.json", "key": "steps", "fields": ["final_val_loss"]}]),
                    Context(FakeManifest(), runs))
    assert res.passed and "out/report.json not judged: the run did not reach its end" in res.message
