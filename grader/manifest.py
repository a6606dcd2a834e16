"""The exercise manifest (``exercises/<slug>/exercise.toml``, ``format_version = 1``) as a typed
model. Every error names the file, the field, and what to write instead."""

from __future__ import annotations

import functools
import operator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import ErrorDetails

from grader.checks import CHECK_NAMES, REGISTRY
from grader.checks.base import Strict as _Strict
from grader.checks.throughput import Spec as ThroughputSpec
from grader.errors import ManifestError as ManifestError  # re-exported: callers take it from here
from grader.files import read_toml
from harness import defaults
from harness.store_s3 import BUCKET, DEFAULT_BUCKET

FORMAT_VERSION = 1
MANIFEST = "exercise.toml"


class Reference(_Strict):
    title: str
    url: str


class Evaluation(_Strict):
    count: int = Field(gt=0, description="evaluations in an uninterrupted run")
    samples: int = Field(gt=0, description="distinct samples each evaluation reads, over all ranks")
    # the split's length where an evaluation reads only part of it (a held-out estimate of 64 of
    # 256): how its DataLoader's dataset is recognised in a script that brings its own data
    dataset_size: int | None = Field(None, gt=0)


class Workload(_Strict):
    """What a correct run does; ``workload_intact`` compares the telemetry against it."""

    dataset: str = "train"  # ledger name of the training dataset
    dataset_size: int = Field(gt=0)
    global_batch: int = Field(gt=0)
    steps: int = Field(gt=0, description="optimizer steps per rank in an uninterrupted run")
    # steps a correct run may leave out, where the brief lets a step be skipped (a batch holding a
    # corrupt record skipped on every rank): its batches are still read, so the samples read stay
    # steps x global_batch; 0: every step is taken
    skippable_steps: int = Field(0, ge=0)
    params: int = Field(gt=0, description="trainable parameter count of the model")
    # micro-batches of gradient accumulation per optimizer step, where the brief keeps them: each
    # backpropagated forward pass may hold at most global_batch / (world_size x backward_per_step)
    # samples. Whatever this says, a step may train on no more samples than the global batch's share
    # (workload_intact: judged in samples, not in backward calls)
    backward_per_step: int = Field(1, gt=0)
    # the autocast dtype the model's forward passes run under (e.g. "float16"); None: not judged
    autocast: str | None = None
    # the dtype the forward passes compute in, by autocast or by weights cast to it (e.g. "bfloat16");
    # None: not judged. Unlike ``autocast``, fp32 master weights with a bf16 copy pass too
    compute_dtype: str | None = None
    # evaluations on other datasets: how many, of how many distinct samples each (e.g. {val = {count
    # = 96, samples = 1024}}). Judged by what all ranks and their loader workers read, a sample counted
    # once per evaluation whichever rank or process read it: rank 0 scoring the whole split alone is
    # as good as every rank scoring a shard.
    evaluations: dict[str, Evaluation] = {}


class StoreSettings(_Strict):
    """The exercise's artifact store, an S3-compatible service run outside the ranks for every run
    of the exercise (``harness.store_service``; the ranks reach it at ``AWS_ENDPOINT_URL_S3``): its
    bucket, the folder in the working dir it keeps objects in, and its link's rate."""

    root: str = Field("artifacts", pattern=r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$")
    bucket: str = Field(DEFAULT_BUCKET, pattern=BUCKET.pattern)
    mib_per_s: float = Field(gt=0, description="the link's rate, MiB/s, shared by every upload")
    max_object_mib: float = Field(256.0, gt=0)

    @field_validator("root")
    @classmethod
    def _root(cls, v: str) -> str:
        if ".." in v.split("/"):
            raise ValueError("give a folder inside the working dir, without '..'")
        return v

    def launch_config(self, keep_copies: bool = False) -> StoreConfig:
        """``keep_copies``: the store keeps what every upload carried (a grading judges objects by
        their content; a practice run has no use for the disk it takes)."""
        from harness.store_service import StoreConfig

        return StoreConfig(root=self.root, bucket=self.bucket, mib_per_s=self.mib_per_s,
                           max_object_mib=self.max_object_mib, keep_copies=keep_copies)


class RunSettings(_Strict):
    hang_timeout: float = Field(defaults.HANG_TIMEOUT_S, gt=0)
    startup_timeout: float = Field(defaults.STARTUP_TIMEOUT_S, gt=0)
    timeout: float = Field(180.0, gt=0)
    pg_timeout: float | None = Field(None, gt=0)  # torch's own unless the exercise needs a shorter one
    args: list[str] = []
    # the fault a proper fix must survive: the gradients of this optimizer step overflow (set to inf
    # on every rank after backward) in every run of a grading, the reference's included
    overflow_at_step: int | None = Field(None, ge=2)
    store: StoreSettings | None = None  # the exercise's script publishes to an object store


class LimitSettings(_Strict):
    """``[limits]``: the caps of each sandboxed run of this exercise, where the defaults
    (``harness.limits.Limits``) do not fit (a workload that needs more memory or disk)."""

    memory_mb: float | None = Field(None, ge=256)
    processes: int | None = Field(None, gt=0)
    tasks: int | None = Field(None, ge=64)
    disk_mb: float | None = Field(None, gt=0)
    files: int | None = Field(None, gt=0)
    file_mb: float | None = Field(None, gt=0)
    tmp_mb: int | None = Field(None, gt=0)
    shm_mb: int | None = Field(None, gt=0)
    log_mb: float | None = Field(None, gt=0)

    def to_limits(self) -> Limits:
        from harness.limits import Limits

        return Limits(**{k: v for k, v in self.model_dump().items() if v is not None})


def _check_spec_union() -> Any:
    """The checks' own spec models, told apart by their ``name``."""
    return Annotated[functools.reduce(operator.or_, (c.spec for c in REGISTRY.values())),
                     Field(discriminator="name")]


if TYPE_CHECKING:
    # the union is built from the registry at import time, which a checker cannot follow: to it a
    # check's spec is the base every check's Spec derives from
    from grader.checks.base import CheckSpec
    from harness.limits import Limits
    from harness.store_service import StoreConfig
else:
    CheckSpec = _check_spec_union()


class Issue(_Strict):
    """A named group of checks graded together (partial credit): fixed when all of them pass."""

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str = Field(min_length=1)
    checks: list[str] = Field(min_length=1)
    weight: float = Field(1.0, gt=0)


class Calibration(_Strict):
    """How long the fix took to find from the brief alone, tried as a new candidate would (the
    workspace of `trainwreck start`, no solution, no notes): what `minutes` and `difficulty` rest on."""

    cause_minutes: int = Field(gt=0, description="to the root cause, shown with evidence")
    pass_minutes: int | None = Field(None, gt=0, description="to a passing grade; None: it did not pass")
    hints: int = Field(ge=0, description="hints taken")
    by: str = Field(min_length=1, description="who tried, and when")

    @model_validator(mode="after")
    def _order(self) -> Calibration:
        if self.pass_minutes is not None and self.pass_minutes < self.cause_minutes:
            raise ValueError("pass_minutes is before cause_minutes: a pass comes after the cause is found")
        return self


class Manifest(_Strict):
    format_version: int
    kind: Literal["script"] = "script"  # a design scenario has its own manifest (grader/scenario.py)
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
    limits: LimitSettings = LimitSettings()
    checks: list[CheckSpec]
    broken_fails: list[str] = Field(description="checks the broken script must fail")
    issues: list[Issue] = []  # when given, the score is the weighted share of issues fixed
    hints: list[str]
    references: list[Reference] = []
    calibration: Calibration | None = None
    # the interviewer's rubric (rubrics/<id>.toml); default: debugging, or optimisation where
    # speed is graded. Extra dimensions (a rubric dimension's fields) are checked by grader.rubric.
    rubric: str | None = Field(None, pattern=r"^[a-z][a-z0-9_-]*$")
    rubric_dimensions: list[dict[str, Any]] = []

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
        known = {c.name for c in info.data["checks"]}
        _check_issues(v, known, set(info.data["broken_fails"]))
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.entry not in self.editable:
            raise ValueError(f"entry {self.entry!r} must be listed in editable")
        names = [c.name for c in self.checks]
        if len(set(names)) != len(names):
            raise ValueError("checks: each check may appear once")
        known = set(names)
        for n in self.broken_fails:
            if n not in known:
                raise ValueError(f"broken_fails names {n!r}, which is not among this exercise's checks")
        if not self.broken_fails:
            raise ValueError("broken_fails: name at least one check the broken script must fail")
        for i, c in enumerate(self.checks):
            try:
                c.validate_in(self)
            except ValueError as e:
                raise ValueError(f"checks[{i}].{e}") from None
        return self

    def check(self, name: str) -> CheckSpec | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def throughput(self) -> ThroughputSpec | None:
        """The throughput check's spec, where the exercise is graded on speed."""
        spec = self.check("throughput")
        return spec if isinstance(spec, ThroughputSpec) else None


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


def _loc(err: ErrorDetails) -> str:
    parts = []
    for p in err.get("loc", ()):
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif p in CHECK_NAMES and parts and parts[-1].startswith("["):
            continue  # the discriminator's tag adds nothing the index does not say
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"


def _fix(err: ErrorDetails) -> str:
    kind = err.get("type", "")
    if kind == "missing":
        return "add it"
    if kind == "extra_forbidden":
        return "remove it or check its spelling"
    if kind == "union_tag_invalid":
        return f"use one of: {', '.join(CHECK_NAMES)}"
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
    data = read_toml(path, ManifestError)
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
    for i, c in enumerate(m.checks):
        missing = c.missing_files(path.parent)
        if missing:
            raise ManifestError(f"{path}: checks[{i}].{missing}")
    return m
