"""Checks: pure functions from (check config, run evidence) to a verdict with its evidence.

A message names what was observed ("rank 1 consumed indices 0-63 in epoch 0 and again in epoch 1"),
never the fix. A check that cannot judge because a run it needs is missing or broke for reasons
outside the submission returns ``environment=True``.
"""

from __future__ import annotations

from grader.checks.base import CheckResult, Context
from grader.checks.checkpoints import checkpoints_sound
from grader.checks.collectives import collectives_per_step
from grader.checks.completes import completes
from grader.checks.memory import memory_flat
from grader.checks.params import checkpoint_valid, matches_reference, world_size_equivalence
from grader.checks.samples import sample_partition
from grader.checks.stalls import checkpoint_fresh, step_time_tail
from grader.checks.workload import workload_intact

CHECKS = {
    "completes": completes,
    "sample_partition": sample_partition,
    "memory_flat": memory_flat,
    "matches_reference": matches_reference,
    "world_size_equivalence": world_size_equivalence,
    "workload_intact": workload_intact,
    "checkpoint_valid": checkpoint_valid,
    "collectives_per_step": collectives_per_step,
    "step_time_tail": step_time_tail,
    "checkpoint_fresh": checkpoint_fresh,
    "checkpoints_sound": checkpoints_sound,
}


def run_check(spec, ctx: Context) -> CheckResult:
    result = CHECKS[spec.name](spec, ctx)
    result.required, result.weight = spec.required, spec.weight
    return result


__all__ = ["CHECKS", "CheckResult", "Context", "run_check"]
