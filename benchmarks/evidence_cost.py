"""What issue 12's evidence costs a rank per optimizer step, measured on the kit's own models:

- the work counters (``harness/work.py``: ``nn.Module.__call__`` and the backward functions
  wrapped): the same training loop with and without them, in fresh interpreters, interleaved
  (A B B A ...), median step time of each;
- one parameter fingerprint (``fp_pre`` adds one per step to the one ``fp`` already took);
- one memory count (``harness/memstats.py``) after the freeze, on a loop that keeps nothing and on
  one that keeps a graph per step (the memory-leak exercise's fault);
- and, given run dirs (``--runs DIR ...``), what the counts cost there: the sum of their
  ``mem_ms`` over the steps' wall time, and how far apart they were.

    python benchmarks/evidence_cost.py [--rounds 4] [--steps 300] [--runs RUN_DIR ...]

Single process, no process group: the per-step overhead against the model's compute alone is the
largest share it can be (a DDP step adds communication on top).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
KIT = HERE.parent

MODELS = {  # the exercises' models and per-rank batches
    "memory-leak MLP 32-256x3, batch 32": "MLP(32, 256, 1, 3)|32|32",
    "amp-no-scaler MLP 32-128x3, batch 32": "MLP(32, 128, 1, 3)|32|32",
    "comm-bound ResidualMLP 128x24, 4 micro-batches of 32": "ResidualMLP(128, 128, 24)|128|32|4",
}

LOOP = r'''
import sys, time, torch, torch.nn.functional as F
sys.path.insert(0, {kit!r})
torch.set_num_threads(1)
from harness.workloads import MLP, ResidualMLP
spec = {spec!r}.split("|")
model = eval(spec[0]); feats, batch = int(spec[1]), int(spec[2]); micro = int(spec[3]) if len(spec) > 3 else 1
if {work}:
    from harness import work
    class Rec: step_fields, exit_fields = [], []
    w = work.install(Rec())
opt = torch.optim.AdamW(model.parameters())
x, y = torch.randn(batch, feats), torch.randn(batch, 1)
times = []
for s in range({steps}):
    t = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    for _ in range(micro):
        F.mse_loss(model(x), y).backward()
    opt.step()
    if {work}:
        w.take()
    times.append(time.perf_counter() - t)
print(sorted(times[20:])[len(times[20:]) // 2])
'''

MICRO = r'''
import sys, time, gc, json, torch, torch.nn.functional as F
sys.path.insert(0, {kit!r})
from harness.workloads import MLP, ResidualMLP
from harness import instrument, memstats
out = {{}}
for label, spec in {models!r}.items():
    model = eval(spec.split("|")[0])
    opt = torch.optim.AdamW(model.parameters())
    ts = []
    for _ in range(200):
        t = time.perf_counter(); instrument.fingerprint(opt); ts.append(time.perf_counter() - t)
    out["fingerprint_ms " + label] = sorted(ts)[100] * 1e3
model = MLP(32, 256, 1, 3)
opt = torch.optim.AdamW(model.parameters())
x, y = torch.randn(32, 32), torch.randn(32, 1)
kept = []
for keep in (False, True):
    ms = memstats.MemStats()
    ms.freeze()
    ts = []
    for s in range(200):
        loss = F.mse_loss(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
        if keep and s % 2 == 0:
            kept.append(F.mse_loss(model(torch.randn(1024, 32)), torch.randn(1024, 1)))
        t = time.perf_counter(); n = memstats.count(); ts.append(time.perf_counter() - t)
    out[f"count_ms {{'keeping a graph every 2nd step' if keep else 'keeping nothing'}} (at the end: {{n}})"] = \
        sorted(ts)[100] * 1e3
    gc.unfreeze()
print(json.dumps(out))
'''


def run(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return p.stdout.strip().splitlines()[-1]


def loops(rounds: int, steps: int) -> dict[str, dict[str, float]]:
    out = {}
    for label, spec in MODELS.items():
        got: dict[bool, list[float]] = {False: [], True: []}
        for i in range(rounds):
            for w in ((False, True) if i % 2 == 0 else (True, False)):
                got[w].append(float(run(LOOP.format(kit=str(KIT), spec=spec, work=w, steps=steps))))
        base, with_work = statistics.median(got[False]), statistics.median(got[True])
        out[label] = {"step_ms": round(base * 1e3, 3), "step_ms_with_counters": round(with_work * 1e3, 3),
                      "overhead_us": round((with_work - base) * 1e6, 1),
                      "overhead_share": round((with_work - base) / base, 4),
                      "rounds": {k: [round(v * 1e3, 3) for v in vs] for k, vs in
                                 (("without", got[False]), ("with", got[True]))}}
    return out


def in_runs(dirs: list[str]) -> dict[str, dict]:
    out = {}
    for d in dirs:
        for ev in sorted(Path(d).glob("ranks/*/events.jsonl")):
            recs = [json.loads(line) for line in ev.read_text().splitlines() if line.strip()]
            steps = [r for r in recs if r.get("kind") == "step"]
            counted = [r for r in steps if "mem_ms" in r]
            if len(steps) < 2:
                continue
            span = steps[-1]["t"] - steps[0]["t"]
            gaps = [b["step"] - a["step"] for a, b in zip(counted, counted[1:])]
            out[f"{d} rank {ev.parent.name}"] = {
                "steps": len(steps), "counted": len(counted),
                "count_share_of_wall": round(sum(r["mem_ms"] for r in counted) / 1e3 / span, 5) if span else None,
                "count_ms_median": round(statistics.median(r["mem_ms"] for r in counted), 3) if counted else None,
                "steps_between_counts": {"median": statistics.median(gaps), "max": max(gaps)} if gaps else None,
                "step_s_median": round(statistics.median(r["dt"] for r in steps), 4)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--runs", nargs="*", default=[])
    a = ap.parse_args()
    import os
    report = {"load_before": os.getloadavg(),
              "micro": json.loads(run(MICRO.format(kit=str(KIT), models={k: v for k, v in MODELS.items()}))),
              "work_counters": loops(a.rounds, a.steps), "runs": in_runs(a.runs), "load_after": os.getloadavg()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
