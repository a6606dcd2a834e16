"""A session with attempts, scores and feedback, built through the store's own API from hand-made
result.json dicts (no grading runs): for tests of the live view, calibration and reports."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from grader.sessions.attempts import unified_diff
from grader.sessions.lifecycle import new_session
from grader.sessions.models import DimensionScore, FeedbackRound, ScoreSheet
from grader.sessions.store import Store

SHIPPED = "for epoch in range(EPOCHS):\n    for x, y in loader:\n        step(x, y)\n"
FIXED = "for epoch in range(EPOCHS):\n    sampler.set_epoch(epoch)\n    for x, y in loader:\n        step(x, y)\n"
HOSTILE = "<script>alert('x')</script>\x1b[31m & \x07 </pre>"


def result(slug: str, passed: dict[str, bool], throughput: bool = False) -> dict[str, Any]:
    checks = [{"name": n, "passed": p, "message": f"{n} {'held' if p else 'broke'}: rank 1 consumed indices 0-63 twice",
               "evidence": {"rank": 1, "indices": [0, 63]}, "environment": False, "required": True, "weight": 1.0}
              for n, p in passed.items()]
    tp = None
    if throughput:
        tp = {"speedup": 1.8, "spread": 0.05, "reference_speedup": 2.0, "normalized": 0.8, "suspicious": False,
              "counted": True, "passed": True, "pass_speedup": 1.5, "note": "",
              "rounds": [{"broken": 100.0, "candidate": 180.0 + i, "reference": 200.0} for i in range(3)]}
        checks.append({"name": "throughput", "passed": True, "message": "1.80x", "evidence": {}, "environment": False,
                       "required": False, "weight": 1.0})
    ok = all(passed.values())
    return {"schema_version": 1, "exercise": slug, "graded_at": "2026-01-01T00:00:00+00:00",
            "submission": {"kind": "workspace", "source": "/ws", "sha256": "ab" * 32, "protected_changed": []},
            "passed": ok, "score": 1.0 if ok else 0.0, "environment_failure": False,
            "failed_required": [n for n, p in passed.items() if not p], "issues": [], "checks": checks,
            "throughput": tp, "environment": {"torch": "2.13.0"}, "timings": {"total": 20.0},
            "run_dirs": {}, "out_dir": "/nowhere"}


def series(steps: int = 40, leak: float = 0.0, loss: bool = True) -> dict[str, Any]:
    def rank(r: int) -> dict[str, list]:
        return {"step": list(range(1, steps + 1)), "dt": [0.01 + 0.002 * ((s * 7 + r) % 5) for s in range(steps)],
                "rss_mb": [300 + r * 3 + leak * s for s in range(steps)], "cuda_alloc_mb": [],
                "loss": [2.0 * math.exp(-s / 15) + 0.05 * r for s in range(steps)] if loss else []}
    run = {"status": "ok", "world_size": 2, "device": "cpu", "ranks": {"0": rank(0), "1": rank(1)}}
    ref = {"status": "ok", "world_size": 2, "device": "cpu", "ranks": {"0": rank(0)}}
    return {"main": run, "reference": ref}


def add_attempt(store: Store, sid: str, slug: str, text: str, res: dict, ser: dict | None, shipped: str = SHIPPED):
    a = store.begin_attempt(sid, slug, res["submission"]["sha256"], {"train.py": text}, {"train.py": shipped},
                            unified_diff)
    return store.finish_attempt(a.id, "done", result=res, result_path=f"/grades/{a.n}/result.json", series=ser)


def sheet(sid: str, slug: str, who: str, levels: dict[str, int], note: str = "", **feedback) -> ScoreSheet:
    return ScoreSheet(sid, slug, who, {k: DimensionScore(k, v, note if k == "root-cause" else "")
                                       for k, v in levels.items()}, FeedbackRound(**feedback))


LEVELS_A = {"root-cause": 3, "method": 2, "fix": 4, "verification": 3, "communication": 2}
LEVELS_B = {"root-cause": 3, "method": 4, "fix": 3, "verification": 3, "communication": 2}  # method 2 apart


def scored_session(db: Path, root: Path, candidate: str = "Ada", slug: str = "sampler-replay"):
    """Two attempts (sample_partition flips to pass), two interviewers who disagree on `method`."""
    store = Store.open(db)
    session, _ = new_session(store, candidate, [slug], root=root)
    sid = session.id
    add_attempt(store, sid, slug, SHIPPED, result(slug, {"completes": True, "sample_partition": False}), series(leak=1.0))
    add_attempt(store, sid, slug, FIXED, result(slug, {"completes": True, "sample_partition": True}), series())
    store.set_diagnosis(sid, slug, "# Diagnosis\nset_epoch was missing. " + HOSTILE)
    store.save_sheet(sheet(sid, slug, "ada", LEVELS_A, note="Found it from the ledger " + HOSTILE,
                           strength="Read the ledger first", improvement="Hypothesis before edits",
                           revision_outcome="improved", notes="Overall solid " + HOSTILE,
                           followups_asked=["How would you prove each rank sees a disjoint shard, and that resume "
                                            "neither duplicates nor skips?", "Own question?"]))
    store.save_sheet(sheet(sid, slug, "bob", LEVELS_B, strength="Calm", improvement="Verify more",
                           revision_outcome="partly"))
    return store, sid
