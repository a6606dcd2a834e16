"""checkpoint_fresh: taking a stall out of the step loop must still leave a fresh, complete
checkpoint on disk at every step. The save trace is replayed into what each path held at each
rank-0 step end; which step a file holds is found by matching the per-tensor fingerprints of what
was serialised against the per-step parameter fingerprints, not from the script.

A checkpoint may span several files (a folder published by one rename, a torch.distributed
checkpoint): when ``path`` names such a folder, it is judged as one, from what all its files held.
Copies in the kit's artifact store are judged from the store service's own log (a process outside
the ranks, ``grader/evidence/store.py``), never from what a rank says about its uploads: an object
counts from the moment the service published it, holding the checkpoint its traced source held,
and files that reached the store's folder any other way fail the check by name.

What the trace cannot tell, the parent's watcher can (``grader/evidence/watched.py``): ``path``, when
it names a file, is watched from outside in the main run, and each version published there (by any
writer: bytes serialised in memory and written with ``open().write``, a writer process the script
spawned) is judged from the parent's copy of it, as a traced save is; an object in the store holds
the watched version whose bytes it received."""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence import RunEvidence, contents
from grader.evidence.checkpoint import final_checkpoint
from grader.evidence.fingerprints import FP_RTOL, step_fingerprints
from grader.evidence.saves import FileOp, FileState, Unit
from grader.evidence.steptimes import step_times
from grader.evidence.store import StoreObjects, store_objects
from grader.evidence.watched import held_at
from grader.roles import FINGERPRINTS, Role, RunRequest

if TYPE_CHECKING:
    from grader.manifest import Manifest


class Spec(CheckSpec):
    """At every optimizer step, a complete checkpoint holding a step no older than ``interval`` +
    ``slack`` steps existed at ``path`` (and in each of ``copies``), from the first time one was
    due; at the end ``path`` loads and holds the final state, and the newest checkpoint in each copy
    holds it too.

    Where the run has an artifact store, ``interval`` is at least the steps one upload of the
    reference's checkpoint takes at the rate the store enforces (the store's own log), at the run's
    median step time (the parent's clock where it has one): a checkpoint cannot be fresher than the
    store can take them, and on a faster machine (a GPU) fifty steps take less than one upload, so a
    bound in steps alone would fail the reference itself."""

    name: Literal["checkpoint_fresh"]
    path: str  # relative to the script's working dir
    interval: int = Field(gt=0, description="k: optimizer steps between checkpoints")
    slack: int = Field(0, ge=0, description="steps a checkpoint may take to be written, beyond interval")
    copies: list[str] = []  # other places every checkpoint must reach: a file, or a folder ending in /
    # steps a copy may trail beyond interval (an upload to a remote store takes longer); slack if None
    copy_slack: int | None = Field(None, ge=0)
    # state besides the model every checkpoint must hold, recognised by content
    # (grader.evidence.contents): each save by its optimizer's per-parameter tensors (from the save
    # trace), the final checkpoint, loaded whole, by all of them
    require: list[Literal["optimizer", "scheduler", "scaler", "step"]] = []
    # every checkpoint relied on must be at least this share of the reference run's final checkpoint
    min_size_of_reference: float = Field(0.9, ge=0, le=1)

    @field_validator("copies")
    @classmethod
    def _copies(cls, v: list[str]) -> list[str]:
        if any(not c.strip() or c.startswith("/") for c in v):
            raise ValueError("give paths relative to the script's working dir (a folder ends in /)")
        return v


def runs(spec: Spec, manifest: Manifest) -> list[RunRequest]:
    # which step a checkpoint holds is told by parameter fingerprints in the main run; a checkpoint
    # file is watched from outside there too (a folder is judged from the trace)
    watch = () if spec.path.endswith("/") else (spec.path,)
    return [RunRequest(Role.MAIN, manifest.world_size, env=FINGERPRINTS, watch=watch)]


class _Holdings:
    """Which step the state in each traced save is, judged once per save."""

    def __init__(self, spec: Spec, ev: RunEvidence, n_params: int, min_bytes: int | None, optimizer_tensors: bool):
        self.spec, self.ev, self.n_params, self.min_bytes = spec, ev, n_params, min_bytes
        # whether the run's optimizer keeps per-parameter tensors (SGD without momentum keeps none,
        # and then no save can show them), from the final checkpoint, loaded whole
        self.optimizer_tensors = optimizer_tensors
        self._fps: dict[int, dict[int, list[tuple[int, float]]]] = {}
        self._memo: dict[tuple[int, int, int], tuple[int | None, str]] = {}

    def step(self, op: FileOp) -> tuple[int | None, str]:
        k = op.key
        if k not in self._memo:
            self._memo[k] = self._judge(op)
        return self._memo[k]

    def _judge(self, op: FileOp) -> tuple[int | None, str]:
        spec = self.spec
        if op.op == "watched" and op.error:
            return None, op.error
        if op.fp is None:
            return None, "its contents were not fingerprinted"
        if op.fp_changed:
            return None, "its tensors changed while it was being written (a live state, not a snapshot)"
        if op.rank not in self._fps:
            self._fps[op.rank] = step_fingerprints(self.ev, op.rank)
        # the model is wherever, under one prefix of the saved tensors' paths, as many tensors as
        # the model trains sum to the fingerprint of a step the run made (names are the script's)
        totals = model_sums(op.fp, self.n_params)
        if not totals:
            return None, f"it holds no set of {self.n_params} tensors, as the model trains, under one key"
        if "optimizer" in spec.require and self.optimizer_tensors and not _optimizer_terms(op.fp):
            return None, "it holds no optimizer state"
        # after what it lacks, which names the property: a smaller state than the reference's
        # (a model-only save is a third of AdamW's) is the fallback reason
        if self.min_bytes is not None and (op.bytes or 0) < self.min_bytes:
            return None, f"it is {(op.bytes or 0) / 2**20:.2f} MiB, less than {spec.min_size_of_reference:.0%} " \
                         "of the reference run's checkpoint"
        for s, fp in sorted(self._fps[op.rank].get(op.attempt, []), reverse=True):
            if s <= op.step and any(abs(fp - total) <= FP_RTOL * max(1.0, abs(fp)) for total in totals):
                return self._consistent(op, s)
        return None, "its parameters are none the run had after any step"

    def _consistent(self, op: FileOp, s: int) -> tuple[int | None, str]:
        """A checkpoint that says which step it is must hold that step's parameters: the integers
        it was saved with, beside the step its tensors hold. A state dict of live tensors handed to
        a writer (no copy) is saved as the tensors are when the writer gets to it, while its step
        count is the one taken with the snapshot: a resume from it would replay the steps between
        with the state of the later one. Steps done (s) and the next step's index (s + 1) are both
        conventions; a checkpoint whose integers were not traced (a tensor step) is not judged so."""
        if "step" not in self.spec.require or not op.ints:
            return s, ""
        if any(v in (s, s + 1) for v in op.ints.values()):
            return s, ""
        said = ", ".join(f"{k} = {v}" for k, v in list(op.ints.items())[:4])
        return None, (f"it holds the parameters of step {s} but no step count that says so ({said}): the "
                      "tensors moved on after the snapshot was taken, a live state, not a snapshot")


def _optimizer_terms(fp: dict[str, float] | None) -> bool:
    """Tensors laid out as torch lays out an optimizer's state dict: ``<...>state.<index>.<name>``."""
    import re

    return any(re.search(r"(^|\.)state\.\d+\.[A-Za-z_]+$", n) for n in (fp or {}))


def model_sums(fp: dict[str, float] | None, n_params: int) -> list[float]:
    """For each dotted prefix under which exactly ``n_params`` tensors were saved, outside an
    optimizer's state, the sum of their fingerprint terms: the candidates for the model's
    fingerprint (``harness.instrument.fingerprint`` sums the same per-tensor terms)."""
    import re

    groups: dict[str, list[float]] = {}
    for n, v in (fp or {}).items():
        # an optimizer's state by its layout (``state.<index>.``), not by the word: a checkpoint
        # nested as {"state": {"model": ...}} keeps its model under "state." (a correct fix so
        # written was failed in the validity suite)
        if re.search(r"(^|\.)(state\.\d+|param_groups)\.", n):
            continue
        parts = n.split(".")
        for i in range(0, min(len(parts), 6)):
            groups.setdefault(".".join(parts[:i]), []).append(v)
    return [sum(v) for v in groups.values() if len(v) == n_params]


class _Target:
    """What one place (``path`` or a copy) held over time: files, a checkpoint folder, or the
    objects of the artifact store."""

    def __init__(self, name: str, slack: int, paths: list[str], states: dict[str, FileState],
                 unit: Unit | None = None, ev: RunEvidence | None = None):
        self.name, self.slack, self.paths, self.states, self.unit = name, slack, paths, states, unit
        self.ev = ev  # a single file: what it held by the trace, else by the parent's watcher

    def held(self, t: float) -> list[tuple[str, FileOp]]:
        if self.ev is not None:
            return [(p, op) for p in self.paths if (op := held_at(self.ev, p, t)) is not None]
        if self.unit is not None:
            v = self.unit.held_at(self.states, t)
            return [(self.unit.path, v.merged())] if v is not None else []
        return [(p, op) for p in self.paths if (op := self.states[p].held_at(t)) is not None]


def _targets(spec: Spec, ev: RunEvidence, work: Path, store: StoreObjects | None,
             evidence: dict[str, Any]) -> tuple[list[_Target], str]:
    """Per target, what it held, and a problem that fails the check outright (the store's folder
    written other than through the store)."""
    out: list[_Target] = []
    copy_slack = spec.slack if spec.copy_slack is None else spec.copy_slack
    history = ev.file_history
    root = os.path.realpath(ev.store.root) if store is not None and ev.store and ev.store.root else None
    for t in [spec.path, *spec.copies]:
        slack = spec.slack if t == spec.path else copy_slack
        full = str((work / t).resolve())
        info: dict[str, Any] = {"slack": slack}
        evidence["targets"][t] = info
        if store is not None and root is not None and t != spec.path and (full == root or full.startswith(root + "/")):
            info.update(store=True, **store.info)
            if store.rejected:
                info["uploads_not_told"] = store.rejected[:5]
            if store.foreign:
                info["not_uploaded"] = store.foreign[:10]
                more = f" (and {len(store.foreign) - 1} more)" if len(store.foreign) > 1 else ""
                return out, (f"{t}: {store.foreign[0]}{more}: files reach the artifact store only by an upload "
                             "to it, which the store logs; these did not come through it")
            paths = [p for p in store.history if p == full or p.startswith(full + "/")]
            info["files"] = len(paths)
            out.append(_Target(t, slack, paths, store.history))
            continue
        unit = ev.units.get(full)
        if unit is not None and unit.kind != "file":
            info.update(files=len(unit.files_seen), layout=unit.kind)
            out.append(_Target(t, slack, [full], history, unit))
            continue
        if t.endswith("/"):
            covered = [p for p in history if p.startswith(full + "/")]
            info["files"] = len(covered)
            out.append(_Target(t, slack, covered, history))
            continue
        seen = ev.watched.by_path.get(full, []) if ev.watched is not None else []
        info["files"] = int(full in history or bool(seen))
        if seen:
            info["watched_versions"] = sum(o.kind == "version" for o in seen)
        out.append(_Target(t, slack, [full], history, ev=ev))
    return out, ""


def _store_steps(store: StoreObjects | None, ref_bytes: int | None, ev: RunEvidence) -> dict[str, Any]:
    """How many of this run's steps one upload of the reference's checkpoint takes at the store's
    enforced rate: ``{"upload_s", "step_s", "store_steps", "mib_per_s"}``, empty where there is no
    store, no reference checkpoint or too few steps. The median step is rank 0's by the parent's
    clock where the run has one (``step_times``: a rank's own clock could be made to run slow,
    which would loosen the bound)."""
    rate = (store.info or {}).get("mib_per_s") if store is not None else None
    secs = step_times(ev, 0).seconds[1:]  # the first step of an attempt is warm-up
    if not rate or not ref_bytes or len(secs) < 3:
        return {}
    upload_s = ref_bytes / (float(rate) * 2**20)
    step_s = statistics.median(secs)
    if step_s <= 0:
        return {}
    return {"upload_s": round(upload_s, 3), "step_s": round(step_s, 5),
            "store_steps": math.ceil(round(upload_s / step_s, 6)), "mib_per_s": rate}


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
    min_bytes = ref_bytes = None
    ref = ctx.runs.get("reference")
    ref_ckpt = Path(ref.run_dir) / "work" / spec.path if ref is not None else None
    if ref_ckpt is not None and ref_ckpt.exists():
        ref_bytes = _size(ref_ckpt)
    if spec.min_size_of_reference > 0 and ref_bytes is not None:
        min_bytes = int(spec.min_size_of_reference * ref_bytes)
        evidence["min_bytes"] = min_bytes
    final_ckpt = final_checkpoint(ev, spec.path, spec.require)
    # whether the run's optimizer keeps per-parameter tensors, from the final checkpoint as loaded
    # (whatever its verdict): SGD without momentum keeps none, and then no save can show any
    moments = contents.optimizer_moments(final_ckpt.content) if final_ckpt.content is not None else None
    stateless = moments is not None and not moments and contents.first_hollow(final_ckpt.content) is None
    holdings = _Holdings(spec, ev, len(final), min_bytes, optimizer_tensors=not stateless)
    work = (Path(ev.run_dir) / "work").resolve()
    store = store_objects(ev)
    wants_store = getattr(getattr(ctx.manifest, "run", None), "store", None) is not None
    if wants_store and store is None:
        return CheckResult(name, False, "the main run had no artifact store service (the manifest's [run.store]), "
                           "so which copies reached the store cannot be told", evidence, environment=True)
    # rank 0's step ends, last attempt: the moments a checkpoint must have existed
    last = max((int(r.get("attempt", 0)) for r in ev.events(0) if r.get("kind") == "step"), default=0)
    ends = [(int(r["step"]), float(r["t"])) for r in ev.events(0)
            if r.get("kind") == "step" and int(r.get("attempt", 0)) == last]
    evidence["targets"] = {}
    targets, problem = _targets(spec, ev, work, store, evidence)
    if problem:
        return CheckResult(name, False, problem, evidence)
    paced = _store_steps(store, ref_bytes, ev)
    if paced:
        evidence["store_pace"] = paced
    k = max(spec.interval, paced.get("store_steps", 0))
    evidence["interval_allowed"] = k
    pace = (f" (one upload of the reference's checkpoint at the store's {paced['mib_per_s']:g} MiB/s takes "
            f"{paced['upload_s']:.2f} s, {paced['store_steps']} steps of {paced['step_s'] * 1e3:.1f} ms: more "
            f"than the interval of {spec.interval})") if k > spec.interval else ""
    for tg in targets:
        target, slack, info = tg.name, tg.slack, evidence["targets"][tg.name]
        seen: dict[tuple[int, int, int], int | None] = {}  # write -> step held, for the evidence
        rejected: list[str] = []
        late: list[tuple[int, int | None]] = []
        oldest = 0  # the largest age seen, in steps: the evidence a tolerance's margin is read from
        for s, t in ends:
            if s < k + slack:
                continue
            best = None
            for p, op in tg.held(t):
                held, why = holdings.step(op)
                seen[op.key] = held
                if held is None:
                    rejected.append(f"{Path(p).name} (written at step {op.step}): {why}")
                elif best is None or held > best:
                    best = held
            if best is None or best < s - k - slack:
                late.append((s, best))
            if best is not None:
                oldest = max(oldest, s - best)
        info["checkpoint_steps"] = sorted({h for h in seen.values() if h is not None})[:40]
        info["worst_age"] = oldest
        if late:
            s, best = late[0]
            info.update(late_steps=len(late), first_late_step=s)
            if best is None:
                why = f"; {rejected[0]}" if rejected else ""
                if info.get("uploads_not_told"):
                    why += f"; the store's uploads hold no state the grader can tell: {info['uploads_not_told'][0]}"
                elif info.get("store") and not info.get("uploads"):
                    why += "; nothing was uploaded to the artifact store"
                msg = f"at step {s} there was no complete checkpoint at {target} holding a known state{why}"
            else:
                msg = (f"at step {s} the newest complete checkpoint at {target} held step {best}: "
                       f"{s - best} steps old, where {k} + {slack} are allowed{pace}")
            worst = max((s2 - (b if b is not None else 0)) for s2, b in late)
            return CheckResult(name, False, f"{msg} ({len(late)} of {len(ends)} steps too far behind; "
                               f"worst {worst} steps)", evidence)
    # At the end the checkpoint itself must load and be the final state.
    evidence["final"] = final_ckpt.evidence
    if not final_ckpt.ok:
        return CheckResult(name, False, final_ckpt.message, evidence)
    # and so must every copy: what an evaluation job or a resume elsewhere finds once the job is over
    # (an upload the job's exit cut off is never published: the store's log says so, "aborted")
    for tg in targets:
        if tg.name == spec.path or not ends:
            continue
        steps_held = [h for _, op in tg.held(math.inf) if (h := holdings.step(op)[0]) is not None]
        newest, last_step = max(steps_held, default=None), ends[-1][0]
        evidence["targets"][tg.name]["final_step"] = newest
        if newest != last_step:
            cut = evidence["targets"][tg.name].get("aborted") or 0
            why = (f"; {cut} upload{'s were' if cut > 1 else ' was'} cut off unfinished when the job ended" if cut
                   else "")
            return CheckResult(name, False, f"at the end the newest checkpoint in {tg.name} held "
                               f"{'no known state' if newest is None else f'step {newest}'}, not the final model "
                               f"(step {last_step}){why}", evidence)
    steps = evidence["targets"][spec.path]["checkpoint_steps"]
    allowed = " and ".join(f"{t} held a complete checkpoint at most {k} + {i['slack']} steps old"
                           for t, i in evidence["targets"].items())
    return CheckResult(name, True, f"at every step from {k + spec.slack} on, {allowed}{pace} (states of steps "
                       f"{', '.join(map(str, steps[:6]))}{', ...' if len(steps) > 6 else ''}); at the end "
                       f"{spec.path} loads and holds the final parameters"
                       f"{', as does the newest checkpoint in every copy' if spec.copies else ''}", evidence)


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
    return path.stat().st_size


CHECK = Check("checkpoint_fresh", Spec, judge, runs=runs, needs_reference=lambda spec: True,
              property='a complete checkpoint no older than the interval exists at every step (and in every copy), and the last holds the final state')
