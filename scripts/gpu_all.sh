#!/bin/sh
# Every GPU claim of docs/attention-gpu.md in one device call: the GPU test suite, the attention-gpu
# bench (forward and forward+backward, ours beside SDPA flash and cudnn) with its plots, and the
# training check with its loss-curve plot. Run from the project root on a CUDA machine:
#
#     scripts/gpu_all.sh OUTDIR [SIZES...]        (default sizes: 1024 2048 4096 8192)
#
# OUTDIR receives gpu_tests.log, bench.log, attention_train.log and bench.tar (JSON + PNGs).
set -u
out=$1
shift
sizes=${*:-1024 2048 4096 8192}
mkdir -p "$out/bench"
export PYTHONUNBUFFERED=1

python3 -m pytest -m gpu -q -p no:cacheprovider tests > "$out/gpu_tests.log" 2>&1
echo "GPU tests: $(tail -1 "$out/gpu_tests.log")"

# shellcheck disable=SC2086  # the sizes are separate words
python3 -m sympathy.cli bench attention-gpu --quiet --plot --out "$out/bench" --sizes $sizes \
    --variants sdpa-flash sdpa-cudnn mma hopper > "$out/bench.log" 2>&1
echo "bench: exit $?"

python3 -m sympathy.cli demo attention_train --out "$out/bench/attention_train.png" > "$out/attention_train.log" 2>&1
echo "training check: exit $?"
tail -14 "$out/attention_train.log"

tar -C "$out" -cf "$out/bench.tar" bench && rm -rf "$out/bench"
