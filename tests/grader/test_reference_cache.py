"""The reference run's cache under gradings side by side (two interviews at once, pytest-xdist): a
grading that finds the entry made by another meanwhile keeps that one, and a stale entry is
replaced without a half-removed folder left for a reader. The launch itself is faked: what is
tested is where the finished run goes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from grader import grade
from grader.evidence import TamperedRun
from grader.exercises import find


@pytest.fixture
def faked(private_kit, monkeypatch, tmp_path):
    """``reference_run`` with its launch faked: each run dir holds ``run.json`` naming who made it,
    and loading one returns that name. ``others`` runs inside the launch, as a grading beside it."""
    others = []

    def load_run(role, path, sealed=False):
        text = (path / "run.json").read_text()
        if text == "tampered":
            raise TamperedRun("changed after it was sealed")
        return SimpleNamespace(status="ok", who=text)

    def run_role(ex, sub_dir, run_dir, *a, **k):
        run_dir.mkdir(parents=True)
        (run_dir / "run.json").write_text("this grading")
        for other in others:
            other()
        return SimpleNamespace(status="ok")

    monkeypatch.setattr(grade, "load_run", load_run)
    monkeypatch.setattr(grade, "run_role", run_role)
    monkeypatch.setattr(grade, "harness_failed", lambda ev: False)
    monkeypatch.setattr(grade, "assemble", lambda *a, **k: SimpleNamespace(dir=tmp_path / "src"))
    return others


def _cache(slug):
    from grader.exercises import kit_root

    return kit_root() / ".trainwreck" / "cache" / slug


def test_an_entry_another_grading_made_meanwhile_is_kept_and_this_run_dropped(faked):
    ex = find("memory-leak")
    folder = _cache("memory-leak")


    def put_theirs():
        tmp = next(p for p in folder.iterdir() if ".tmp" in p.name and not p.name.endswith("-src"))
        theirs = folder / tmp.name.split(".tmp")[0]
        theirs.mkdir()
        (theirs / "run.json").write_text("another grading")
        (theirs / "more").write_text("x")  # not empty: a rename onto it fails

    faked.append(put_theirs)
    ev = grade.reference_run(ex, "cpu", 2, lambda s: None)
    assert ev.who == "another grading"
    assert [p.name for p in folder.iterdir() if ".tmp" in p.name or ".stale" in p.name] == []


def test_a_stale_entry_is_replaced_and_nothing_is_left_beside_it(faked):
    ex = find("memory-leak")
    first = grade.reference_run(ex, "cpu", 2, lambda s: None)
    assert first.who == "this grading"
    (entry,) = list(_cache("memory-leak").iterdir())
    (entry / "run.json").write_text("tampered")
    notes: list[str] = []
    again = grade.reference_run(ex, "cpu", 2, lambda s: None, notes=notes)
    assert again.who == "this grading" and "changed after it was sealed" in notes[0]
    assert [p.name for p in _cache("memory-leak").iterdir()] == [entry.name]
