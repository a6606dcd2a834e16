"""checkpoint_fresh on hand-built signed run dirs: every way of "fixing" a stall by checkpointing
less, later, smaller or staler, and copies that must come through the artifact store."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.checks.stall_runs import DT, STEPS, K, atomic, every, fresh, full_state, judge, t_end, weights

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
