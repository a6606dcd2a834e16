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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from grader.checks.base import CheckResult, Context  # noqa: E402
from grader.checks.completes import completes  # noqa: E402
from grader.checks.memory import memory_flat  # noqa: E402
from grader.checks.samples import sample_partition  # noqa: E402
from grader.checks.workload import workload_intact  # noqa: E402
from grader.evidence import load_run  # noqa: E402
from grader.manifest import (Completes, MemoryFlat, RunSettings, SamplePartition, Workload,  # noqa: E402
                             WorkloadIntact)
from harness.launch import Fault, LaunchConfig, launch  # noqa: E402

CHECKS = {"completes": (Completes, completes), "sample_partition": (SamplePartition, sample_partition),
          "memory_flat": (MemoryFlat, memory_flat), "workload_intact": (WorkloadIntact, workload_intact)}


@dataclass
class Spec:
    """The part of an exercise's manifest these checks read (the checks take it as the manifest)."""

    slug: str
    entry: str
    world_size: int
    run: RunSettings
    workload: Workload
    checks: list = field(default_factory=list)

    def check(self, name: str):
        return next((c for c in self.checks if c.name == name), None)


def load_spec(slug: str) -> tuple[Spec, dict]:
    specs = json.loads((HERE / "selfcheck.json").read_text())["exercises"]
    if slug not in specs:
        sys.exit(f"error: no exercise {slug!r} in this bundle (it has: {', '.join(specs) or 'none'})")
    s = specs[slug]
    checks = [CHECKS[c["name"]][0].model_validate(c) for c in s["checks"]]
    return Spec(slug, s["entry"], s["world_size"], RunSettings(**s["run"]), Workload(**s["workload"]), checks), s


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
    roles = {"main": {}}
    sp = spec.check("sample_partition")
    if sp and sp.resume:
        roles["resume"] = {"max_restarts": 1, "faults": [Fault(rank=sp.kill_rank, step=sp.kill_step)],
                           "env": {"TRAINWRECK_FINGERPRINT": "1"}}
    runs = {}
    for role, extra in roles.items():
        print(f"running {role} (world size {spec.world_size}"
              f"{', killed and restarted' if extra.get('faults') else ''})", file=sys.stderr)
        run_dir = out / role
        (run_dir / "work").mkdir(parents=True, exist_ok=True)
        launch(LaunchConfig(script=folder / spec.entry, script_args=list(spec.run.args), nproc=spec.world_size,
                            hang_timeout=spec.run.hang_timeout, startup_timeout=spec.run.startup_timeout,
                            timeout=spec.run.timeout, pg_timeout=spec.run.pg_timeout, run_dir=run_dir,
                            cwd=run_dir / "work", **extra))
        runs[role] = load_run(role, run_dir)
    ctx = Context(spec, runs, changed)  # type: ignore[arg-type]  (the checks read only what Spec holds)
    results: list[CheckResult] = [CHECKS[c.name][1](c, ctx) for c in spec.checks]
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
