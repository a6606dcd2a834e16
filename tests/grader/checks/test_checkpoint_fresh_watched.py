"""checkpoint_fresh from the parent's watcher of out/ckpt.pt (grader/evidence/watched.py): versions
written by any writer count when they hold a fresh, complete state; what the trace knows still
decides where it knows the bytes."""

from __future__ import annotations

import hashlib
import io

import pytest
import torch

from tests.grader.checks.stall_runs import DT, STEPS, K, every, fp, fresh, full_state, judge, t_end, via_store


def state(step: int, **over) -> dict:
    """The full state after ``step``, its one parameter's fingerprint term that step's fingerprint."""
    return {"model": {"w": torch.tensor([fp(step)], dtype=torch.float64)},
            "optimizer": {"state": {0: {"exp_avg": torch.ones(1)}}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99),
                                                                                      "params": [0]}]},
            "scheduler": {"last_epoch": step, "base_lrs": [0.1]}, "step": step, **over}


def raw(state) -> bytes:
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


state_of = state


def seen(step: int, lag: float = 0.05, state=None, **rec) -> dict:
    """The parent saw a new version of out/ckpt.pt ``lag`` s after ``step`` ended."""
    return {"path": "out/ckpt.pt", "t": t_end(step) + lag, "since": t_end(step) + lag - 0.25,
            "raw": raw(state_of(step) if state is None else state), **rec}


def every_seen(k: int = K, **kw) -> list[dict]:
    return [seen(s, **kw) for s in range(k, STEPS + 1, k)]


def renames_only(k: int = K) -> list[dict]:
    """The trace saw each rename into place, never the bytes renamed (open().write of a buffer)."""
    return [o for o in every(k) if o.get("op") == "rename"]


def in_place_at(step: int) -> list[dict]:
    """Versions every K steps; the one after ``step`` rewrote the file in place, starting at ``step``."""
    out = every_seen()
    for o in out:
        if o["t"] > t_end(step):
            o.update(in_place=True, since=t_end(step) - 0.01)
            break
    return out


IN_PLACE_TRACED = [{"path": "out/ckpt.pt", "begin": t_end(s) + 0.001, "end": t_end(s + 8), "step": s, "main": False}
                   for s in range(K, STEPS, K)]


@pytest.mark.parametrize("saves, watched, passed, says", [
    # a spawned writer process: nothing traced, every version seen from outside
    ([], every_seen(), True, "states of steps 10, 20, 30"),
    # bytes serialised in memory, written with open().write, renamed into place
    (renames_only(), every_seen(), True, "states of steps 10, 20, 30"),
    # seen late (the parent polls): still within the slack
    ([], every_seen(lag=1.5 * DT), True, "states of steps 10, 20"),
    ([], [seen(10), seen(35), seen(60)], False,
     "at step 23 the newest complete checkpoint at out/ckpt.pt held step 10: 13 steps old"),
    ([], [], False, "at step 12 there was no complete checkpoint at out/ckpt.pt"),
    ([], every_seen(state=state(0, model={"w": torch.tensor([123.0], dtype=torch.float64)})),
     False, "its parameters are none the run had"),
    ([], every_seen(state={"model": state(0)["model"]}), False, "it holds no optimizer state"),
    ([], [{**seen(s), "raw": b"PK\x03\x04 torn"} for s in range(K, STEPS + 1, K)], False, "it does not load"),
    # rewritten in place: nothing complete from the last poll that saw the old version
    ([], in_place_at(25), False, "at step 25 there was no complete checkpoint at out/ckpt.pt"),
    # the trace knows these bytes: a live state written while it changed, whatever the file looks like now
    (every(K, fp_changed=True), every_seen(), False, "changed while it was being written"),
    # a traced write straight into the file: torn while it runs, however the watcher saw it after
    (IN_PLACE_TRACED, every_seen(lag=8 * DT + 0.05), False, "no complete checkpoint at out/ckpt.pt"),
])
def test_versions_seen_from_outside(tmp_path, saves, watched, passed, says):
    c = judge(tmp_path, fresh(), saves=saves, watched=watched, final_ckpt=full_state(STEPS))
    assert c.passed is passed and says in c.message, c.message
    assert not c.environment


def store_by_content(traced_uploads: bool) -> tuple[list[dict], list[dict], list[dict]]:
    """Checkpoints every K steps published by a writer the trace does not see, each uploaded (by
    the kit's client in that writer, or by the rank from an untraced file) a step later."""
    ops, log = via_store(K, client=traced_uploads)
    ops = [o for o in ops if o.get("op") == "upload"] + renames_only()
    watched = every_seen()
    puts = [r for r in log if r["kind"] == "put"]
    for put, w in zip(puts, watched):
        put["sha256"] = hashlib.sha256(w["raw"]).hexdigest()
        put["bytes"] = len(w["raw"])
    for o in ops:
        if o.get("op") == "upload":
            put = next(p for p in puts if p["id"] == o["id"])
            o.update(sha256=put["sha256"], bytes=put["bytes"])
    return ops, log, watched


@pytest.mark.parametrize("traced_uploads, edit, passed, says", [
    (False, None, True, "artifacts/ held a complete checkpoint at most 10 + 6 steps old"),
    (True, None, True, "artifacts/ held a complete checkpoint at most 10 + 6 steps old"),
    # bytes the parent never saw at out/ckpt.pt: what the object holds cannot be told
    (False, "other bytes", False, "no traced upload sent it"),
])
def test_store_objects_hold_the_watched_version_with_their_bytes(tmp_path, traced_uploads, edit, passed, says):
    ops, log, watched = store_by_content(traced_uploads)
    if edit:
        for r in log:
            if r["kind"] == "put":
                r["sha256"] = "0" * 64
    c = judge(tmp_path, fresh(copies=["artifacts/"], copy_slack=6), saves=ops, store=log, watched=watched,
              final_ckpt=full_state(STEPS))
    assert c.passed is passed and says in c.message, c.message


@pytest.mark.parametrize("edit, passed, says", [
    (None, True, "artifacts/ held a complete checkpoint at most 10 + 6 steps old"),
    # what the store received does not load: no copy counts
    ("torn", False, "the store's copy of it cannot be read: it does not load"),
    # the store kept no copy (over its cap): nothing else tells what the bytes were
    ("not kept", False, "no traced upload sent it"),
])
def test_objects_sent_from_memory_are_judged_by_the_stores_own_copy(tmp_path, edit, passed, says):
    """PUTs of bytes serialised in memory: no file ever held them, so neither the trace nor the
    watcher can tell what an object holds; the store's kept copy of what it received can."""
    ops, log = via_store(K, client=False)
    puts = [r for r in log if r["kind"] == "put"]
    for put, s in zip(puts, range(K, STEPS + 1, K)):
        data = b"PK\x03\x04 torn" if edit == "torn" else raw(state(s))
        put.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
        if edit != "not kept":
            put["raw"] = data
    c = judge(tmp_path, fresh(copies=["artifacts/"], copy_slack=6), saves=every(K), store=log,
              final_ckpt=full_state(STEPS))
    assert c.passed is passed and says in c.message, c.message


def test_without_a_watcher_the_trace_decides_as_before(tmp_path):
    c = judge(tmp_path, fresh(), saves=renames_only(), final_ckpt=full_state(STEPS))
    assert not c.passed and "no complete checkpoint" in c.message, c.message
