"""Grading untrusted code (issue 11), the grader's side, without launching: memory judged from the
parent's outside samples, run dirs and the reference cache sealed, flags for a human. The
refusals and --no-sandbox through the CLI: tests/grader/commands/test_isolation_cli.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grader import flags as flags_mod
from grader import sealing
from grader.checks import Context, run_check
from grader.evidence import EnvironmentFailure, TamperedRun, load_run
from grader.exercises import find
from grader.grade import reference_run, regrade, run_role
from grader.result import GradeResult
from harness import rundir
from harness.executor import Sandboxed
from tests.grader.fakes import FakeManifest, spec
from tests.grader.rundirs import RunDirBuilder

SLUG = "memory-leak"


# ---- memory from outside ---------------------------------------------------------------------

def sandboxed_run(root: Path, inside_rss, outside_rss, steps: int = 60, sample_every: int = 2,
                  received=lambda s: float(s) + 0.01, cpu=float) -> Path:
    """Step records whose own ``rss_mb`` says ``inside_rss(s)``, received at ``received(s)``, and the
    parent's samples of the rank's processes (``proc.jsonl``) saying ``outside_rss(t)`` and ``cpu(s)``
    seconds of CPU, one every ``sample_every`` steps."""
    b = RunDirBuilder(root, sandbox={"isolated": True})
    for r in range(2):
        for s in range(1, steps + 1):
            b.event(r, kind="step", attempt=0, t=float(s), rt=received(s), step=s, dt=1.0,
                    rss_mb=inside_rss(s), lr=[0.1])
            if s % sample_every == 0:
                b.add(r, "proc.jsonl", a=0, t=float(s) + 0.3, pid=100 + r, rss_mb=outside_rss(s),
                      tree_rss_mb=outside_rss(s), cpu_s=cpu(s), tree_cpu_s=cpu(s), threads=4, procs=1)
        b.exit(r, t=steps + 1.0, steps=steps)
    return b.build()


def memory(tmp_path: Path, **kw):
    ev = load_run("main", sandboxed_run(tmp_path / "main", **kw))
    return run_check(spec("memory_flat", warmup_steps=5, max_slope_mb_per_step=0.05), Context(FakeManifest(), {"main": ev}))


def test_a_leak_hidden_from_what_the_rank_reports_is_seen_from_outside(tmp_path):
    c = memory(tmp_path, inside_rss=lambda s: 100.0, outside_rss=lambda s: 300.0 + 2.0 * s)
    assert not c.passed and "sampled from outside" in c.message and "+2.000 MB per step" in c.message, c.message
    assert c.evidence["ranks"][0]["outside"] is True


def test_what_the_rank_reports_of_itself_is_not_what_is_judged(tmp_path):
    c = memory(tmp_path, inside_rss=lambda s: 100.0 + 5.0 * s, outside_rss=lambda s: 300.0)
    assert c.passed, c.message


def test_a_run_too_short_for_two_outside_samples_is_judged_from_what_the_rank_reported(tmp_path):
    c = memory(tmp_path, inside_rss=lambda s: 100.0 + 2.0 * s, outside_rss=lambda s: 300.0, sample_every=30)
    assert not c.passed and not c.environment and "as the rank reported it" in c.message, c.message
    assert c.evidence["ranks"][0]["outside"] is False


def test_the_slope_is_drawn_through_the_sampled_span(tmp_path):
    """Samples only from step 20 on: the steps before would all repeat the first sample and halve
    the slope; they are left out of it."""
    def outside(s):
        return 300.0 + 1.0 * s

    ev = load_run("main", sandboxed_run(tmp_path / "main", inside_rss=lambda s: 100.0, outside_rss=outside,
                                        steps=80, sample_every=1))
    # drop the samples of the first 40 steps
    from grader.evidence.memory import rank_series

    ev.proc_samples(0)
    ev._proc[0] = [x for x in ev._proc[0] if x["t"] > 40]
    series = rank_series(ev, 0)
    assert series.outside and series.sampled[0] == 40
    from grader.checks.memory_flat import slope

    assert abs(slope(series.after(5, 20)) - 1.0) < 1e-6
    assert slope(series.values[5:]) < 0.9  # what the clamped steps would have made of it


def test_interpolation_between_samples():
    from grader.evidence.memory import interpolate

    ts, ys = [0.0, 1.0, 2.0], [10.0, 20.0, 20.0]
    assert [interpolate(ts, ys, t) for t in (-1.0, 0.0, 0.5, 1.5, 3.0)] == [10.0, 10.0, 15.0, 20.0, 20.0]


# ---- sealed run dirs and cache entries -------------------------------------------------------

def built(tmp_path: Path) -> Path:
    b = RunDirBuilder(tmp_path / "run")
    for r in range(2):
        b.event(r, kind="step", attempt=0, t=1.0, step=1, dt=0.1, rss_mb=1.0, lr=[0.1])
        b.exit(r, t=2.0, steps=1)
    b.file("out/metrics.jsonl", raw=b'{"val_loss": 1.0}\n')
    return b.build()


@pytest.mark.parametrize("tamper, says", [
    (lambda d: (d / "ranks" / "0" / "events.jsonl").write_text("forged\n"), "ranks/0/events.jsonl was changed"),
    (lambda d: (d / "work" / "out" / "metrics.jsonl").unlink(), "work/out/metrics.jsonl was removed"),
    (lambda d: (d / "ranks" / "1" / "final_params.safetensors").write_bytes(b"x"),
     "ranks/1/final_params.safetensors was added"),
    (lambda d: os.symlink("/etc/passwd", d / "work" / "ckpt.pt"), "work/ckpt.pt was added"),
    (lambda d: (d / "seal.json").unlink(), "never sealed"),
    (lambda d: (d / "seal.json").write_text(json.dumps({**json.loads((d / "seal.json").read_text()), "files": {}})),
     "not written with this kit's key"),
])
def test_a_sealed_run_dir_that_changed_is_detected(tmp_path, tamper, says):
    d = built(tmp_path)
    sealing.seal(d)
    assert sealing.verify(d).ok
    tamper(d)
    check = sealing.verify(d)
    assert not check.ok and says in check.message, check.message
    with pytest.raises(TamperedRun, match="changed after it was sealed"):
        load_run("main", d, sealed=True)


def test_the_seal_walk_never_opens_a_fifo(tmp_path):
    d = built(tmp_path)
    os.mkfifo(d / "work" / "trap.pt")
    sealing.seal(d)  # would block forever if it opened the FIFO
    assert sealing.verify(d).ok


def test_regrading_a_tampered_grading_is_an_environment_failure(tmp_path):
    d = built(tmp_path)
    sealing.seal(d)
    res = GradeResult(exercise=SLUG, submission={"kind": "solution"}, passed=True, score=1.0,
                      run_dirs={"main": str(d)}, out_dir=str(tmp_path), sealed=True)
    again = regrade(res, find(SLUG))
    assert not any(c.name == "environment" for c in again.checks)
    (d / "ranks" / "0" / "events.jsonl").write_text((d / "ranks" / "0" / "events.jsonl").read_text() + "\n")
    again = regrade(res, find(SLUG))
    assert again.environment_failure and again.exit_code == 2
    env = again.check("environment")
    assert "changed after it was sealed" in env.message and "ranks/0/events.jsonl was changed" in env.message
    assert any(f.kind == "sealed" and f.run == "main" for f in again.flags)


def test_a_tampered_cache_entry_is_reported_and_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr("grader.grade.kit_root", lambda: tmp_path / "kit")
    calls = []

    def fake_run_role(ex_, script_dir, run_dir, role, device, nproc, **kw):
        calls.append(run_dir)
        b = RunDirBuilder(run_dir)
        for r in range(2):
            b.exit(r, steps=1)
        b.build()
        sealing.seal(run_dir)
        return load_run(role, run_dir)

    monkeypatch.setattr("grader.grade.run_role", fake_run_role)
    ex = find(SLUG)
    first = reference_run(ex, "cpu", 2, lambda s: None, executor=Sandboxed())
    assert len(calls) == 1
    reference_run(ex, "cpu", 2, lambda s: None, executor=Sandboxed())
    assert len(calls) == 1  # a cache hit
    rundir.atomic_write_json(first.run_dir / "run.json", {**first.run, "status": "ok", "poisoned": True})
    notes: list[str] = []
    again = reference_run(ex, "cpu", 2, lambda s: None, executor=Sandboxed(), notes=notes)
    assert len(calls) == 2 and "run.json was changed" in notes[0] and "run again" in notes[0]
    assert "poisoned" not in again.run and sealing.verify(again.run_dir).ok


class _Launched(Exception):
    pass


@pytest.mark.parametrize("env, expect", [
    (None, "131072"),  # every grading run: glibc's moving threshold read as an RSS slope
    ({"TRAINWRECK_FINGERPRINT": "1"}, "131072"),  # with the role's own variables
    ({"TRAINWRECK_MMAP_THRESHOLD": "65536"}, "65536"),  # a role that sets its own wins
])
def test_every_grading_run_has_a_fixed_mmap_threshold(tmp_path, monkeypatch, env, expect):
    seen = []

    def fake_launch(cfg):
        seen.append(cfg)
        raise _Launched

    monkeypatch.setattr("grader.grade.launch", fake_launch)
    with pytest.raises(_Launched):
        run_role(find(SLUG), tmp_path, tmp_path / "run", "main", "cpu", 2, env=env)
    assert seen[0].env["TRAINWRECK_MMAP_THRESHOLD"] == expect  # applied by the bootstrap (mallopt)
    assert "MALLOC_MMAP_THRESHOLD_" not in seen[0].env  # a variable the script would see


def test_a_users_own_run_launches_with_glibcs_own_threshold(tmp_path, monkeypatch):
    """`trainwreck run` launches as torchrun does: the fixed threshold is the grader's, not the harness's."""
    from harness.launch import LaunchConfig, build_env
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("TRAINWRECK_MMAP_THRESHOLD", raising=False)
    cfg = LaunchConfig(script=tmp_path / "train.py", cwd=tmp_path)
    env = build_env(cfg, tmp_path, "cpu")
    assert "MALLOC_MMAP_THRESHOLD_" not in env and "TRAINWRECK_MMAP_THRESHOLD" not in env


@pytest.mark.parametrize("statuses, runs, raises", [
    (["hung", "ok"], 2, False),  # a failed reference run is run once more, and said so
    (["failed", "failed"], 2, True),  # twice: the machine is broken, an environment failure
    (["ok"], 1, False),
])
def test_a_failed_reference_run_is_run_once_more(tmp_path, monkeypatch, statuses, runs, raises):
    monkeypatch.setattr("grader.grade.kit_root", lambda: tmp_path / "kit")
    calls = []

    def fake_run_role(ex_, script_dir, run_dir, role, device, nproc, **kw):
        b = RunDirBuilder(run_dir, status=statuses[len(calls)])
        calls.append(run_dir)
        for r in range(2):
            b.exit(r, steps=1)
        b.build()
        return load_run(role, run_dir)

    monkeypatch.setattr("grader.grade.run_role", fake_run_role)
    notes: list[str] = []
    if raises:
        with pytest.raises(EnvironmentFailure, match="did not complete"):
            reference_run(find(SLUG), "cpu", 2, lambda s: None, notes=notes)
    else:
        ev = reference_run(find(SLUG), "cpu", 2, lambda s: None, notes=notes)
        assert ev.status == "ok"
    assert len(calls) == runs
    assert len(notes) == (runs - 1) and all("run once more" in n for n in notes)
    kept = list((tmp_path / "kit" / ".trainwreck" / "cache" / SLUG).glob("*-failed*"))
    assert len(kept) == runs - 1  # the failed run kept for whoever debugs it, never as a cache entry


# ---- flags for a human -----------------------------------------------------------------------

def test_flags_from_a_sandboxed_run_and_the_source(tmp_path):
    run = tmp_path / "runs" / "main"
    run.mkdir(parents=True)
    rundir.atomic_write_json(run / "sandbox.json", {
        "isolated": True,
        "tampering": ["rank 0: 3 lines that are no record", "2 connection(s) from processes that are no rank"],
        "strays": [{"pid": 5, "t": 1.0, "cmdline": "python -c daemon\x1b[31m"}],
        "removed": [{"path": "ckpt.pt", "kind": "fifo"}],
        "violations": [{"what": "memory", "message": "rank 1 used 900 MiB, over the memory limit of 800 MiB"}],
    })
    src = tmp_path / "sub"
    src.mkdir()
    (src / "train.py").write_text("import os\nrun = os.environ['TRAINWRECK_RUN_DIR']\n")
    found = flags_mod.gather(src, ["train.py"], {"main": run}, ["the cached reference changed"])
    kinds = [f.kind for f in found]
    assert kinds == ["source", "tampering", "tampering", "stray", "trap", "limit", "sealed"]
    assert found[0].where == "train.py:2" and "TRAINWRECK_RUN_DIR" in found[0].what
    assert all(f.run == "main" for f in found[1:6])
    assert "\x1b" not in found[3].what and "rank 1 used 900 MiB" in found[5].what


def test_flags_read_only_the_candidates_runs(tmp_path):
    for name in ("tp-0-candidate", "tp-0-broken", "tp-0-reference", "tp-0-bound"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    dirs = flags_mod.candidate_run_dirs({"main": "/m", "ws1": "/w", "reference": "/r"}, tmp_path)
    assert sorted(dirs) == ["main", "tp-0-candidate", "ws1"]


def test_an_unsandboxed_run_has_no_run_flags(tmp_path):
    rundir.atomic_write_json(tmp_path / "sandbox.json", {"isolated": False, "tampering": ["x"]})
    assert flags_mod.run_flags("main", tmp_path) == []
