"""The judge phase: from the runs of a grading (and what checks measured) to verdicts and a score.
Pure over files already on disk; ``grade`` and ``regrade`` both call ``judge``, so a stored grading
re-judged with the same checks gets the same result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grader.checks import REGISTRY, CheckResult, Context, run_check
from grader.evidence import RunEvidence, reader
from grader.manifest import Manifest
from grader.result import Isolation
from grader.scoring import Score, score


@dataclass
class Verdict:
    checks: list[CheckResult]
    score: Score


def judge(manifest: Manifest, runs: dict[str, RunEvidence], protected_changed: list[str],
          measurements: dict[str, Any], environment_failure: str | None = None,
          isolation: Isolation | None = None) -> Verdict:
    """Every check of the manifest in its order, those judged after the others last; a check with
    a measurement of its own is judged only when it was measured (not after an environment
    failure stopped the grading before it). The candidate's checkpoints are read in reader
    processes isolated as the runs were (``isolation``, result.json's; None, a result from before
    it was recorded: wherever the sandbox can run). A run that read nothing through the kit's
    datasets is judged on what its DataLoaders fetched (``RunEvidence.adopt_loader_ledger``)."""
    for ev in runs.values():  # a run that brought its own data: judged on its loaders' fetches
        ev.adopt_for(manifest.workload)
    ctx = Context(manifest, runs, list(protected_changed), dict(measurements))
    first = [s for s in manifest.checks if not REGISTRY[s.name].after_others]
    last = [s for s in manifest.checks if REGISTRY[s.name].after_others]
    with reader.isolated(isolation.sandboxed if isolation is not None else None):  # the checkpoint readers of these runs end with the judging
        for spec in first + last:
            if REGISTRY[spec.name].measure is not None and spec.name not in measurements:
                continue
            ctx.earlier.append(run_check(spec, ctx))
    checks = list(ctx.earlier)
    if environment_failure:
        checks.append(CheckResult("environment", False, environment_failure, environment=True))
    return Verdict(checks, score(checks, issues=manifest.issues))
