"""Hand-built run dirs of a training loop that stalls every k steps, for step_time_tail and
checkpoint_fresh: step times, rank 0's traced file operations, uploads, the final checkpoint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from grader.checks import Context, run_check
from grader.checks.checkpoint_fresh import Spec as CheckpointFresh
from grader.evidence import load_run
from tests.grader.rundirs import RunDirBuilder

STEPS, K, SLACK, DT = 60, 10, 2, 0.1
KIT = Path(__file__).resolve().parents[3]


def fp(step: int) -> float:
    """The fingerprint of the one parameter 'w' after ``step`` updates."""
    return 1.0 + 0.01 * step


def weights(step: int) -> torch.Tensor:
    return torch.full((4,), fp(step))


def make_stall_run(root: Path, dts: list[float] | None = None, saves: list[dict[str, Any]] | None = None,
                   final_ckpt: dict[str, Any] | None = None, fingerprints: bool = True,
                   events: list[dict[str, Any]] | None = None, store: list[dict[str, Any]] | None = None,
                   final_files: dict[str, Any] | None = None, rts: list[float] | None = None,
                   watched: list[dict[str, Any]] | None = None) -> Path:
    """A finished 2-rank run: step s of rank r ends at sum(dts[:s]), and (``rts``) the parent
    received its record that long after the start; ``saves`` are rank 0's traced
    file operations ({op, path, src, begin, end, step, held, ...} with times in seconds and paths
    relative to the working dir); ``final_ckpt`` is what the script left at out/ckpt.pt; ``store`` the
    artifact store service's records (paths relative to the working dir); ``watched`` the parent's
    watcher's records ({kind, path, t, since, in_place, obj or raw})."""
    dts = dts or [DT] * STEPS
    b = RunDirBuilder(root)
    work = root / "work"
    for r in range(2):
        b.event(r, kind="start", attempt=0, t=0.0, pid=1, rank=r)
        if fingerprints:
            b.event(r, kind="fingerprint0", attempt=0, t=0.0, fp=fp(0))
        t = 0.0
        for s, dt in enumerate(dts, start=1):
            t += dt
            rec = {"kind": "step", "attempt": 0, "t": t, "step": s, "dt": dt, "rss_mb": 100.0, "lr": [0.1]}
            if rts is not None:
                rec["rt"] = rts[s - 1]
            if fingerprints:
                rec["fp"] = fp(s)
            b.event(r, **rec)
        for e in events or [] if r == 0 else []:  # rank 0's other signed events (store uploads)
            b.event(r, **{"attempt": 0, "t": t, **e, **({"path": str(work / e["path"])} if "path" in e else {})})
        b.exit(r, {"w": weights(len(dts))}, t=t + 1, steps=len(dts))
        for seq, o in enumerate(saves or [] if r == 0 else [], start=1):
            begin = {"a": 0, "seq": seq, "ph": "begin", "op": o.get("op", "save"), "path": str(work / o["path"]),
                     "step": o["step"], "main": o.get("main", True), "t": o["begin"]}
            if o.get("src"):
                begin["src"] = str(work / o["src"])
            if begin["op"] == "save" and fingerprints:
                held = o.get("held", o["step"])
                terms = o.get("fp", {"model.w": None, "optimizer.state.0.exp_avg": 0.5})
                begin["fp"] = {k: fp(held) if v is None else v for k, v in terms.items()}  # None: the model's
                begin["keys"] = o.get("keys", ["model", "optimizer", "scheduler", "step"])
            begin.update(o.get("begin_extra", {}))
            b.save_record(r, **begin)
            if o.get("end") is not None:
                end = {"a": 0, "seq": seq, "ph": "end", "op": begin["op"], "dur": o["end"] - o["begin"],
                       "bytes": o.get("bytes", 1000), "step": o["step"], "main": True, "t": o["end"]}
                if o.get("fp_changed"):
                    end["fp_changed"] = True
                for f in ("id", "sha256"):
                    if f in o:
                        end[f] = o[f]
                end.update(o.get("end_extra", {}))
                b.save_record(r, **end)
    for rec in watched or []:
        b.watched(**rec)
    for rec in store or []:
        b.store(**{**rec, **{k: str(work / rec[k]) for k in ("root", "path") if k in rec}})
    if final_ckpt is not None:
        b.file("out/ckpt.pt", final_ckpt)
    for rel, obj in (final_files or {}).items():  # a checkpoint of several files
        b.file(rel, obj) if not callable(obj) else obj(work / rel)
    return b.build()


def full_state(step: int) -> dict[str, Any]:
    # as torch lays out an Adam's and a scheduler's state dicts: recognised by content, not by key
    return {"model": {"w": weights(step)},
            "optimizer": {"state": {0: {"step": torch.tensor(float(step)), "exp_avg": torch.full((4,), 0.5)}},
                          "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0]}]},
            "scheduler": {"last_epoch": step, "base_lrs": [0.1], "_step_count": step + 1}, "step": step}


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
    args = dict(name="checkpoint_fresh", path="out/ckpt.pt", interval=K, slack=SLACK,
                require=["optimizer", "scheduler", "step"])
    return CheckpointFresh(**{**args, **kw})


def judge(tmp_path: Path, spec, reference: dict | None = None, **run) -> Any:
    runs = {"main": load_run("main", make_stall_run(tmp_path / "main", **run))}
    if reference is not None:
        runs["reference"] = load_run("reference", make_stall_run(tmp_path / "reference", **reference))
    return run_check(spec, Context(None, runs))


MIB = 2**20


def via_store(k: int, delay: int = 1, took: float = 0.05, size: int = 1000, client: bool = True,
              **put: Any) -> tuple[list[dict], list[dict]]:
    """Checkpoints every ``k`` steps, each uploaded to the artifact store service ``delay`` steps
    later: rank 0's traced saves and uploads, and the service's log (``put`` overrides its fields)."""
    ops = every(k)
    log: list[dict] = [{"kind": "store_start", "t": 0.0, "root": "artifacts", "mib_per_s": 15,
                        "max_object_bytes": 256 * MIB}]
    for i, s in enumerate(range(k, STEPS + 1, k), start=1):
        # the upload reads the file once its save is in place (the last one's after the final step)
        b = max(t_end(min(s + delay, STEPS)) + 0.01, t_end(s) + 0.03)
        name = f"ckpt-{s:06d}.pt"
        if client:
            ops.append({"op": "upload", "path": f"artifacts/{name}", "src": "out/ckpt.pt", "begin": b,
                        "end": b + took + 0.002, "step": s + delay, "id": i, "sha256": f"h{i}", "bytes": size})
        log.append({"kind": "put", "status": "ok", "id": i, "name": name, "path": f"artifacts/{name}",
                    "t": b + took, "t0": b + 0.001, "t1": b + took, "dur": took, "bytes": size, "declared": size,
                    "sha256": f"h{i}", "pid": 1, **put})
    log.append({"kind": "store_stop", "t": 999.0, "objects": [], "foreign": [], "changed": [], "missing": [],
                "root_replaced": False})
    return sorted(ops, key=lambda o: o["begin"]), log
