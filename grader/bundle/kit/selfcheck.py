"""Self-check: run an exercise's script as the grader would and tell pass or fail on the checks
that need no reference solution (completes, sample_partition, memory_flat, workload_intact), with
the grader's own check functions. Checks that compare against the reference (final parameters,
throughput, checkpoints) are not here: the interviewer's grading runs them.

    python selfcheck.py SLUG [--json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grader.checks import completes, memory_flat, sample_partition, workload_intact  # noqa: E402
from grader.checks.base import CheckResult, Context  # noqa: E402
from grader.evidence import load_run  # noqa: E402
from grader.roles import Role, RunRequest, grading_env  # noqa: E402
from harness.launch import LaunchConfig, launch  # noqa: E402
from harness.store_service import StoreConfig  # noqa: E402

CHECKS = {m.CHECK.name: m.CHECK for m in (completes, sample_partition, memory_flat, workload_intact)}


@dataclass
class Spec:
    """The part of an exercise's manifest these checks read (the checks take it as the manifest)."""

    slug: str
    entry: str
    world_size: int
    run: SimpleNamespace
    workload: SimpleNamespace
    checks: list = field(default_factory=list)

    def check(self, name: str):
        return next((c for c in self.checks if c.name == name), None)


def load_spec(slug: str) -> tuple[Spec, dict]:
    specs = json.loads((HERE / "selfcheck.json").read_text())["exercises"]
    if slug not in specs:
        sys.exit(f"error: no exercise {slug!r} in this bundle (it has: {', '.join(specs) or 'none'})")
    s = specs[slug]
    checks = [CHECKS[c["name"]].spec.model_validate(c) for c in s["checks"]]
    workload = dict(s["workload"])
    workload["evaluations"] = {k: SimpleNamespace(**v) for k, v in workload.get("evaluations", {}).items()}
    return Spec(slug, s["entry"], s["world_size"], SimpleNamespace(**s["run"]), SimpleNamespace(**workload),
                checks), s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("slug")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    spec, raw = load_spec(a.slug)
    folder = HERE / "exercises" / spec.slug
    changed = [rel for rel, sha in raw["protected"].items()
               if not (folder / rel).is_file() or hashlib.sha256((folder / rel).read_bytes()).hexdigest() != sha]
    out = HERE / "runs" / f"selfcheck-{spec.slug}-{time.strftime('%Y%m%d-%H%M%S')}"
    plan = {"main": RunRequest(Role.MAIN, spec.world_size)}  # the runs these checks declare, as the grader plans them
    for c in spec.checks:
        for req in CHECKS[c.name].runs(c, spec):
            plan.setdefault(req.name, req)
    runs = {}
    for name, req in plan.items():
        print(f"running {name} (world size {req.nproc}{', killed and restarted' if req.faults else ''})",
              file=sys.stderr)
        run_dir = out / name
        (run_dir / "work").mkdir(parents=True, exist_ok=True)
        settings = req.launch_settings()
        settings["env"] = grading_env(settings["env"])  # the evidence its checks read, as in a grading
        launch(LaunchConfig(script=folder / spec.entry, script_args=list(spec.run.args),
                            hang_timeout=spec.run.hang_timeout, startup_timeout=spec.run.startup_timeout,
                            timeout=spec.run.timeout, pg_timeout=spec.run.pg_timeout, run_dir=run_dir,
                            store=StoreConfig(**spec.run.store) if getattr(spec.run, "store", None) else None,
                            cwd=run_dir / "work", **settings))
        runs[name] = load_run(name, run_dir)
    ctx = Context(spec, runs, changed)  # type: ignore[arg-type]  (the checks read only what Spec holds)
    results: list[CheckResult] = []
    for c in spec.checks:
        r = CHECKS[c.name].judge(c, ctx)
        results.append(r)
        ctx.earlier.append(r)
    ok = all(r.passed for r in results)
    if a.json:
        print(json.dumps({"exercise": spec.slug, "passed": ok, "run_dir": str(out),
                          "checks": [{"name": r.name, "passed": r.passed, "message": r.message} for r in results]},
                         indent=2))
    else:
        for r in results:
            print(f"{'pass' if r.passed else 'FAIL':4}  {r.name}: {r.message}")
        print(f"self-check {'PASSED' if ok else 'FAILED'} ({len(results)} checks that need no reference; the "
              f"interviewer's grading also compares with the reference). Runs: {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
