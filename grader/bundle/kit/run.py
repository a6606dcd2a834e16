"""Run an exercise (or any script) across ranks the way torchrun does, watched from outside by the
harness: `trainwreck run` without the grader.

    python run.py SLUG [--nproc N] [--max-restarts K] [--profile] [--json] [-- SCRIPT ARGS]
    python run.py path/to/script.py --nproc 2
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from harness.launch import LaunchConfig, LaunchError, default_run_dir, launch  # noqa: E402
from harness.store_service import StoreConfig  # noqa: E402


def spec_for(slug: str) -> dict:
    specs = json.loads((HERE / "selfcheck.json").read_text())["exercises"]
    if slug not in specs:
        sys.exit(f"error: no exercise {slug!r} in this bundle (it has: {', '.join(specs) or 'none'})")
    return specs[slug]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", help="an exercise slug (exercises/<slug>) or a script path")
    ap.add_argument("script_args", nargs="*", help="arguments for the script (after --)")
    ap.add_argument("--nproc", type=int, default=None, help="processes (default: the exercise's world size, or 2)")
    ap.add_argument("--max-restarts", type=int, default=0)
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--hang-timeout", type=float, default=None)
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--run-dir", type=Path, default=None)
    ap.add_argument("--profile", action="store_true", help="per-phase step breakdown and a torch.profiler trace per rank")
    ap.add_argument("--json", action="store_true", help="print the run's summary as JSON")
    a = ap.parse_args(argv)
    settings: dict = {}
    path = Path(a.target)
    if path.suffix == ".py" or path.exists():
        script, args = path, a.script_args
    else:
        s = spec_for(a.target)
        script = HERE / "exercises" / a.target / s["entry"]
        args = a.script_args or s["run"]["args"]
        settings = {"nproc": s["world_size"], "hang_timeout": s["run"]["hang_timeout"],
                    "startup_timeout": s["run"]["startup_timeout"], "timeout": s["run"]["timeout"],
                    "pg_timeout": s["run"]["pg_timeout"],
                    "store": StoreConfig(**s["run"]["store"]) if s["run"].get("store") else None}
    for k in ("nproc", "hang_timeout", "timeout"):
        if getattr(a, k) is not None:
            settings[k] = getattr(a, k)
    settings.setdefault("nproc", 2)
    cfg = LaunchConfig(script=script, script_args=list(args), max_restarts=a.max_restarts, device=a.device,
                       profile=a.profile, run_dir=a.run_dir, **settings)
    cfg.run_dir = Path(cfg.run_dir or default_run_dir(script))
    cfg.cwd = cfg.run_dir / "work"
    cfg.cwd.mkdir(parents=True, exist_ok=True)
    try:
        res = launch(cfg)
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.json:
        print(json.dumps(res.to_json(), indent=2, default=str))
    else:
        print(f"{'rank':>4} {'exit':>5} {'steps':>6} {'steps/s':>8} {'peak RSS MB':>12}  last location")
        for r in res.ranks:
            print(f"{r['rank']:>4} {str(r['exit_code']):>5} {r['steps']:>6} {r['steps_per_s']:>8.1f} "
                  f"{r['peak_rss_mb']:>12.0f}  {r['last_location'] or '-'}")
        print(f"status: {res.status}  world size {res.world_size}  wall {res.wall_s:.1f} s\nrun dir: {res.run_dir}")
        if res.failure:
            print(res.failure.get("error") or "")
        if a.profile:
            from harness.phases import read_run
            print(json.dumps(read_run(res.run_dir), indent=1, default=str))
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
