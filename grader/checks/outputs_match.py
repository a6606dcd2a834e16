"""outputs_match: what the job exists to produce besides its weights (a metrics log: held-out losses
per evaluation, a report) matches what the reference run produced, row by row, from the file the
script must write. Every evaluation is compared, not only the last, so deleting an evaluation,
evaluating less often, or writing a constant where a measurement belongs fails. The evidence says
how far a row is from the reference's, never the reference's figure (it could be copied)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, need_trained
from grader.files import why_not_readable

MAX_BYTES = 8 * 2**20  # a metrics log of this exercise is kilobytes; a larger file is not read


class Spec(CheckSpec):
    name: Literal["outputs_match"]
    path: str = Field(description="the JSON-lines file the script writes, relative to its working dir")
    key: str = "step"  # the field that pairs a row with the reference's row
    fields: list[str] = Field(min_length=1, description="the values compared with the reference's")
    rtol: float = Field(1e-4, ge=0)
    atol: float = Field(1e-6, ge=0)


def read_rows(path: Path, within: Path) -> tuple[list[dict[str, Any]] | None, str]:
    """The rows of a JSON-lines file, or None and why not (read carefully: the file is untrusted)."""
    why = why_not_readable(path, within=within, cap=MAX_BYTES)
    if why:
        return None, why
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                return None, f"line {n} is not JSON"
            if not isinstance(row, dict):
                return None, f"line {n} is not a JSON object"
            rows.append(row)
    return rows, ""


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "outputs_match"
    ev = need_trained(ctx, name)
    if isinstance(ev, CheckResult):
        return ev
    ref = need(ctx, name, "reference")
    if isinstance(ref, CheckResult):
        return ref
    mine, why = read_rows(Path(ev.run_dir) / "work" / spec.path, Path(ev.run_dir) / "work")
    if mine is None:
        return CheckResult(name, False, f"the job's output {spec.path} {why}", {"path": spec.path})
    theirs, why = read_rows(Path(ref.run_dir) / "work" / spec.path, Path(ref.run_dir) / "work")
    if theirs is None:
        return CheckResult(name, False, f"the reference run's {spec.path} {why}", environment=True)
    evidence: dict[str, Any] = {"path": spec.path, "rows": len(mine), "reference_rows": len(theirs),
                                "fields": spec.fields, "rtol": spec.rtol, "atol": spec.atol}
    by_key = {r.get(spec.key): r for r in mine}
    missing = [r.get(spec.key) for r in theirs if r.get(spec.key) not in by_key]
    if missing:
        evidence["missing"] = missing[:20]
        return CheckResult(name, False, f"{spec.path} has {len(mine)} rows where the job writes {len(theirs)}: no row "
                           f"for {spec.key} {', '.join(map(str, missing[:5]))}{' ...' if len(missing) > 5 else ''}",
                           evidence)
    worst = 0.0
    for want in theirs:
        row = by_key[want.get(spec.key)]
        for f in spec.fields:
            a, b = _number(row.get(f)), _number(want.get(f))
            if b is None:
                continue
            if a is None or not math.isfinite(a):
                return CheckResult(name, False, f"{spec.path}: the row for {spec.key} {want.get(spec.key)} has no "
                                   f"number in {f!r}", evidence)
            rel = abs(a - b) / max(abs(b), 1e-12)
            worst = max(worst, rel)
            if abs(a - b) > spec.atol + spec.rtol * abs(b):
                evidence.update(first_mismatch={spec.key: want.get(spec.key), "field": f, "relative_difference": rel})
                return CheckResult(name, False, f"{spec.path}: {f} at {spec.key} {want.get(spec.key)} differs from the "
                                   f"reference run's by {rel:.2%}", evidence)
    evidence["largest_relative_difference"] = worst
    extra = len(mine) - len(theirs)
    more = f" (and {extra} rows the reference does not write)" if extra > 0 else ""
    return CheckResult(name, True, f"{spec.path}: all {len(theirs)} rows' {', '.join(spec.fields)} match the "
                       f"reference run's (largest relative difference {worst:.1e}){more}", evidence)


CHECK = Check("outputs_match", Spec, judge, needs_reference=lambda spec: True,
              property='the metrics the script writes are the values a correct run computes')
