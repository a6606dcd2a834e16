#!/usr/bin/env bash
# Two versions of the harness against bare torchrun on benchmarks/ddp_bench.py, interleaved
# (bare, old, new per round): rank 0's steps/s, one line per launch. Each checkout needs its own
# working .venv (make setup there).
#
#   benchmarks/harness_ab.sh OLD_CHECKOUT NEW_CHECKOUT [ROUNDS] [NPROC] > ab.txt
set -u
OLD=$(realpath "$1"); NEW=$(realpath "$2"); ROUNDS=${3:-9}; NPROC=${4:-2}
BENCH=$NEW/benchmarks/ddp_bench.py
rate() { grep -o "steps_per_s=[0-9.]*" "$@" | head -1 | cut -d= -f2; }
for r in $(seq 1 "$ROUNDS"); do
    v=$(cd "$NEW" && .venv/bin/python -m torch.distributed.run --standalone --nproc-per-node="$NPROC" "$BENCH" 2>/dev/null | rate)
    echo "$r bare $v"
    for side in old new; do
        dir=$OLD; [ $side = new ] && dir=$NEW
        run=$(mktemp -d)/run
        (cd "$dir" && .venv/bin/python -m grader.cli run "$BENCH" --nproc "$NPROC" --json --run-dir "$run" >/dev/null 2>&1)
        echo "$r $side $(rate "$run/ranks/0/stdout.log")"
        rm -rf "$(dirname "$run")"
    done
done
