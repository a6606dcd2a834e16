#!/usr/bin/env bash
# The kit on a CUDA machine, in one pass: every exercise at world size 1 on NCCL, `trainwreck verify`
# at the exercises' world size 2 with both ranks on one GPU over gloo, and scripts nobody here wrote
# (karpathy/nanoGPT's train.py, pytorch/examples' DDP tutorial), unmodified, under bare torchrun and
# under `trainwreck run`, at world size 1 (NCCL) and 2 (gloo, one GPU).
#
#   OUT=/tmp/gpu EXT=.ext benchmarks/gpu_check.sh [part...]     parts: exercises external overhead parts (default all)
#
# exercises: `trainwreck verify` of every exercise, with the world-size-1 runs alongside;
# external: the outside scripts, bare torchrun and `trainwreck run` one after the other, nothing else running;
# overhead: benchmarks/harness_overhead.py on the machine's CPUs (ranks on CPU, gloo; OVERHEAD_RUNS rounds) and
# at world size 1 on the GPU (NCCL; OVERHEAD_WS1=0 leaves it out), with and without the grading evidence,
# nothing else running;
# parts: benchmarks/harness_parts.py (each part of the harness switched off in turn, inside one job), 2 ranks on
# the CPUs and 1 on the GPU, with and without the grading evidence.
#
# EXT holds the outside scripts, each as its upstream repository has it (not part of the kit):
#   $EXT/nanoGPT: train.py model.py configurator.py config/ data/shakespeare_char/{train,val}.bin,meta.pkl
#                 from github.com/karpathy/nanoGPT 3adf61e, the data made by its own prepare.py
#   $EXT/ddp:     multigpu_torchrun.py datautils.py from github.com/pytorch/examples 77f55b9,
#                 distributed/ddp-tutorial-series
# Optional .whl/*.whl (Python packages the machine lacks) and .whl/*.deb (bubblewrap) are installed
# first. In $OUT: log.txt (all output), summary.md (a table per part), results.tgz (the JSON of every
# run and verification, the grading results and the ranks' logs).
set -u
OUT=${OUT:-/tmp/gpu_check}
EXT=$(realpath "${EXT:-.ext}")
ROOT=$(pwd)
PARTS=${*:-exercises external overhead parts}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of this script on a machine without a GPU
mkdir -p "$OUT"
WORK=$(mktemp -d)
RES=$WORK/res
mkdir -p "$RES"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
py=${PY:-python3}
stamp() { echo "== $(date +%T) $*"; }

stamp setup
if [ "${SETUP:-1}" = 1 ]; then  # SETUP=0: the kit is installed already (a dry run: PY=.venv/bin/python)
    if compgen -G ".whl/*.whl" >/dev/null; then $py -m pip install -q --no-index --no-deps .whl/*.whl; fi
    for f in .whl/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
    $py -m pip install -q --no-deps --no-build-isolation -e . || exit 2
    $py -m harness.native_build || echo "the collective trace's C++ kernel was not built: runs trace in Python"
fi
PATH="$($py -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"  # its console scripts
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'gpus', torch.cuda.device_count(), 'nccl', torch.cuda.nccl.version())"
SANDBOX=""
$py -c "from harness.sandbox import probe; p = probe(); print('sandbox:', 'ok' if p.ok else p.reason); raise SystemExit(0 if p.ok else 1)" \
    || SANDBOX="--no-sandbox"
nproc

SLUGS=$(for d in exercises/*/; do [ -f "$d/train.py" ] && basename "$d"; done)  # not the design scenarios
WS1_SLUGS=${WS1_SLUGS:-$SLUGS}
VERIFY_SLUGS=${VERIFY_SLUGS:-$SLUGS}
ITEM_TIMEOUT=${ITEM_TIMEOUT:-300}      # seconds for one run or one pair's launch
VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-900}  # seconds for one exercise's verification
DEADLINE=${DEADLINE:-100000}           # seconds after start past which no new item starts
due() { [ "$SECONDS" -lt "$DEADLINE" ] || { echo "$(date +%T) skipped (past DEADLINE): $*"; false; }; }

ws1() {  # every exercise's broken script, one rank, NCCL
    for s in $WS1_SLUGS; do
        due "ws1 $s" || continue
        mkdir -p "$WORK/ws1-$s"
        (cd "$WORK/ws1-$s" && timeout "$ITEM_TIMEOUT" trainwreck run "$s" --nproc 1 --device "$DEVICE" --json --run-dir "$WORK/ws1-$s/run" \
            > "$RES/ws1-$s.json" 2> "$WORK/ws1-$s.err"; rc=$?; echo "$(date +%T) ws1 $s rc=$rc")
    done
}

verify_some() {  # verify at the exercises' world size (2), both ranks on the one GPU
    for s in "$@"; do
        due "verify $s" || continue
        timeout "$VERIFY_TIMEOUT" trainwreck verify "$s" --device "$DEVICE" $SANDBOX --json --out "$WORK/verify" > "$RES/verify-$s.json" \
            2> "$WORK/verify-$s.err"
        local rc=$?; echo "$(date +%T) verify $s rc=$rc"; tail -3 "$WORK/verify-$s.err"
    done
}

pair() {  # NAME DIR NPROC ARGS...: bare torchrun, then trainwreck run, in DIR (the script's own folder)
    local name=$1 dir=$2 n=$3; shift 3
    due "$name" || return
    local t0 t1
    t0=$(date +%s.%N)
    (cd "$dir" && timeout "$ITEM_TIMEOUT" $py -m torch.distributed.run --standalone --nproc-per-node="$n" "$@" \
        > "$WORK/$name-bare.log" 2>&1); local rc_bare=$?
    t1=$(date +%s.%N)
    echo "$name bare torchrun: rc=$rc_bare wall=$(awk "BEGIN{print $t1 - $t0}") s; last lines:"; tail -4 "$WORK/$name-bare.log"
    t0=$(date +%s.%N)
    (cd "$dir" && timeout "$ITEM_TIMEOUT" trainwreck run "$1" --nproc "$n" --device "$DEVICE" --json --run-dir "$WORK/$name-run" \
        -- "${@:2}" > "$RES/$name-trainwreck.json" 2> "$WORK/$name-trainwreck.err"); local rc_tw=$?
    t1=$(date +%s.%N)
    echo "$name trainwreck run: rc=$rc_tw wall=$(awk "BEGIN{print $t1 - $t0}") s; rank 0's last lines:"
    tail -4 "$WORK/$name-run/ranks/0/stdout.log" 2>/dev/null
    $py - "$RES/$name-trainwreck.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("  status", r["status"], "device", r["device"], "gpus", r.get("gpus"), "wall", r["wall_s"], "cwd", r["cwd"])
for k in r["ranks"]:
    print(f"  rank {k['rank']}: exit {k['exit_code']} steps {k['steps']} steps/s {k['steps_per_s']} "
          f"at {k['last_location']} ({k['location_kind']})")
if r.get("failure"):
    print("  failure:", {k: r["failure"].get(k) for k in ("rank", "reason")}, (r["failure"].get("error") or "")[-300:])
EOF
}

external() {
    local nano="$EXT/nanoGPT" ddp="$EXT/ddp" args
    args=(config/train_shakespeare_char.py --max_iters=300 --lr_decay_iters=300 --eval_interval=100 --eval_iters=20
          --log_interval=50 --compile=False)
    pair nanogpt-ws1 "$nano" 1 train.py "${args[@]}"
    pair nanogpt-ws2-gloo "$nano" 2 train.py "${args[@]}" --backend=gloo --gradient_accumulation_steps=2
    rm -f "$ddp/snapshot.pt"
    pair ddp-ws1 "$ddp" 1 multigpu_torchrun.py 20 10
    echo "snapshot left by the run above: $(ls -la "$ddp/snapshot.pt" 2>&1)"
    pair ddp-ws1-resumed "$ddp" 1 multigpu_torchrun.py 40 10   # finds the snapshot in its launch folder
    grep -h "Resuming" "$WORK/ddp-ws1-resumed-bare.log" "$WORK/ddp-ws1-resumed-run/ranks/0/stdout.log"
    rm -f "$ddp/snapshot.pt"
    pair ddp-ws2-one-gpu "$ddp" 2 multigpu_torchrun.py 20 10
}

run_part() {
    stamp "$1"
    case $1 in
        exercises)  # verifications four at a time, the world-size-1 runs beside them; the two throughput
                    # exercises last, by themselves
            local quick slow streams=("" "" "" "") i=0
            quick=$(echo "$VERIFY_SLUGS" | tr ' ' '\n' | grep -v -e comm-bound -e slow-input-pipeline)
            slow=$(echo "$VERIFY_SLUGS" | tr ' ' '\n' | grep -e comm-bound -e slow-input-pipeline)
            for s in $quick; do streams[i % 4]+=" $s"; i=$((i + 1)); done
            ws1 > "$OUT/ws1.log" 2>&1 & local pids=($!)
            for st in "${streams[@]}"; do [ -n "$st" ] && { verify_some $st & pids+=($!); }; done
            wait "${pids[@]}"  # by pid: a bare wait would also wait for the log's tee
            cat "$OUT/ws1.log"
            stamp "throughput exercises"
            pids=()
            for s in $slow; do verify_some "$s" & pids+=($!); done
            [ ${#pids[@]} -eq 0 ] || wait "${pids[@]}" ;;
        external) external ;;
        parts)  # what each part of the harness costs per step (benchmarks/harness_parts.py), CPU ranks then the GPU
            local dev n devs=cpu
            [ "$DEVICE" = cuda ] && devs="cpu cuda"
            for dev in $devs; do
                n=2; [ "$dev" = cuda ] && n=1
                for graded in 0 1; do
                    due "parts $dev $graded" || continue
                    echo "harness_parts: --device $dev --nproc $n, grading evidence $graded"
                    TRAINWRECK_GRADING_EVIDENCE=$graded timeout "$ITEM_TIMEOUT" trainwreck run benchmarks/harness_parts.py \
                        --nproc "$n" --device "$dev" --run-dir "$WORK/parts-$dev-$graded" -- --rounds "${PARTS_ROUNDS:-20}" \
                        --configs "$([ "$graded" = 1 ] && echo "off;on;work;mem" || echo "off;on;trace;tracenull;step;bwd")" \
                        > /dev/null 2>&1
                    grep -h harness_parts "$WORK/parts-$dev-$graded/ranks/0/stdout.log" || tail -5 "$WORK/parts-$dev-$graded/ranks/0/stderr.log"
                done
            done ;;
        overhead)
            CUDA_VISIBLE_DEVICES="" $py benchmarks/harness_overhead.py --runs "${OVERHEAD_RUNS:-5}" --nproc 2 --grading-evidence
            [ "${OVERHEAD_WS1:-1}" = 1 ] && $py benchmarks/harness_overhead.py --runs 3 --nproc 1 --grading-evidence ;;
    esac
}

if [ "${PARALLEL:-0}" = 1 ]; then  # the parts side by side: shorter, but their timings disturb each other
    pids=()
    for part in $PARTS; do run_part "$part" > "$OUT/part-$part.log" 2>&1 & pids+=($!); done
    wait "${pids[@]}"
    for part in $PARTS; do cat "$OUT/part-$part.log"; done
else
    for part in $PARTS; do run_part "$part"; done
fi
stamp summary
$py - "$RES" <<'EOF' | tee "$OUT/summary.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("ws1-*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        rows.append(f"| {f.stem[4:]} | no result | | |"); continue
    k = r["ranks"][0] if r["ranks"] else {}
    rows.append(f"| {f.stem[4:]} | {r['status']} | {k.get('steps')} | {k.get('steps_per_s')} |")
if rows:
    print("world size 1, NCCL (`trainwreck run SLUG --nproc 1 --device cuda`)\n\n| exercise | status | steps | steps/s |\n| --- | --- | --- | --- |")
    print("\n".join(rows) + "\n")
rows = []
for f in sorted(out.glob("verify-*.json")):
    try:
        v = json.loads(f.read_text())["exercises"][0]
    except (ValueError, KeyError, IndexError):
        rows.append(f"| {f.stem[7:]} | no result | |"); continue
    rows.append(f"| {f.stem[7:]} | {'ok' if v.get('ok') else 'NOT ok'} | {json.dumps({k: v[k] for k in v if k not in ('slug',)})[:400]} |")
if rows:
    print("verify, world size 2, gloo, one GPU (`trainwreck verify SLUG --device cuda`)\n\n| exercise | verdict | detail |\n| --- | --- | --- |")
    print("\n".join(rows))
EOF
cp "$WORK"/*.err "$WORK"/*.log "$RES/" 2>/dev/null
(cd "$WORK" && find res verify ws1-*/run ./*-run -type f \( -name '*.json' -o -name '*.log' -o -name '*.txt' -o -name '*.md' \) \
    -size -4M 2>/dev/null | tar czf "$OUT/results.tgz" -T -)
ls -la "$OUT"
