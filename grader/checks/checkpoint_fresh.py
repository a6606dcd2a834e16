"""checkpoint_fresh: taking a stall out of the step loop must still leave a fresh, complete
checkpoint on disk at every step. The save trace is replayed into what each path held at each
rank-0 step end; which step a file holds is found by matching the per-tensor fingerprints of what
was serialised against the per-step parameter fingerprints, not from the script."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import RunEvidence
from grader.evidence.checkpoint import final_checkpoint
from grader.evidence.fingerprints import FP_RTOL, step_fingerprints
from grader.evidence.params import strip_wrappers
from grader.roles import FINGERPRINTS, Role, RunRequest
from harness.saves import FileOp


class Spec(CheckSpec):
    """At every optimizer step, a complete checkpoint holding a step no older than ``interval`` +
    ``slack`` steps existed at ``path`` (and in each of ``copies``), from the first time one was
    due; at the end ``path`` loads and holds the final state."""

    name: Literal["checkpoint_fresh"]
    path: str  # relative to the script's working dir
    interval: int = Field(gt=0, description="k: optimizer steps between checkpoints")
    slack: int = Field(0, ge=0, description="steps a checkpoint may take to be written, beyond interval")
    copies: list[str] = []  # other places every checkpoint must reach: a file, or a folder ending in /
    # steps a copy may trail beyond interval (an upload to a remote store takes longer); slack if None
    copy_slack: int | None = Field(None, ge=0)
    key: str | None = None  # where the model state dict sits inside the checkpoint, if nested
    require_keys: list[str] = []  # top-level keys every checkpoint must hold
    # every checkpoint relied on must be at least this share of the reference run's final checkpoint
    min_size_of_reference: float = Field(0.9, ge=0, le=1)
    # the kit's ArtifactStore bandwidth (MiB/s): a file in `copies` counts only when the store's
    # signed upload record shows it took the time that bandwidth needs (so the script's own
    # bandwidth constant, or a copy made by hand, cannot take the upload's cost away)
    store_mib_per_s: float | None = Field(None, gt=0)

    @field_validator("copies")
    @classmethod
    def _copies(cls, v: list[str]) -> list[str]:
        if any(not c.strip() or c.startswith("/") for c in v):
            raise ValueError("give paths relative to the script's working dir (a folder ends in /)")
        return v


def runs(spec: Spec, manifest) -> list[RunRequest]:
    # which step a checkpoint holds is told by parameter fingerprints in the main run
    return [RunRequest(Role.MAIN, manifest.world_size, env=FINGERPRINTS)]


class _Holdings:
    """Which step the state in each traced save is, judged once per save."""

    def __init__(self, spec, ev: RunEvidence, final_names: set[str], min_bytes: int | None):
        self.spec, self.ev, self.final_names, self.min_bytes = spec, ev, final_names, min_bytes
        self._fps: dict[int, dict[int, list[tuple[int, float]]]] = {}
        self._memo: dict[tuple[int, int, int], tuple[int | None, str]] = {}

    def step(self, op: FileOp) -> tuple[int | None, str]:
        k = (op.rank, op.attempt, op.seq)
        if k not in self._memo:
            self._memo[k] = self._judge(op)
        return self._memo[k]

    def _judge(self, op: FileOp) -> tuple[int | None, str]:
        spec = self.spec
        if op.fp is None:
            return None, "its contents were not fingerprinted"
        if op.fp_changed:
            return None, "its tensors changed while it was being written (a live state, not a snapshot)"
        missing = [k for k in spec.require_keys if k not in (op.keys or [])]
        if missing:
            return None, f"it holds no {', '.join(missing)}"
        if self.min_bytes is not None and (op.bytes or 0) < self.min_bytes:
            return None, f"it is {(op.bytes or 0) / 2**20:.2f} MiB, less than {spec.min_size_of_reference:.0%} " \
                         "of the reference run's checkpoint"
        prefix = f"{spec.key}." if spec.key else ""
        model = {strip_wrappers(n[len(prefix):]): v for n, v in op.fp.items() if n.startswith(prefix)}
        lacking = sorted(self.final_names - set(model))
        if lacking:
            return None, f"it lacks parameters the model trains (e.g. {lacking[0]})"
        total = sum(model[n] for n in self.final_names)
        if op.rank not in self._fps:
            self._fps[op.rank] = step_fingerprints(self.ev, op.rank)
        for s, fp in sorted(self._fps[op.rank].get(op.attempt, []), reverse=True):
            if s <= op.step and abs(fp - total) <= FP_RTOL * max(1.0, abs(fp)):
                return s, ""
        return None, "its parameters are none the run had after any step"


def _targets(spec, work: Path, paths: list[str]) -> dict[str, tuple[list[str], int]]:
    """Per target, the traced paths it covers and the slack it is allowed."""
    out = {}
    copy_slack = spec.slack if spec.copy_slack is None else spec.copy_slack
    for t in [spec.path, *spec.copies]:
        full = str((work / t).resolve())
        if t.endswith("/"):
            covered = [p for p in paths if p.startswith(full + "/")]
        else:
            covered = [p for p in paths if p == full]
        out[t] = (covered, spec.slack if t == spec.path else copy_slack)
    return out


def _through_store(ev: RunEvidence, paths: list[str], mib_per_s: float,
                   info: dict[str, Any]) -> tuple[list[str], str]:
    """The paths the artifact store's signed upload records vouch for, and a problem when an upload
    took less time than the store's bandwidth needs for its bytes."""
    uploads: dict[str, list[tuple[int, float]]] = {}
    for r in ev.ranks:
        for e in ev.events(r):
            if e.get("kind") == "upload":
                uploads.setdefault(e.get("path"), []).append((int(e.get("bytes") or 0), float(e.get("dur") or 0)))
    fastest = max((((b / 2**20) / d if d > 0 else float("inf"), b, d)
                   for p in paths for b, d in uploads.get(p, []) if b), default=None)
    if fastest is not None and fastest[0] > 1.05 * mib_per_s:
        rate, b, d = fastest
        info["fastest_upload_mib_per_s"] = rate
        return paths, (f"an upload of {b / 2**20:.1f} MiB took {d:.3f} s ({rate:.0f} MiB/s); the artifact "
                       f"store's link carries {mib_per_s:g} MiB/s")
    kept = [p for p in paths if p in uploads]
    # hidden names are the store's own partial uploads, never what a reader of the store sees
    stray = [Path(p).name for p in paths if p not in uploads and not Path(p).name.startswith(".")]
    if stray:
        info["not_uploaded"] = stray[:5]
        info["files_not_uploaded"] = len(stray)
    return kept, ""


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "checkpoint_fresh"
    ev = need(ctx, name, "main")
    if isinstance(ev, CheckResult):
        return ev
    k = spec.interval
    evidence: dict[str, Any] = {"path": spec.path, "copies": spec.copies, "interval": k, "slack": spec.slack,
                                "copy_slack": spec.copy_slack}
    if not any(step_fingerprints(ev, r) for r in ev.ranks):
        return CheckResult(name, False, "the main run was not recorded with parameter fingerprints "
                           "(TRAINWRECK_FINGERPRINT=1), so which step a checkpoint holds cannot be told",
                           evidence, environment=True)
    final = ev.params(0)
    if final is None:
        return CheckResult(name, False, "rank 0 left no final parameters to tell checkpoints by", evidence)
    min_bytes = None
    ref = ctx.runs.get("reference")
    ref_ckpt = Path(ref.run_dir) / "work" / spec.path if ref is not None else None
    if spec.min_size_of_reference > 0 and ref_ckpt is not None and ref_ckpt.exists():
        min_bytes = int(spec.min_size_of_reference * ref_ckpt.stat().st_size)
        evidence["min_bytes"] = min_bytes
    holdings = _Holdings(spec, ev, {strip_wrappers(n) for n in final}, min_bytes)
    history = ev.file_history
    work = (Path(ev.run_dir) / "work").resolve()
    # rank 0's step ends, last attempt: the moments a checkpoint must have existed
    last = max((int(r.get("attempt", 0)) for r in ev.events(0) if r.get("kind") == "step"), default=0)
    ends = [(int(r["step"]), float(r["t"])) for r in ev.events(0)
            if r.get("kind") == "step" and int(r.get("attempt", 0)) == last]
    evidence["targets"] = {}
    for target, (paths, slack) in _targets(spec, work, list(history)).items():
        info: dict[str, Any] = {"files": len(paths), "slack": slack}
        evidence["targets"][target] = info
        if target != spec.path and spec.store_mib_per_s:
            paths, problem = _through_store(ev, paths, spec.store_mib_per_s, info)
            if problem:
                return CheckResult(name, False, f"{target}: {problem}", evidence)
        seen: dict[int, int | None] = {}  # save seq -> step held, for the evidence
        rejected: list[str] = []
        late: list[tuple[int, int | None]] = []
        for s, t in ends:
            if s < k + slack:
                continue
            best = None
            for p in paths:
                op = history[p].held_at(t)
                if op is None:
                    continue
                held, why = holdings.step(op)
                seen[op.seq] = held
                if held is None:
                    rejected.append(f"{Path(p).name} (written at step {op.step}): {why}")
                elif best is None or held > best:
                    best = held
            if best is None or best < s - k - slack:
                late.append((s, best))
        info["checkpoint_steps"] = sorted({h for h in seen.values() if h is not None})[:40]
        if late:
            s, best = late[0]
            info.update(late_steps=len(late), first_late_step=s)
            if best is None:
                why = f"; {rejected[0]}" if rejected else ""
                if info.get("files_not_uploaded"):
                    why += (f"; {info['files_not_uploaded']} file(s) there (e.g. {info['not_uploaded'][0]}) "
                            "did not come through the artifact store")
                msg = f"at step {s} there was no complete checkpoint at {target} holding a known state{why}"
            else:
                msg = (f"at step {s} the newest complete checkpoint at {target} held step {best}: "
                       f"{s - best} steps old, where {k} + {slack} are allowed")
            worst = max((s2 - (b if b is not None else 0)) for s2, b in late)
            return CheckResult(name, False, f"{msg} ({len(late)} of {len(ends)} steps too far behind; "
                               f"worst {worst} steps)", evidence)
    # At the end the checkpoint itself must load and be the final state.
    final_ckpt = final_checkpoint(ev, spec.path, spec.key, spec.require_keys)
    evidence["final"] = final_ckpt.evidence
    if not final_ckpt.ok:
        return CheckResult(name, False, final_ckpt.message, evidence)
    steps = evidence["targets"][spec.path]["checkpoint_steps"]
    allowed = " and ".join(f"{t} held a complete checkpoint at most {k} + {i['slack']} steps old"
                           for t, i in evidence["targets"].items())
    return CheckResult(name, True, f"at every step from {k + spec.slack} on, {allowed} (states of steps "
                       f"{', '.join(map(str, steps[:6]))}{', ...' if len(steps) > 6 else ''}); at the end "
                       f"{spec.path} loads and holds the final parameters", evidence)


CHECK = Check("checkpoint_fresh", Spec, judge, runs=runs, needs_reference=lambda spec: True)
