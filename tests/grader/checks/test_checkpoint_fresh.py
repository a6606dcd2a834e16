"""checkpoint_fresh on hand-built signed run dirs: every way of "fixing" a stall by checkpointing
less, later, smaller or staler, and copies that must come through the artifact store."""

from __future__ import annotations

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from tests.grader.checks.stall_runs import (
    DT,
    STEPS,
    K,
    atomic,
    every,
    fp,
    fresh,
    full_state,
    judge,
    make_stall_run,
    t_end,
    via_store,
    weights,
)

BACKGROUND = [o for s in range(K, STEPS + 1, K)  # written while the next steps run, holding the snapshot's step
              for o in atomic(s, took=1.5 * DT, main=False)]


@pytest.mark.parametrize("saves, final, passed, says", [
    (every(K), full_state(STEPS), True, "out/ckpt.pt held a complete checkpoint at most 10 + 2 steps old"),
    (BACKGROUND, full_state(STEPS), True, "states of steps 10, 20"),                 # in the background
    ([], full_state(STEPS), False, "at step 12 there was no complete checkpoint"),  # never during the run
    (atomic(STEPS), full_state(STEPS), False, "at step 12 there was no complete"),  # only after the loop
    (atomic(10) + atomic(35) + atomic(60), full_state(STEPS), False,                 # less often
     "at step 23 the newest complete checkpoint at out/ckpt.pt held step 10: 13 steps old, where 10 + 2"),
    (every(K, fp={}, keys=["step"]), full_state(STEPS), False, "it holds no set of 1 tensors, as the model trains"),
    (every(K, fp={"optimizer.state.0.exp_avg": 0.5}), full_state(STEPS), False, "it holds no set of 1 tensors"),
    # the model under another key, the optimizer's state under another: judged by content
    (every(K, fp={"net.module.w": None, "opt.state.0.exp_avg": 0.5}), full_state(STEPS), True, "states of steps"),
    (every(K, fp={"model.w": None}), full_state(STEPS), False, "holds no optimizer state"),
    ([o for s in range(K, STEPS + 1, K) for o in atomic(s, held=max(0, s - 15))],  # stale snapshots
     full_state(STEPS), False, "held step"),
    (every(K, fp_changed=True), full_state(STEPS), False, "changed while it was being written"),
    (every(K, fp={"model.w": 123.0, "optimizer.state.0.x": 1.0}), full_state(STEPS), False, "none the run had"),
    (every(K), full_state(STEPS - 10), False, "is not the final model"),             # last state missing
    (every(K), {"model": {"w": weights(STEPS)}}, False, "holds no optimizer state and no LR scheduler state"),
    (every(K), {"weights": {"w": weights(STEPS)}, "opt": full_state(STEPS)["optimizer"], "sched":
                full_state(STEPS)["scheduler"], "global_step": STEPS}, True, "loads and holds the final parameters"),
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
    spec = fresh(interval=5, slack=1, require=["optimizer", "step"])
    c = run_check(spec, Context(None, {"main": load_run("main", res.run_dir)}))
    assert c.passed is passed and says in c.message, c.message


def _hand_copies(ops, log):
    """No uploads: the script copies each checkpoint into the store's folder itself."""
    return [o for o in ops if o.get("op") != "upload"] + [o for s in range(K, STEPS + 1, K) for o in atomic(s, copy=True)
                                                      if o["path"].startswith("artifacts/")], \
        [r for r in log if r["kind"] != "put"]


def _untraced_files(ops, log):
    """Files written into the store's folder by means the trace does not see (raw writes): the
    service finds them there at the end."""
    log[-1]["foreign"] = [{"name": "ckpt-000010.pt", "bytes": 1000, "kind": "file"}]
    return [o for o in ops if o.get("op") != "upload"], [r for r in log if r["kind"] != "put"]


def _raw_requests(ops, log):
    """Uploads the service received, with no traced ArtifactStore.upload behind them."""
    return [o for o in ops if o.get("op") != "upload"], log


def _contradicting_timeline(ops, log):
    """The rank's records say each upload took 1 ms, where the service read for 0.5 s."""
    ops, log = via_store(K, took=0.5)
    for o in ops:
        if o.get("op") == "upload":
            o["end"] = o["begin"] + 0.001
    return ops, log


def _wrong_size(ops, log):
    for r in log:
        if r["kind"] == "put":
            r["bytes"] = 10
    return ops, log


def _changed_after_upload(ops, log):
    log[-1]["changed"] = ["ckpt-000060.pt"]
    return ops, log


def _final_upload_cut_off(ops, log):
    """The job ended while the final state's upload was in flight (nothing waited for it): the store
    never published it, and logged the upload as aborted."""
    last = max(i for i, r in enumerate(log) if r["kind"] == "put")
    log[last] = {**log[last], "status": "aborted"}
    return ops, log


def _slow_uploads(ops, log):
    """Every upload takes 15 steps of wall time (the link is slow): within the copies' slack."""
    return via_store(K, delay=1, took=15 * DT)


@pytest.mark.parametrize("edit, passed, says", [
    (None, True, "artifacts/ held a complete checkpoint at most 10 + 6 steps old"),
    (_hand_copies, False, "artifacts/: c10.pt was written there by rank 0 (a rename at step 10) (and 11 "
                          "more): files reach the artifact store only by an upload to it"),
    (_untraced_files, False, "artifacts/: ckpt-000010.pt was there at the end (1000 bytes, a file) and the store "
                             "never received it"),
    (_raw_requests, False, "no traced upload sent it"),
    (_contradicting_timeline, False, "contradicts the store's"),
    (_wrong_size, False, "the store received 10 bytes, but ckpt.pt held 1000 then"),
    (_changed_after_upload, False, "ckpt-000060.pt changed after the store published it"),
    (_slow_uploads, False, "at step 16 there was no complete checkpoint at artifacts/"),
    (_final_upload_cut_off, False, "at the end the newest checkpoint in artifacts/ held step 50, not the final "
                                   "model (step 60); 1 upload was cut off unfinished when the job ended"),
])
def test_copies_in_the_artifact_store_are_judged_from_the_stores_own_log(tmp_path, edit, passed, says):
    """The store's log (a process outside the ranks) decides which copies count: objects it
    published, holding what the traced upload's source held; files that reached its folder any
    other way fail by name."""
    ops, log = via_store(K)
    if edit:
        ops, log = edit(ops, log)
    c = judge(tmp_path, fresh(copies=["artifacts/"], copy_slack=6), saves=ops, store=log,
              final_ckpt=full_state(STEPS))
    assert c.passed is passed and says in c.message, c.message


def test_a_store_the_manifest_promises_but_the_run_lacks_is_an_environment_failure(tmp_path):
    ops, _ = via_store(K)
    manifest = type("M", (), {"run": type("R", (), {"store": object()})()})()
    runs = {"main": load_run("main", make_stall_run(tmp_path / "main", saves=ops, final_ckpt=full_state(STEPS)))}
    c = run_check(fresh(copies=["artifacts/"], copy_slack=6), Context(manifest, runs))
    assert not c.passed and c.environment and "no artifact store service" in c.message, c.message


def folder_checkpoints(k: int, torn_at: int | None = None) -> list[dict]:
    """A checkpoint every ``k`` steps as a folder of files (model, optimizer, scheduler), staged
    under a hidden name and published by one rename of the folder."""
    ops = []
    for s in range(k, STEPS + 1, k):
        b, stage = t_end(s) + 0.001, f"out/.tmp-ckpt-{s}"
        files = {"model.pt": ({"w": fp(s)}, ["w"]), "optimizer.pt": ({"state.0.exp_avg": 0.5}, ["state", "param_groups"]),
                 "scheduler.pt": ({}, ["last_epoch", "base_lrs"])}
        for i, (name, (f, keys)) in enumerate(files.items()):
            end = b + 0.01 * (i + 1) if s != torn_at or name != "optimizer.pt" else t_end(s + 3)
            ops.append({"path": f"{stage}/{name}", "begin": b + 0.01 * i, "end": end, "step": s, "fp": f, "keys": keys})
        ops.append({"op": "rename", "path": "out/ckpt", "src": stage, "begin": b + 0.04, "end": b + 0.041, "step": s,
                    "begin_extra": {"dir": True}})
    return sorted(ops, key=lambda o: o["begin"])


def dcp_checkpoints(k: int, missing_at: int | None = None) -> list[dict]:
    """A checkpoint every ``k`` steps as a torch.distributed.checkpoint, committed into a staging
    folder and renamed into place as out/ckpt."""
    ops = []
    for s in range(k, STEPS + 1, k):
        b, d = t_end(s) + 0.001, f"out/.tmp-ckpt-{s:03d}"
        shards = {"__0_0.distcp": {"model.w": fp(s)}, "__1_0.distcp": {"optimizer.state.0.exp_avg": 0.5}}
        for i, (name, f) in enumerate(shards.items()):
            if s == missing_at and i == 1:
                continue
            ops.append({"op": "write", "path": f"{d}/{name}", "begin": b + 0.01 * i, "end": b + 0.01 * (i + 1),
                        "step": s, "end_extra": {"fp": f}})
        ops += [{"op": "commit", "path": d, "begin": b + 0.025, "end": b + 0.06, "step": s,
                 "begin_extra": {"files": list(shards), "keys": ["model", "optimizer", "scheduler", "step"]}},
                {"op": "write", "path": f"{d}/.metadata.tmp", "begin": b + 0.03, "end": b + 0.04, "step": s},
                {"op": "rename", "path": f"{d}/.metadata", "src": f"{d}/.metadata.tmp", "begin": b + 0.045,
                 "end": b + 0.05, "step": s},
                {"op": "rename", "path": "out/ckpt", "src": d, "begin": b + 0.07, "end": b + 0.071, "step": s,
                 "begin_extra": {"dir": True}}]
    return sorted(ops, key=lambda o: o["begin"])


FOLDER_FINAL = {"out/ckpt/model.pt": {"w": weights(STEPS)}, "out/ckpt/optimizer.pt": full_state(STEPS)["optimizer"],
                "out/ckpt/scheduler.pt": {"last_epoch": STEPS, "base_lrs": [0.1]}}


@pytest.mark.parametrize("ops, passed, says", [
    (folder_checkpoints(K), True, "out/ckpt held a complete checkpoint at most 10 + 2 steps old"),
    # published while its optimizer file was still being written: half a checkpoint until it ends
    (folder_checkpoints(K, torn_at=30), False, "at step 31 there was no complete checkpoint at out/ckpt"),
    ([o for o in folder_checkpoints(K) if not o["path"].endswith("optimizer.pt")], False, "holds no optimizer"),
])
def test_a_folder_checkpoint_is_judged_as_one(tmp_path, ops, passed, says):
    spec = fresh(path="out/ckpt", require=["optimizer", "scheduler"])
    c = judge(tmp_path, spec, saves=ops, final_files=FOLDER_FINAL)
    assert c.passed is passed and says in c.message, c.message


def test_a_dcp_checkpoint_is_judged_as_one(tmp_path):
    from tests.grader.checks.test_checkpoint_layouts import write_dcp

    def final(folder):
        folder.mkdir(parents=True, exist_ok=True)
        write_dcp(folder, {"model": {"w": weights(STEPS)}, "optimizer": {"state": {0: {"exp_avg": torch.ones(4)}},
                                                                          "param_groups": [{"lr": 0.1, "params": [0]}]},
                           "scheduler": {"last_epoch": STEPS, "base_lrs": [0.1]}, "step": STEPS})

    spec = fresh(path="out/ckpt")
    c = judge(tmp_path / "whole", spec, saves=dcp_checkpoints(K), final_files={"out/ckpt": final})
    assert c.passed and "out/ckpt held a complete checkpoint at most 10 + 2 steps old" in c.message, c.message
    assert c.evidence["targets"]["out/ckpt"]["layout"] == "dcp" and c.evidence["final"]["layout"] == "dcp"
    c = judge(tmp_path / "missing", spec, saves=dcp_checkpoints(K, missing_at=30), final_files={"out/ckpt": final})
    assert not c.passed and "at step 31 there was no complete checkpoint at out/ckpt" in c.message, c.message


@pytest.mark.parametrize("every_k, reference, passed, says", [
    # what the store allows: one upload of the reference's checkpoint spans 15 steps of 0.1 s
    (15, True, True, "at most 15 + 6 steps old (one upload of the reference's checkpoint at the store's"),
    (15, False, False, "at step 12 there was no complete checkpoint"),  # no reference checkpoint: the interval alone
    (30, True, False, "at step 17 there was no complete checkpoint"),  # the first one due by 15 + 2
])
def test_the_interval_is_at_least_what_the_store_can_take(tmp_path, every_k, reference, passed, says):
    """On a machine fast enough that an upload spans more steps than the interval, a writer that
    uploads one checkpoint at a time (as the reference does) is bounded by the store, not late."""
    ref = make_stall_run(tmp_path / "reference", final_ckpt=full_state(STEPS))
    ref_bytes = (ref / "work" / "out" / "ckpt.pt").stat().st_size
    ops, log = via_store(every_k)
    log[0]["mib_per_s"] = ref_bytes / (1.5 * 2**20)  # 1.5 s per upload: 15 steps of DT
    runs = {"main": load_run("main", make_stall_run(tmp_path / "main", saves=ops, store=log,
                                                    final_ckpt=full_state(STEPS)))}
    if reference:
        runs["reference"] = load_run("reference", ref)
    c = run_check(fresh(copies=["artifacts/"], copy_slack=6, min_size_of_reference=0), Context(None, runs))
    assert c.passed is passed and says in c.message, c.message


@pytest.mark.parametrize("ints, passed, says", [
    ({"step": None}, True, "states of steps 10, 20"),          # the step it holds
    ({"iter_num": None, "epoch": 0}, True, "states of steps"),  # under any key
    ({"step": -3}, False, "holds the parameters of step 10 but no step count that says so (step = 7)"),
])
def test_a_checkpoint_must_hold_the_step_it_says_it_is(tmp_path, ints, passed, says):
    """A state dict of live tensors saved later by a writer holds a later step than its step count."""
    saves = [o for s in range(K, STEPS + 1, K)
             for o in atomic(s, begin_extra={"ints": {k: (s if v is None else s + v) for k, v in ints.items()}})]
    c = judge(tmp_path, fresh(), saves=saves, final_ckpt=full_state(STEPS))
    assert c.passed is passed and says in c.message, c.message


def test_the_model_is_found_by_layout_under_any_key():
    """The model's tensors are grouped under whatever prefix holds exactly as many as it trains; an
    optimizer's per-parameter state (``state.<index>.``) never counts as a model, a top-level key
    named "state" does."""
    from grader.checks.checkpoint_fresh import model_sums

    model = {"net.0.weight": 1.0, "net.0.bias": 2.0, "net.2.weight": 4.0}
    opt = {"state.0.exp_avg": 10.0, "state.1.exp_avg": 20.0, "state.2.exp_avg": 40.0}
    flat = {**{f"model.{k}": v for k, v in model.items()}, **{f"optimizer.{k}": v for k, v in opt.items()}}
    nested = {**{f"state.model.{k}": v for k, v in model.items()},
              **{f"state.optimizer.{k}": v for k, v in opt.items()}}
    assert set(model_sums(flat, 3)) == {7.0}  # "", "model" and "model.net" all hold the three
    assert set(model_sums(nested, 3)) == {7.0}
    assert model_sums(opt, 3) == []
