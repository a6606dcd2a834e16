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

from pydantic import BaseModel, ConfigDict, Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, need_trained
from grader.files import why_not_readable

MAX_BYTES = 8 * 2**20  # a metrics log of this exercise is kilobytes; a larger file is not read


class OutputFile(BaseModel):
    """A further file the job writes (a final report), judged as ``path`` is."""

    model_config = ConfigDict(extra="forbid")
    path: str
    key: str = "step"
    fields: list[str] = Field(min_length=1)


class Spec(CheckSpec):
    name: Literal["outputs_match"]
    path: str = Field(description="the JSON-lines file the script writes, relative to its working dir")
    key: str = "step"  # the field that pairs a row with the reference's row
    fields: list[str] = Field(min_length=1, description="the values compared with the reference's")
    rtol: float = Field(1e-4, ge=0)
    atol: float = Field(1e-6, ge=0)
    # further files, each a JSON document (one object: one row) or JSON lines, with the same tolerance
    # (judged when the run ended normally: a final report is written at the end)
    also: list[OutputFile] = []


def read_rows(path: Path, within: Path) -> tuple[list[dict[str, Any]] | None, str]:
    """The rows of a JSON-lines file, or of a JSON document holding one object (one row); None and
    why not otherwise (read carefully: the file is untrusted)."""
    why = why_not_readable(path, within=within, cap=MAX_BYTES)
    if why:
        return None, why
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        whole = json.loads(text)
    except ValueError:
        whole = None
    if isinstance(whole, dict):
        return [whole], ""
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
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
    # The further files are written when the job ends: a run that failed after its training (judged
    # here for what its training produced, need_trained) never got there, which is completes' to say.
    ended = ev.status == "ok"
    files = [OutputFile(path=spec.path, key=spec.key, fields=spec.fields), *(spec.also if ended else [])]
    evidence: dict[str, Any] = {"rtol": spec.rtol, "atol": spec.atol, "files": []}
    said = []
    for out in files:
        e: dict[str, Any] = {"path": out.path, "fields": out.fields}
        evidence["files"].append(e)
        failed = _judge_file(out, spec, Path(ev.run_dir) / "work", Path(ref.run_dir) / "work", e)
        if failed is not None:
            failed.evidence = evidence
            return failed
        said.append(e["said"])
    if spec.also and not ended:
        said.append(f"{', '.join(o.path for o in spec.also)} not judged: the run did not reach its end")
    return CheckResult(name, True, "; ".join(said), evidence)


def _judge_file(out: OutputFile, spec: Spec, work: Path, ref_work: Path, e: dict[str, Any]) -> CheckResult | None:
    name = "outputs_match"
    mine, why = read_rows(work / out.path, work)
    if mine is None:
        return CheckResult(name, False, f"the job's output {out.path} {why}")
    theirs, why = read_rows(ref_work / out.path, ref_work)
    if theirs is None:
        return CheckResult(name, False, f"the reference run's {out.path} {why}", environment=True)
    e.update(rows=len(mine), reference_rows=len(theirs))
    by_key = {r.get(out.key): r for r in mine}
    missing = [r.get(out.key) for r in theirs if r.get(out.key) not in by_key]
    if missing:
        e["missing"] = missing[:20]
        return CheckResult(name, False, f"{out.path} has {len(mine)} rows where the job writes {len(theirs)}: no row "
                           f"for {out.key} {', '.join(map(str, missing[:5]))}{' ...' if len(missing) > 5 else ''}")
    worst = 0.0
    for want in theirs:
        row = by_key[want.get(out.key)]
        at = f" at {out.key} {want.get(out.key)}" if len(theirs) > 1 else ""
        for f in out.fields:
            a, b = _number(row.get(f)), _number(want.get(f))
            if b is None:
                continue
            if a is None or not math.isfinite(a):
                return CheckResult(name, False, f"{out.path}: the row{at} has no number in {f!r}" if at else
                                   f"{out.path} has no number in {f!r}")
            rel = abs(a - b) / max(abs(b), 1e-12)
            worst = max(worst, rel)
            if abs(a - b) > spec.atol + spec.rtol * abs(b):
                e.update(first_mismatch={out.key: want.get(out.key), "field": f, "relative_difference": rel})
                return CheckResult(name, False, f"{out.path}: {f}{at} differs from the reference run's by {rel:.2%}")
    e["largest_relative_difference"] = worst
    extra = len(mine) - len(theirs)
    more = f" (and {extra} rows the reference does not write)" if extra > 0 else ""
    rows = f"all {len(theirs)} rows' " if len(theirs) > 1 else ""
    e["said"] = (f"{out.path}: {rows}{', '.join(out.fields)} match the reference run's (largest relative "
                 f"difference {worst:.1e}){more}")
    return None


CHECK = Check("outputs_match", Spec, judge, needs_reference=lambda spec: True,
              property='the metrics the script writes are the values a correct run computes')
