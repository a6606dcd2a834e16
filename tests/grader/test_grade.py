"""grader.grade's run dirs (issue 25 item 5, "no role can tell which role it is in"): every run
goes in ``<out>/runs/<random token>``, its work dir the script's working directory, and
``<out>/runs/<role>`` is a link to it for people. Launches are faked: the runs are built signed
(tests.grader.builders) where the harness would have written them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import flags as flags_mod
from grader import grade as grade_mod
from grader import sealing, throughput
from grader.evidence import load_run
from grader.exercises import find
from grader.grade import GradeOptions, grade, opaque_run_dir, regrade, run_role
from grader.practice.grading import _named
from harness.errors import LaunchError
from harness.executor import Plain
from tests.grader.builders import make_run

TOKEN = re.compile(r"[0-9a-f]{16}")


def _fake_launch(monkeypatch, launched: list):
    def fake_launch(cfg):
        launched.append(cfg)
        make_run(Path(cfg.run_dir), world_size=cfg.nproc, steps=32, step_dt=0.05)
        return SimpleNamespace(status="ok")

    monkeypatch.setattr(grade_mod, "launch", fake_launch)


def test_no_role_can_tell_its_role_from_its_folders(tmp_path, monkeypatch):
    """A grading with throughput rounds: the main run, the warm-up, the timed rounds of the candidate
    and the baselines all run in ``<out>/runs/<16 hex digits>/work``; the names are links."""
    launched: list = []
    _fake_launch(monkeypatch, launched)

    def fake_reference(ex_, device, nproc, progress, **kw):  # the cache's entry, sealed as it would be
        ref = make_run(tmp_path / "ref", steps=32, step_dt=0.04)
        sealing.seal(ref)
        return load_run("reference", ref)

    monkeypatch.setattr(grade_mod, "reference_run", fake_reference)
    ex = find("slow-input-pipeline")
    out = tmp_path / "out"
    res = grade(ex, GradeOptions(kind="solution", out_dir=out, repeats=1, executor=Plain()))
    runs = (out / "runs").resolve()

    # every work dir has the same shape, and nothing in it says main, tp-round0-candidate, ...
    works = [Path(cfg.cwd) for cfg in launched]
    tp = ex.manifest.throughput  # repeats=1: main, the warm-ups of each role, then one round and the bound
    names = ["main", *(f"tp-warmup{w}-{role}" for w in range(tp.warmup_rounds) for role in throughput.ROLES),
             *(f"tp-round0-{role}" for role in (*throughput.ROLES, throughput.BOUND))]
    assert tp.bound and len(works) == len(names)
    rels = [os.path.relpath(os.path.realpath(w), os.path.realpath(out)) for w in works]
    assert all(re.fullmatch(r"runs/[0-9a-f]{16}/work", r) for r in rels), rels
    assert len(set(rels)) == len(rels)
    assert all(Path(cfg.run_dir) == Path(cfg.cwd).parent for cfg in launched)

    # the names people know are relative links to those folders, one per run
    links = {p.name: p for p in runs.iterdir() if p.is_symlink()}
    assert sorted(links) == sorted(names)
    assert all(TOKEN.fullmatch(os.readlink(p)) for p in links.values())
    assert {p.resolve() for p in links.values()} == {Path(cfg.run_dir).resolve() for cfg in launched}
    assert sorted(p.name for p in runs.iterdir() if not p.is_symlink()) == sorted(os.readlink(p) for p in links.values())

    # result.json records the real folders; the checks, the flags and the seal read those
    main = Path(res.run_dirs["main"])
    assert main.parent == runs and TOKEN.fullmatch(main.name) and not main.is_symlink()
    assert (out / "runs" / "main").resolve() == main and (out / "runs" / "main" / "run.json").is_file()
    assert sealing.verify(main).ok
    cand = flags_mod.candidate_run_dirs(res.run_dirs, out)
    assert cand["tp-round0-candidate"] == links["tp-round0-candidate"].resolve()
    assert all(TOKEN.fullmatch(Path(d).name) for name, d in cand.items())
    assert "tp-round0-broken" not in cand
    again = regrade(res, ex)  # from the recorded (real) folders
    assert again.environment_failure == res.environment_failure
    assert not any(f.kind == "sealed" for f in again.flags)
    # practice shows the link, the folder people find
    assert _named(res, "main") == str(out / "runs" / "main")


def test_run_role_launches_in_the_token_folder_and_leaves_the_name_as_a_link(tmp_path, monkeypatch):
    launched: list = []
    _fake_launch(monkeypatch, launched)
    sealed = []
    monkeypatch.setattr(grade_mod.sealing, "seal", lambda run_dir: sealed.append(run_dir))
    ex = find("checkpoint-resume")
    evs = {role: run_role(ex, ex.dir, tmp_path / "runs" / role, role, "cpu", 2) for role in ("main", "resume")}
    a, b = (Path(cfg.cwd) for cfg in launched)
    assert a.parent.parent == b.parent.parent == tmp_path / "runs" and a.name == b.name == "work"
    assert TOKEN.fullmatch(a.parent.name) and TOKEN.fullmatch(b.parent.name) and a != b
    for role, ev in evs.items():
        link = tmp_path / "runs" / role
        assert link.is_symlink() and os.readlink(link) == ev.run_dir.name  # relative
        assert ev.run_dir.parent == tmp_path / "runs" and not ev.run_dir.is_symlink()
        assert os.path.realpath(link) == os.path.realpath(ev.run_dir)
    assert sealed == [ev.run_dir for ev in evs.values()]


@pytest.mark.parametrize("old", ["link", "folder"])
def test_a_name_already_there_is_refused(tmp_path, monkeypatch, old):
    """As ``launch`` refuses a run dir that holds a run: an earlier run's folder or link stays as it was."""
    launched: list = []
    _fake_launch(monkeypatch, launched)
    name = tmp_path / "runs" / "main"
    name.parent.mkdir()
    if old == "link":
        (tmp_path / "runs" / "0123456789abcdef").mkdir()
        name.symlink_to("0123456789abcdef")
    else:
        name.mkdir()
        (name / "run.json").write_text("{}")
    before = sorted(os.listdir(tmp_path / "runs"))
    with pytest.raises(LaunchError, match="already exists"):
        run_role(find("memory-leak"), tmp_path, name, "main", "cpu", 2)
    assert not launched and sorted(os.listdir(tmp_path / "runs")) == before


def test_an_empty_folder_of_that_name_is_taken_over(tmp_path):
    (tmp_path / "runs" / "main").mkdir(parents=True)
    real = opaque_run_dir(tmp_path / "runs" / "main")
    assert (tmp_path / "runs" / "main").is_symlink() and (tmp_path / "runs" / "main").resolve() == real
    assert TOKEN.fullmatch(real.name) and real.is_dir() and not any(real.iterdir())
