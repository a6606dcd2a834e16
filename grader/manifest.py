"""The exercise manifest (``exercises/<slug>/exercise.toml``, ``format_version = 1``) as a typed
model. Every error names the file, the field, and what to write instead."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from grader.errors import ManifestError

FORMAT_VERSION = 1
MANIFEST = "exercise.toml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Reference(_Strict):
    title: str
    url: str


class Workload(_Strict):
    """What a correct run does; ``workload_intact`` compares the telemetry against it."""

    dataset: str = "train"  # ledger name of the training dataset
    dataset_size: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    steps: int = Field(gt=0, description="optimizer steps per rank in an uninterrupted run")
    params: int = Field(gt=0, description="trainable parameter count of the model")
    # samples each rank must consume from other datasets (e.g. {val = 49152}): evaluation is work too
    other_samples_per_rank: dict[str, int] = {}


class RunSettings(_Strict):
    hang_timeout: float = Field(15.0, gt=0)
    startup_timeout: float = Field(60.0, gt=0)
    timeout: float = Field(180.0, gt=0)
    pg_timeout: float = Field(60.0, gt=0)
    args: list[str] = []


class _Check(_Strict):
    required: bool = True
    weight: float = Field(1.0, ge=0)


class Completes(_Check):
    name: Literal["completes"]


class SamplePartition(_Check):
    name: Literal["sample_partition"]
    resume: bool = False  # also kill a rank mid-run and compare the resumed run's consumption
    kill_rank: int = Field(1, ge=0)
    kill_step: int = Field(10, gt=0)
    padding: int = Field(0, ge=0, description="duplicates allowed per epoch (sampler padding)")


class MemoryFlat(_Check):
    name: Literal["memory_flat"]
    warmup_steps: int = Field(10, ge=0)
    max_slope_mb_per_step: float = Field(0.05, gt=0)


class MatchesReference(_Check):
    name: Literal["matches_reference"]
    rtol: float = Field(1e-4, ge=0)
    atol: float = Field(1e-5, ge=0)


class WorldSizeEquivalence(_Check):
    name: Literal["world_size_equivalence"]
    world_sizes: list[int] = [1, 2]
    rtol: float = Field(1e-3, ge=0)
    atol: float = Field(1e-4, ge=0)


class WorkloadIntact(_Check):
    name: Literal["workload_intact"]


class CheckpointValid(_Check):
    """A checkpoint the script writes (path relative to its working dir) loads and holds the final
    parameters: a fix may not pass by deleting the work a collective protected."""

    name: Literal["checkpoint_valid"]
    path: str
    key: str | None = None  # where the model state dict sits inside the checkpoint, if nested
    require_keys: list[str] = []  # other top-level keys the checkpoint must hold (e.g. "scaler")
    # top-level values (metrics, counters) that must equal the reference run's checkpoint: what a
    # collective in the checkpoint path computes cannot be dropped without this check noticing
    reference_keys: list[str] = []
    # from the save trace: one rank wrote it (every rank saving one path is a race, apex#629)
    single_writer: bool = True
    rtol: float = Field(1e-5, ge=0)
    atol: float = Field(1e-6, ge=0)


class CollectivesPerStep(_Check):
    """Python-level collectives per optimizer step (DDP's C++ bucket all-reduces are not traced, so
    a DDP script counts 0 here; a hand-written bucketed sync counts 1)."""

    name: Literal["collectives_per_step"]
    max_per_step: float = Field(gt=0)


class StepTimeTail(_Check):
    """p99 over median of each rank's step times after warm-up: a stall every k steps (a synchronous
    checkpoint, an upload) puts the p99 far above the median while the median hardly moves."""

    name: Literal["step_time_tail"]
    max_p99_over_median: float = Field(gt=1.0)
    warmup_steps: int = Field(5, ge=0)
    min_steps: int = Field(100, ge=20, description="steps after warm-up a p99 needs to mean something")
    # the median step may be at most this many times the reference run's: slowing every step down
    # also hides a stall from the ratio
    max_median_over_reference: float | None = Field(None, gt=1.0)


class CheckpointFresh(_Check):
    """At every optimizer step, a complete checkpoint holding a step no older than ``interval`` +
    ``slack`` steps existed at ``path`` (and in each of ``copies``), from the first time one was
    due; at the end ``path`` loads and holds the final state. Which step a file holds is found from
    the parameter fingerprints of what was serialised, not from the script."""

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


class CheckpointsSound(_Check):
    """The checkpoints a script writes, judged from the save trace and the files, in the main run
    and in two restarted ones: ``kill_rank`` SIGKILLed after step ``kill_step`` (between
    checkpoints), and every rank's first checkpoint write at or after ``save_kill_step`` torn
    half-way by a SIGKILL. Each restart must resume from the newest complete checkpoint."""

    name: Literal["checkpoints_sound"]
    # what a checkpoint that a resume reads must hold, recognised by content, not by key names
    require: list[Literal["model", "optimizer", "scheduler"]] = ["model", "optimizer"]
    kill_rank: int = Field(1, ge=0)
    kill_step: int = Field(gt=0, description="SIGKILL after this optimizer step, between two checkpoints")
    save_kill_step: int | None = Field(None, gt=0, description="tear the first checkpoint write at or "
                                       "after this step; leave out to skip that restart")


CheckSpec = Annotated[
    Union[Completes, SamplePartition, MemoryFlat, MatchesReference, WorldSizeEquivalence,
          WorkloadIntact, CheckpointValid, CollectivesPerStep, StepTimeTail, CheckpointFresh,
          CheckpointsSound],
    Field(discriminator="name"),
]
CHECK_NAMES = ("completes", "sample_partition", "memory_flat", "matches_reference",
               "world_size_equivalence", "workload_intact", "checkpoint_valid", "collectives_per_step",
               "step_time_tail", "checkpoint_fresh", "checkpoints_sound", "throughput")


class Throughput(_Strict):
    target_speedup: float = Field(gt=1.0, description="the reference's expected speedup")
    rounds: int = Field(3, ge=1)
    warmup_rounds: int = Field(1, ge=0)
    weight: float = Field(1.0, ge=0)
    # Where speed is the whole exercise (nothing else in the broken script is wrong), the throughput
    # check gates the pass like a required correctness check.
    required: bool = False
    suspicious_factor: float = Field(2.0, gt=1.0, description="flag speedups this far above the reference")
    # A kit-owned script in the exercise folder (never editable) that runs the same model, batches
    # and steps with no input pipeline and no communication: the compute bound steps/s are
    # reported against. Run as a fourth role in each measured round.
    bound: str | None = None

    @field_validator("bound")
    @classmethod
    def _bound(cls, v: str | None) -> str | None:
        if v is not None and (not v.endswith(".py") or v.startswith("/") or ".." in Path(v).parts):
            raise ValueError(f"{v!r} must be a .py file inside the exercise folder, e.g. \"bound.py\"")
        return v


class Issue(_Strict):
    """A named group of checks graded together (partial credit): fixed when all of them pass."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    checks: list[str] = Field(min_length=1)
    weight: float = Field(1.0, gt=0)


class Manifest(_Strict):
    format_version: int
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    symptom: str
    difficulty: Literal["easy", "medium", "hard"]
    minutes: int = Field(gt=0)
    topics: list[str]
    world_size: int = Field(2, ge=1)
    backends: list[Literal["gloo", "nccl"]] = ["gloo", "nccl"]
    entry: str
    editable: list[str]
    workload: Workload
    run: RunSettings = RunSettings()
    checks: list[CheckSpec]
    broken_fails: list[str] = Field(description="checks the broken script must fail")
    throughput: Throughput | None = None
    issues: list[Issue] = []  # when given, the score is the weighted share of issues fixed
    hints: list[str]
    references: list[Reference] = []

    @field_validator("format_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != FORMAT_VERSION:
            raise ValueError(f"unsupported format_version {v}; this trainwreck reads {FORMAT_VERSION}")
        return v

    @field_validator("hints")
    @classmethod
    def _hints(cls, v: list[str]) -> list[str]:
        if len(v) < 3 or any(not h.strip() for h in v):
            raise ValueError("give at least 3 non-empty progressive hints")
        return v

    @field_validator("issues")
    @classmethod
    def _issues(cls, v: list[Issue], info: ValidationInfo) -> list[Issue]:
        if not v or "checks" not in info.data or "broken_fails" not in info.data:
            return v  # nothing to cross-check, or the fields it needs have their own errors
        known = {c.name for c in info.data["checks"]} | ({"throughput"} if info.data.get("throughput") else set())
        _check_issues(v, known, set(info.data["broken_fails"]))
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Manifest":
        if self.entry not in self.editable:
            raise ValueError(f"entry {self.entry!r} must be listed in editable")
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ValueError("checks: each check may appear once")
        known = set(names) | ({"throughput"} if self.throughput else set())
        for n in self.broken_fails:
            if n not in known:
                raise ValueError(f"broken_fails names {n!r}, which is not among this exercise's checks")
        if not self.broken_fails:
            raise ValueError("broken_fails: name at least one check the broken script must fail")
        if self.throughput and self.throughput.bound in self.editable:
            raise ValueError(f"throughput.bound {self.throughput.bound!r} is editable; the bound must be a "
                             "kit-owned file the candidate cannot change")
        return self

    def check(self, name: str):
        return next((c for c in self.checks if c.name == name), None)


def _check_issues(issues: list[Issue], known: set[str], broken_fails: set[str]) -> None:
    seen: dict[str, str] = {}
    names = [i.name for i in issues]
    for k, issue in enumerate(issues):
        where = f"[{k}] {issue.name!r}"
        if names.count(issue.name) > 1:
            raise ValueError(f"{where}: the name {issue.name!r} is used by more than one issue; give each a "
                             "name of its own")
        for c in issue.checks:
            if c not in known:
                raise ValueError(f"{where}: checks names {c!r}, which is not among this exercise's checks; "
                                 f"use one of: {', '.join(sorted(known))}")
            if c in seen:
                raise ValueError(f"{where}: check {c!r} is already in issue {seen[c]!r}; a check may belong "
                                 "to one issue only")
            seen[c] = issue.name
        if not broken_fails & set(issue.checks):
            raise ValueError(f"{where}: none of its checks is in broken_fails; list there the check the "
                             "broken script fails because of this issue")


def _loc(err: dict[str, Any]) -> str:
    parts = []
    for p in err.get("loc", ()):
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif p in CHECK_NAMES and parts and parts[-1].startswith("["):
            continue  # the discriminator's tag adds nothing the index does not say
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def _fix(err: dict[str, Any]) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add it"
    if kind == "extra_forbidden":
        return "remove it or check its spelling"
    if kind == "union_tag_invalid":
        return f"use one of: {', '.join(CHECK_NAMES[:-1])}"
    if kind == "union_tag_not_found":
        return "give the check a name"
    if kind == "too_short":
        return "list at least that many"
    return "fix the value"


def describe_validation_error(path: Path, e: ValidationError) -> str:
    """The first problem as one line, ``<file>: <field>: <problem>; <fix>``, and how many more."""
    err = e.errors()[0]
    msg = err["msg"].removeprefix("Value error, ")
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return f"{path}: {_loc(err)}: {msg}; {_fix(err)}{more}"


def load_manifest(path: Path) -> Manifest:
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST
    if not path.exists():
        raise ManifestError(f"{path}: not found; each exercise folder needs an {MANIFEST}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ManifestError(f"{path}: not valid TOML ({e}); fix the syntax") from None
    try:
        m = Manifest.model_validate(data)
    except ValidationError as e:
        raise ManifestError(describe_validation_error(path, e)) from None
    if m.slug != path.parent.name:
        raise ManifestError(f"{path}: slug: {m.slug!r} differs from its folder {path.parent.name!r}; "
                            "make them the same")
    for f in m.editable:
        if not (path.parent / f).is_file():
            raise ManifestError(f"{path}: editable: {f!r} is not a file in {path.parent}; "
                                "list files that exist")
    if m.throughput and m.throughput.bound and not (path.parent / m.throughput.bound).is_file():
        raise ManifestError(f"{path}: throughput.bound: {m.throughput.bound!r} is not a file in {path.parent}; "
                            "name the compute-bound script that exists there")
    return m
