"""What every check is made of. A check is one module, ``grader/checks/<name>.py``, that defines

- ``Spec``: what its ``[[checks]]`` table in the manifest may set (a pydantic model whose ``name``
  is the check's name; a wrong field is reported with its file and field),
- ``CHECK = Check(...)``: its name, its spec, the runs it needs besides ``main``, whether it needs
  the reference run, and its judge: a pure function ``judge(spec, ctx) -> CheckResult`` over the
  run evidence.

The registry (``grader.checks.REGISTRY``), the manifest's list of check names and the grading plan
are built from these declarations. A message names what was observed ("rank 1 consumed indices
0-63 in epoch 0 and again in epoch 1"), never the fix. A check that cannot judge because a run it
needs is missing, or broke for reasons outside the submission, returns ``environment=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from grader.evidence import RunEvidence, harness_failed
from grader.roles import Role, RunRequest

if TYPE_CHECKING:
    from grader.manifest import Manifest


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckSpec(Strict):
    """The fields every check's manifest table has."""

    if TYPE_CHECKING:
        # each check's Spec declares it as Literal["<its name>"] (the manifest's discriminator); a
        # pydantic field here would let a spec be built without it
        name: str

    required: bool = True  # a failure fails the submission (else the check only earns credit)
    weight: float = Field(1.0, ge=0)

    def validate_in(self, manifest: Manifest) -> None:
        """Cross-field rules that need the whole manifest: raise ValueError("<field>: <problem>;
        <fix>") (the manifest adds which check)."""

    def missing_files(self, folder: Path) -> str | None:
        """A file the spec names that the exercise folder lacks: "<field>: <problem>; <fix>"."""
        return None


@dataclass
class CheckResult:
    name: str
    passed: bool
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    environment: bool = False  # could not judge: a run the check needs broke outside the submission
    required: bool = True
    weight: float = 1.0
    # share of the check's weight earned, in [0, 1]; None: 1 when passed, else 0 (throughput earns
    # its normalised speedup whether or not it reaches the pass bar)
    credit: float | None = None

    def earned(self) -> float:
        return (1.0 if self.passed else 0.0) if self.credit is None else self.credit

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _no_runs(spec: Any, manifest: Manifest) -> list[RunRequest]:
    return []


def _no_reference(spec: Any) -> bool:
    return False


@dataclass(frozen=True)
class Check:
    name: str
    spec: type[CheckSpec]
    judge: Callable[[Any, Context], CheckResult]
    runs: Callable[[Any, Manifest], list[RunRequest]] = _no_runs  # besides main
    needs_reference: Callable[[Any], bool] = _no_reference
    # judged after every other check, seeing their verdicts (throughput counts only when correct)
    after_others: bool = False
    # runs of its own after the ordinary ones (throughput's interleaved rounds): (spec, how) -> a
    # JSON-able measurement, kept in result.json and handed to the judge as ctx.measurements[name]
    measure: Callable[[Any, Any], dict[str, Any]] | None = None
    # the one property of the brief this check judges, in a phrase (the validity table shows it)
    property: str = ""


@dataclass
class Context:
    manifest: Manifest
    runs: dict[str, RunEvidence]  # by run name (grader.roles)
    protected_changed: list[str] = field(default_factory=list)
    measurements: dict[str, Any] = field(default_factory=dict)  # e.g. the throughput rounds
    earlier: list[CheckResult] = field(default_factory=list)  # verdicts of the checks judged before


def need(ctx: Context, name: str, role: str, ok_only: bool = True) -> RunEvidence | CheckResult:
    """The run a check needs, or the verdict that it could not be judged."""
    ev = ctx.runs.get(role)
    if ev is None:
        return CheckResult(name, False, f"no {role} run to judge from", environment=True)
    why = harness_failed(ev)
    if why:
        return CheckResult(name, False, why, environment=True)
    if ok_only and ev.status != "ok":
        return CheckResult(name, False, f"{ev.describe()} did not complete (status {ev.status})",
                           {"status": ev.status}, environment=role == Role.REFERENCE)
    return ev


def trained_to_the_end(ev: RunEvidence, steps: int) -> bool:
    """Every rank of the job made all the workload's optimizer steps in its last attempt."""
    return len(ev.ranks) == ev.world_size > 0 and all(o.steps >= steps for o in ev.ranks.values())


def need_trained(ctx: Context, name: str, role: str = Role.MAIN) -> RunEvidence | CheckResult:
    """Like ``need``, but a run that failed only after every rank finished training (a collective at
    the end that one rank never reached, say) is judged too: the records of its training are whole,
    and how the job ended is for ``completes`` to judge. This is what lets an exercise with several
    planted issues credit each one while another still breaks the end of the run."""
    ev = need(ctx, name, role, ok_only=False)
    if isinstance(ev, CheckResult) or ev.status == "ok" or trained_to_the_end(ev, ctx.manifest.workload.steps):
        return ev
    return CheckResult(name, False, f"{ev.describe()} did not complete (status {ev.status}) and stopped before "
                       f"the last of its {ctx.manifest.workload.steps} steps", {"status": ev.status})


def ranges(indices: list[int], limit: int = 4) -> str:
    """'0-63, 128-131' for a sorted list of ints, at most ``limit`` ranges."""
    if not indices:
        return "none"
    xs = sorted(set(indices))
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:]:
        if x != prev + 1:
            out.append((start, prev))
            start = x
        prev = x
    out.append((start, prev))
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in out[:limit]]
    return ", ".join(parts) + (f" and {len(out) - limit} more ranges" if len(out) > limit else "")


def agreed_params(ev: RunEvidence, name: str) -> dict[str, Any] | CheckResult:
    """Rank 0's final parameters, after checking every rank holds the same ones."""
    from grader.evidence.params import disagreement

    why = disagreement(ev)
    params = ev.params(0)
    if why is None and params is not None:
        return params
    if why is None:  # a run without ranks: rank 0 left nothing either
        why = {"missing_ranks": [0]}
    if "missing_ranks" in why:
        missing = why["missing_ranks"]
        return CheckResult(name, False, f"{ev.describe()}: rank {missing[0]} left no final parameters "
                           "(it stepped no optimizer, or its record was altered)", why)
    return CheckResult(name, False, f"{ev.describe()}: rank {why['rank']}'s final parameters differ from "
                       f"rank 0's (max difference {why.get('max_abs_diff', float('nan')):.3g} in "
                       f"{why.get('worst_param')}): the replicas diverged", why)
