"""completes: every rank exits 0 within the time limit, none hung."""

from __future__ import annotations

from typing import Literal

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.text import printable
from harness.paths import display_path


class Spec(CheckSpec):
    name: Literal["completes"]


def judge(spec: Spec, ctx: Context) -> CheckResult:
    ev = need(ctx, "completes", "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    codes = {r: o.exit_code for r, o in ev.ranks.items()}
    evidence = {"status": ev.status, "exit_codes": codes, "wall_s": ev.run.get("wall_s")}
    if ev.status == "ok" and all(c == 0 for c in codes.values()) and len(codes) == ev.world_size:
        return CheckResult("completes", True, f"all {len(codes)} ranks exited 0", evidence)
    if ev.status == "hung":
        hang = ev.run.get("hang") or {}
        where = "; ".join(f"rank {r['rank']} blocked at {r.get('blocked_at') or 'unknown'} after step {r['last_step']}"
                          for r in hang.get("ranks", []) if not r.get("exited"))
        evidence["hang"] = hang
        return CheckResult("completes", False, f"no rank made progress for "
                           f"{hang.get('since_progress_s', '?')} s: {where}", evidence)
    if ev.status == "limit":  # sandboxed: the parent ended the run at a cap (memory, processes, disk, files)
        limit = ev.run.get("limit") or {}
        evidence["limit"] = limit
        return CheckResult("completes", False, f"the run was ended at a limit: {limit.get('message', 'unknown')}",
                           evidence)
    if ev.status == "timeout":
        return CheckResult("completes", False, f"the job ran past its {ctx.manifest.run.timeout:.0f} s limit", evidence)
    failure = ev.run.get("failure") or {}
    # lines end at "\n" only: str.splitlines() also breaks at "\r", and a carriage return in the
    # exception's own text would make its tail (not "RuntimeError: ...") the line shown
    lines = [ln for ln in printable(failure.get("error") or "").split("\n") if ln.strip()]
    # the exception's own line: the last one not indented (frames and code are; the text of an
    # exception that moved the cursor with escapes and carriage returns may be split below it)
    last = [ln for ln in lines if not ln[:1].isspace()][-1:] or lines[-1:] or ["no error output"]
    who = f"rank {failure.get('rank')}" if failure.get("rank") is not None else "the job"
    inside = [f"rank {r} was inside {o.pending_collective['op']} called at "
              f"{display_path(o.pending_collective['site'], keep=1, relative=False) or 'an unknown site'}"
              for r, o in sorted(ev.ranks.items()) if o.pending_collective]
    where = f" ({'; '.join(inside)})" if inside else ""
    evidence["pending_collectives"] = {r: o.pending_collective for r, o in ev.ranks.items() if o.pending_collective}
    return CheckResult("completes", False, f"{who} failed: {last[0]}{where}", evidence)


CHECK = Check("completes", Spec, judge,
              property='every rank of the job exits cleanly')
