"""step_time_tail and checkpoint_fresh on hand-built signed run dirs: a periodic stall and its
evidence, and every way of "fixing" the stall by checkpointing less, later, smaller or staler."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from grader.manifest import CheckpointFresh, ManifestError, StepTimeTail, load_manifest
from harness import rundir
from tests.grader.builders import KEY

STEPS, K, SLACK, DT = 60, 10, 2, 0.1
KIT = Path(__file__).resolve().parents[2]


def fp(step: int) -> float:
    """The fingerprint of the one parameter 'w' after ``step`` updates."""
    return 1.0 + 0.01 * step


def weights(step: int) -> torch.Tensor:
    return torch.full((4,), fp(step))


def make_stall_run(root: Path, dts: list[float] | None = None, saves: list[dict[str, Any]] | None = None,
                   final_ckpt: dict[str, Any] | None = None, fingerprints: bool = True,
                   events: list[dict[str, Any]] | None = None) -> Path:
    """A finished 2-rank run: step s of rank r ends at sum(dts[:s]); ``saves`` are rank 0's traced
    file operations ({op, path, src, begin, end, step, held, ...} with times in seconds and paths
    relative to the working dir); ``final_ckpt`` is what the script left at out/ckpt.pt."""
    dts = dts or [DT] * STEPS
    root.mkdir(parents=True, exist_ok=True)
    work = root / "work"
    for r in range(2):
        d = rundir.rank_dir(root, r)
        ev = rundir.RecordWriter(d / rundir.EVENTS, KEY)
        ev.write({"kind": "start", "attempt": 0, "t": 0.0, "pid": 1, "rank": r})
        if fingerprints:
            ev.write({"kind": "fingerprint0", "attempt": 0, "t": 0.0, "fp": fp(0)})
        t = 0.0
        for s, dt in enumerate(dts, start=1):
            t += dt
            rec = {"kind": "step", "attempt": 0, "t": t, "step": s, "dt": dt, "rss_mb": 100.0, "lr": [0.1]}
            if fingerprints:
                rec["fp"] = fp(s)
            ev.write(rec)
        for e in events or [] if r == 0 else []:  # rank 0's other signed events (store uploads)
            ev.write({"attempt": 0, "t": t, **e, **({"path": str(work / e["path"])} if "path" in e else {})})
        torch.save({"w": weights(len(dts))}, d / rundir.FINAL_PARAMS)
        ev.write({"kind": "exit", "attempt": 0, "t": t + 1, "status": "ok", "code": 0, "steps": len(dts),
                  "error": None, "params_sha256": rundir.sha256_file(d / rundir.FINAL_PARAMS), "numel": 4})
        ev.close()
        sv = rundir.RecordWriter(d / rundir.SAVES, KEY)
        for seq, o in enumerate(saves or [] if r == 0 else [], start=1):
            begin = {"a": 0, "seq": seq, "ph": "begin", "op": o.get("op", "save"), "path": str(work / o["path"]),
                     "step": o["step"], "main": o.get("main", True), "t": o["begin"]}
            if o.get("src"):
                begin["src"] = str(work / o["src"])
            if begin["op"] == "save" and fingerprints:
                held = o.get("held", o["step"])
                begin["fp"] = o.get("fp", {"model.w": fp(held), "optimizer.state.0.exp_avg": 0.5})
                begin["keys"] = o.get("keys", ["model", "optimizer", "scheduler", "step"])
            sv.write(begin)
            if o.get("end") is not None:
                end = {"a": 0, "seq": seq, "ph": "end", "op": begin["op"], "dur": o["end"] - o["begin"],
                       "bytes": o.get("bytes", 1000), "step": o["step"], "main": True, "t": o["end"]}
                if o.get("fp_changed"):
                    end["fp_changed"] = True
                sv.write(end)
        sv.close()
    if final_ckpt is not None:
        (work / "out").mkdir(parents=True, exist_ok=True)
        torch.save(final_ckpt, work / "out" / "ckpt.pt")
    rundir.atomic_write_json(root / "run.json", {"schema_version": 1, "key": KEY, "status": "ok",
                                                 "world_size": 2, "wall_s": 1.0})
    return root


def full_state(step: int) -> dict[str, Any]:
    return {"model": {"w": weights(step)}, "optimizer": {"state": {}}, "scheduler": {}, "step": step}


def t_end(step: int) -> float:
    return step * DT


def atomic(step: int, held: int | None = None, took: float = 0.02, copy: bool = False, **kw) -> list[dict]:
    """A checkpoint of ``step`` written to a temporary file right after the step, renamed into place,
    and (``copy``) copied into the artifact store."""
    b = t_end(step) + 0.001
    ops = [{"path": "out/ckpt.pt.tmp", "begin": b, "end": b + took, "step": step, "held": held or step, **kw},
           {"op": "rename", "path": "out/ckpt.pt", "src": "out/ckpt.pt.tmp", "begin": b + took,
            "end": b + took + 0.001, "step": step}]
    if copy:
        ops += [{"op": "copy", "path": f"artifacts/.c{step}.partial", "src": "out/ckpt.pt",
                 "begin": b + took + 0.002, "end": b + took + 0.01, "step": step},
                {"op": "rename", "path": f"artifacts/c{step}.pt", "src": f"artifacts/.c{step}.partial",
                 "begin": b + took + 0.011, "end": b + took + 0.012, "step": step}]
    return ops


def every(k: int, **kw) -> list[dict]:
    return [o for s in range(k, STEPS + 1, k) for o in atomic(s, **kw)]


def fresh(**kw) -> CheckpointFresh:
    args = dict(name="checkpoint_fresh", path="out/ckpt.pt", interval=K, slack=SLACK, key="model",
                require_keys=["model", "optimizer", "scheduler", "step"])
    return CheckpointFresh(**{**args, **kw})


def judge(tmp_path: Path, spec, reference: dict | None = None, **run) -> Any:
    runs = {"main": load_run("main", make_stall_run(tmp_path / "main", **run))}
    if reference is not None:
        runs["reference"] = load_run("reference", make_stall_run(tmp_path / "reference", **reference))
    return run_check(spec, Context(None, runs))


# -- checkpoint_fresh ------------------------------------------------------------------------------

BACKGROUND = [o for s in range(K, STEPS + 1, K)  # written while the next steps run, holding the snapshot's step
              for o in atomic(s, took=1.5 * DT, main=False)]


@pytest.mark.parametrize("saves, final, passed, says", [
    (every(K), full_state(STEPS), True, "out/ckpt.pt held a complete checkpoint at most 10 + 2 steps old"),
    (BACKGROUND, full_state(STEPS), True, "states of steps 10, 20"),                 # in the background
    ([], full_state(STEPS), False, "at step 12 there was no complete checkpoint"),  # never during the run
    (atomic(STEPS), full_state(STEPS), False, "at step 12 there was no complete"),  # only after the loop
    (atomic(10) + atomic(35) + atomic(60), full_state(STEPS), False,                 # less often
     "at step 23 the newest complete checkpoint at out/ckpt.pt held step 10: 13 steps old, where 10 + 2"),
    (every(K, held=None, keys=["step"]), full_state(STEPS), False, "holds no model, optimizer, scheduler"),
    (every(K, fp={"optimizer.state.0.exp_avg": 0.5}), full_state(STEPS), False, "lacks parameters"),
    ([o for s in range(K, STEPS + 1, K) for o in atomic(s, held=max(0, s - 15))],  # stale snapshots
     full_state(STEPS), False, "held step"),
    (every(K, fp_changed=True), full_state(STEPS), False, "changed while it was being written"),
    (every(K, fp={"model.w": 123.0, "optimizer.x": 1.0}), full_state(STEPS), False, "none the run had"),
    (every(K), full_state(STEPS - 10), False, "is not the final model"),             # last state missing
    (every(K), {"model": {"w": weights(STEPS)}}, False, "has no optimizer"),
    (every(K), None, False, "no checkpoint at out/ckpt.pt"),
])
def test_checkpoint_fresh(tmp_path, saves, final, passed, says):
    c = judge(tmp_path, fresh(), saves=saves, final_ckpt=final)
    assert c.passed is passed and says in c.message, c.message
    assert not c.environment


def test_a_write_in_place_leaves_no_complete_checkpoint_while_it_runs(tmp_path):
    # Straight into ckpt.pt from a background thread, each write spanning 8 steps: torn meanwhile.
    saves = [{"path": "out/ckpt.pt", "begin": t_end(s) + 0.001, "end": t_end(s + 8), "step": s, "main": False}
             for s in range(K, STEPS, K)]
    c = judge(tmp_path, fresh(), saves=saves, final_ckpt=full_state(STEPS))
    assert not c.passed and "no complete checkpoint" in c.message, c.message


@pytest.mark.parametrize("copy, passed", [(True, True), (False, False)])
def test_copies_must_reach_the_artifact_store(tmp_path, copy, passed):
    c = judge(tmp_path, fresh(copies=["artifacts/"]), saves=every(K, copy=copy), final_ckpt=full_state(STEPS))
    assert c.passed is passed, c.message
    if not passed:
        assert "artifacts/" in c.message


def test_a_checkpoint_much_smaller_than_the_reference_does_not_count(tmp_path):
    ref = {"saves": every(K), "final_ckpt": {**full_state(STEPS), "pad": torch.zeros(50_000)}}
    c = judge(tmp_path, fresh(min_size_of_reference=0.9), reference=ref, saves=every(K, bytes=1000),
              final_ckpt=full_state(STEPS))
    assert not c.passed and "of the reference run's checkpoint" in c.message, c.message


def test_without_fingerprints_it_cannot_judge(tmp_path):
    c = judge(tmp_path, fresh(), saves=every(K), final_ckpt=full_state(STEPS), fingerprints=False)
    assert not c.passed and c.environment and "TRAINWRECK_FINGERPRINT" in c.message


# -- step_time_tail --------------------------------------------------------------------------------

def stalled(n: int = 200, every_k: int = 20, base: float = 0.03, stall: float = 0.9) -> list[float]:
    return [base + (stall if s % every_k == 1 and s > 1 else 0.0) for s in range(1, n + 1)]


def tail(**kw) -> StepTimeTail:
    return StepTimeTail(**{"name": "step_time_tail", "max_p99_over_median": 3.0, **kw})


@pytest.mark.parametrize("dts, spec, passed, says", [
    ([0.03] * 200, tail(), True, "at most 1.00x the median"),
    ([0.03 + 0.01 * (s % 3) for s in range(200)], tail(), True, "bound 3x"),
    (stalled(), tail(), False, "steps 21, 41, 61 and 6 more took 0.93 s against a median of 0.030 s"),
    (stalled(every_k=150), tail(), True, "at most"),    # one stall in 200 steps is below the p99
    ([0.03] * 50, tail(), False, "a p99 needs at least 100"),
    ([5.0] + [0.03] * 199, tail(), True, "at most"),     # the first step pays for start-up
    ([5.0] + [0.03] * 199, tail(warmup_steps=0), True, "at most"),
])
def test_step_time_tail(tmp_path, dts, spec, passed, says):
    c = judge(tmp_path, spec, dts=dts)
    assert c.passed is passed and says in c.message, c.message
    if not passed and "steps" in says:
        assert c.evidence["ranks"][0]["slow_steps"][:3] == [21, 41, 61]
        assert c.evidence["ranks"][0]["p99_over_median"] > 25


@pytest.mark.parametrize("mine, reference, passed, says", [
    ([0.03] * 200, [0.03] * 200, True, "at most"),
    ([0.93] * 200, [0.03] * 200, False, "31.0x the reference run's"),   # every step padded to hide the stall
    ([0.93] * 200, None, False, "no reference run"),
])
def test_slowing_every_step_does_not_hide_a_stall(tmp_path, mine, reference, passed, says):
    c = judge(tmp_path, tail(max_median_over_reference=5.0),
              reference={"dts": reference} if reference else None, dts=mine)
    assert c.passed is passed and says in c.message, c.message


# -- manifest --------------------------------------------------------------------------------------

@pytest.mark.parametrize("old, new, says", [
    ("max_p99_over_median = 6.0", "max_p99_over_median = 1.0", "max_p99_over_median: Input should be greater than 1"),
    ("min_steps = 100", "min_steps = 5", "min_steps: Input should be greater than or equal to 20"),
    ("interval = 50", "interval = 0", "interval: Input should be greater than 0"),
    ('copies = ["artifacts/"]', 'copies = ["/abs/artifacts/"]', "copies: give paths relative"),
    ("slack = 40", "slack = 40\nslak = 3", "slak: Extra inputs are not permitted; remove it"),
    ("copy_slack = 120", "copy_slack = -1", "copy_slack: Input should be greater than or equal to 0"),
    ('path = "out/ckpt.pt"\n', "", "path: Field required; add it"),
    ("min_size_of_reference = 0.9", "min_size_of_reference = 1.5", "less than or equal to 1"),
])
def test_manifest_fields_of_the_stall_checks(tmp_path, old, new, says):
    src = KIT / "exercises" / "periodic-stall"
    text = (src / "exercise.toml").read_text()
    assert old in text, "the shipped manifest changed: update this edit"
    d = tmp_path / "periodic-stall"
    d.mkdir()
    (d / "train.py").write_text("")
    (d / "exercise.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ManifestError) as e:
        load_manifest(d)
    assert says in str(e.value) and "exercise.toml" in str(e.value), str(e.value)


def uploads(delay: int) -> list[dict]:
    """Checkpoints every K steps, each reaching the artifact store ``delay`` steps later."""
    ops = every(K)
    for s in range(K, STEPS + 1, K):
        b = t_end(min(s + delay, STEPS)) + 0.05
        ops += [{"op": "copy", "path": f"artifacts/.c{s}.partial", "src": "out/ckpt.pt", "begin": b,
                 "end": b + 0.01, "step": s + delay},
                {"op": "rename", "path": f"artifacts/c{s}.pt", "src": f"artifacts/.c{s}.partial",
                 "begin": b + 0.011, "end": b + 0.012, "step": s + delay}]
    return sorted(ops, key=lambda o: o["begin"])


@pytest.mark.parametrize("copy_slack, passed, says", [
    (None, False, "at step 12 there was no complete checkpoint at artifacts/"),  # copies get the slack
    (6, True, "artifacts/ held a complete checkpoint at most 10 + 6 steps old"),
])
def test_copies_may_trail_by_their_own_slack(tmp_path, copy_slack, passed, says):
    c = judge(tmp_path, fresh(copies=["artifacts/"], copy_slack=copy_slack), saves=uploads(5),
              final_ckpt=full_state(STEPS))
    assert c.passed is passed and says in c.message, c.message


@pytest.mark.slow
@pytest.mark.parametrize("mode, passed, says", [
    ("sync", True, "states of steps 5, 10, 15"),
    ("stale", False, "at step 12 the newest complete checkpoint at out/ckpt.pt held step 5: 7 steps old"),
])
def test_a_real_run_is_judged_by_the_state_written_not_the_step_it_was_written_at(tmp_path, mode, passed, says):
    from harness.launch import LaunchConfig, launch
    from tests.conftest import FIXTURES, assert_nothing_left

    res = launch(LaunchConfig(script=FIXTURES / "stale_checkpoint.py", run_dir=tmp_path / "run",
                              cwd=tmp_path / "run" / "work",
                              env={"TRAINWRECK_FINGERPRINT": "1", "CKPT_MODE": mode}))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "ok"
    spec = fresh(interval=5, slack=1, require_keys=["model", "optimizer", "step"])
    c = run_check(spec, Context(None, {"main": load_run("main", res.run_dir)}))
    assert c.passed is passed and says in c.message, c.message


MIB = 2**20


@pytest.mark.parametrize("upload, passed, says", [
    ({"bytes": 15 * MIB, "dur": 1.01}, True, "artifacts/ held a complete checkpoint"),  # at 15 MiB/s
    ({"bytes": 15 * MIB, "dur": 0.01}, False, "took 0.010 s (1500 MiB/s); the artifact store's link carries 15"),
    (None, False, "did not come through the artifact store"),  # copied in by hand: no upload record
])
def test_copies_count_only_when_the_store_uploaded_them_at_its_bandwidth(tmp_path, upload, passed, says):
    """The store's bandwidth is a constant in the candidate's script: raising it, or copying files
    into the store's folder by hand, must not take the upload's cost away unnoticed."""
    events = [] if upload is None else [{"kind": "upload", "path": f"artifacts/c{s}.pt", "step": s, **upload}
                                        for s in range(K, STEPS + 1, K)]
    c = judge(tmp_path, fresh(copies=["artifacts/"], store_mib_per_s=15), saves=every(K, copy=True),
              final_ckpt=full_state(STEPS), events=events)
    assert c.passed is passed and says in c.message, c.message
