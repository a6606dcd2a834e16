"""The cost of `--profile`'s hooks in one process, where a loaded machine blurs it least: a module
call, and one optimizer step (the step-end work: the harness's signed step record, then the
profiler's signed phases record and its torch.profiler step), before and after installing them.

    python benchmarks/profile_hooks.py

Each figure is the best of 7 repeats (microseconds per call). The torch profiler is given a schedule
that never records, so this is its steady state between traces.
"""
import tempfile
import timeit
from pathlib import Path

import torch

from harness import instrument, profiler


def per_call_us(fn, n: int) -> float:
    return min(timeit.repeat(fn, number=n, repeat=7)) / n * 1e6


def main() -> None:
    module, x = torch.nn.Identity(), torch.zeros(1)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    module_plain, step_plain = per_call_us(lambda: module(x), 20000), per_call_us(opt.step, 5000)
    rec = instrument.install(Path(tempfile.mkdtemp()), 0, "k" * 32, 0, 60.0)
    step_harness = per_call_us(opt.step, 5000)
    profiler.install(rec, {"wait": 10**9, "warmup": 1, "active": 1})
    module_prof, step_prof = per_call_us(lambda: module(x), 20000), per_call_us(opt.step, 5000)
    print(f"module call: {module_plain:.2f} us, with --profile hooks {module_prof:.2f} us")
    print(f"optimizer.step (1 parameter): {step_plain:.1f} us, under the harness {step_harness:.1f} us, "
          f"with --profile {step_prof:.1f} us")


if __name__ == "__main__":
    main()
