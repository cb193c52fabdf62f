#!/bin/bash
# call 1 (2026-11-29k): review (main's library, c1d6d0f's CUDA) against short (docs/runs/h200-2026-11-29j/next/
# short-causal.patch: on d = 64's 128 x 128 causal kernel only, the wait after 8 of the first row's 16 n8 tiles and
# the same split at a tile's first block): float64 checks on short, then alternating rounds at d = 64 N = 1024 (the
# causal row is the only one whose SASS differs; the not-causal row is the control), then the GPU suite on short.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx1
mkdir -p /tmp/abkeep && cp -r .xfer/abx1/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
SYMPATHY_CACHE_DIR=/tmp/abkeep/short timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
  > $OUT/check_short.txt 2>&1; echo "check short rc=$? ok $(grep -c "^ok" $OUT/check_short.txt) FAIL $(grep -c "^FAIL" $OUT/check_short.txt)"
for round in 1 2 3 4 5 6 7 8; do for lib in review short; do
  [ $(( $(date +%s) - t0 )) -lt 420 ] || break 2
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s $(grep -A4 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -2 | tr '\n' ' ')"
done; done
for lib in review short; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
export SYMPATHY_CACHE_DIR=/tmp/abkeep/short PYTHONUNBUFFERED=1
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
echo "done $(( $(date +%s) - t0 )) s"
