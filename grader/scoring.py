"""From check verdicts (and throughput) to a pass and a score in [0, 1].

Required checks gate: if any fails, the submission does not pass and scores 0. Past the gate, the
score is the weighted share of all checks passed (required ones included, so a pass is never 0),
with throughput credited by its normalised figure (RE-Bench style: 0 = the broken baseline, 1 = the
reference); weights come from the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Score:
    passed: bool
    score: float
    environment_failure: bool
    gate: list[str]  # required checks that failed


def score(checks, throughput=None, throughput_weight: float = 0.0) -> Score:
    env = any(c.environment for c in checks)
    failed_required = [c.name for c in checks if c.required and not c.passed]
    if failed_required:
        return Score(False, 0.0, env, failed_required)
    parts = [(c.weight, 1.0 if c.passed else 0.0) for c in checks if c.name != "throughput"]
    if throughput is not None and throughput_weight > 0:
        parts.append((throughput_weight, throughput.normalized if throughput.counted else 0.0))
    total = sum(w for w, _ in parts)
    value = sum(w * s for w, s in parts) / total if total else 1.0
    return Score(True, round(min(max(value, 0.0), 1.0), 4), env, [])
