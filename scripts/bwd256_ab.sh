#!/bin/sh
# Same-run A/B of the d = 256 wgmma backward's schedule levers (attention_hopper_bwd256.cu, session d256o in
# docs/notes-attention-bwd.md). Each variant is the whole library built with its -D flags (NVCC_APPEND_FLAGS)
# into its own SYMPATHY_CACHE_DIR (the cache name hashes the sources, not the flags), timed by
# scripts/bwd256_device.py in its own process, the runs interleaved, cuDNN timed in every run (docs/DESIGN.md).
# With CHECK=1 (default) the default build is first checked against float64 and by the d = 256 GPU tests, and
# if that fails nothing is timed. From the project root on the GPU machine, after `. .device/bootstrap.sh`:
#
#     [CHECK=0] [ROUNDS=n] scripts/bwd256_ab.sh OUTDIR [SIZES...]    (sizes: 1024 2048 4096 8192; ROUNDS=2)
#
# Builds take ~1 min (all three at once; cached in /tmp/sy_ab_* while the machine stays warm), the check ~3 min,
# a round (three timing runs) ~3-5 min: under a 600 s call, run ROUNDS=1, then CHECK=0 ROUNDS=1 in a second call.
# Variants: prev (-DSY_HOPPER_BWD256_P_AHEAD=0 -DSY_HOPPER_BWD256_LPT=0: the d256w21 kernel), ahead (P^T a
# tile ahead, the grid as before), new (both levers, the default). Prints ours / cuDNN fwd+bwd per run.
set -u
out=$1
shift
sizes=${*:-1024 2048 4096 8192}
rounds=${ROUNDS:-2}
check=${CHECK:-1}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

flags() {
    case $1 in
        prev) echo "-DSY_HOPPER_BWD256_P_AHEAD=0 -DSY_HOPPER_BWD256_LPT=0" ;;
        ahead) echo "-DSY_HOPPER_BWD256_LPT=0" ;;
        new) echo "" ;;
    esac
}
with_variant() {   # VARIANT COMMAND...: the command with that variant's library
    v=$1
    shift
    SYMPATHY_CACHE_DIR=/tmp/sy_ab_$v NVCC_APPEND_FLAGS="$(flags "$v")" "$@"
}

for v in prev ahead new; do
    with_variant $v python3 -c "from sympathy.attention import cuda_build as c; print(c.build(c.device_arch()))" \
        > "$out/build_$v.log" 2>&1 &
done
wait
for v in prev ahead new; do echo "build $v: $(tail -1 "$out/build_$v.log")"; done

skip="flash ours-det ours-mma ours-atomic math"
if [ "$check" = 1 ]; then
    mkdir -p "$out/new_check"
    # shellcheck disable=SC2086  # the sizes and skips are separate words
    with_variant new timeout 420 python3 scripts/bwd256_device.py --skip $skip --tests-timeout 150 --sizes 2048 \
        --out "$out/new_check" > "$out/new_check.txt" 2>&1
    echo "check + tests (new): exit $?"
    grep -E "worst|passed|failed|FAILED|TIMEOUT|tests rc" "$out/new_check.txt"
    if ! grep -q "wgmma worst .* ok" "$out/new_check.txt"; then
        echo "the new build failed its check: nothing timed"
        exit 1
    fi
fi

r=1
while [ "$r" -le "$rounds" ]; do
    for v in prev ahead new; do
        mkdir -p "$out/${v}_$r"
        # shellcheck disable=SC2086
        with_variant $v timeout 280 python3 scripts/bwd256_device.py --skip $skip --skip-tests --skip-check \
            --sizes $sizes --out "$out/${v}_$r" > "$out/${v}_$r.txt" 2>&1
        echo "$v round $r: exit $?"
    done
    r=$((r + 1))
done

python3 - "$out" "$rounds" <<'PY'
import re, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = [f"{v}_{r}" for r in range(1, rounds + 1) for v in ("prev", "ahead", "new")]
cells = {}
for run in runs:
    try:
        text = open(f"{out}/{run}.txt").read()
    except OSError:
        continue
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+(True|False)\s+\|\s+([\d.]+)\s+([\d.]+)\s+\d+\s+\|\s+([\d.]+)\s+([\d.]+)\s+\d+\s+\|", line)
        if m:
            cells.setdefault((int(m.group(1)), m.group(2)), {})[run] = float(m.group(5)) / float(m.group(3))
print("\nours / cuDNN, fwd+bwd (bf16, d = 256, B*N = 16384, H = 8)")
print(f"{'N':>5} {'causal':>6} " + " ".join(f"{r:>8}" for r in runs))
for (n, causal), row in sorted(cells.items()):
    print(f"{n:>5} {causal:>6} " + " ".join(f"{row[r]:8.3f}" if r in row else f"{'-':>8}" for r in runs))
PY
