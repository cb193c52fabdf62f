#!/bin/bash
# call 3 (2026-11-29k): where the wait falls on d = 64's short causal kernel: final (the wait after 8 of the first
# row's 16 n8 tiles) against w4 and w6 (-DSY_HOPPER_FWD_SHORT_WAIT_AFTER_TILES=4 / 6; FlashAttention-4's d = 64
# loop waits after 12 of its 66 MUFU.EX2, 6 tiles' worth): float64 checks on w4 and w6, then alternating rounds at
# d = 64 N = 1024 (only the causal kernel differs).
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx3
mkdir -p /tmp/abkeep3 && cp -r .xfer/abx3/* /tmp/abkeep3/
echo "ready $(( $(date +%s) - t0 )) s"; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for lib in w4 w6; do
  SYMPATHY_CACHE_DIR=/tmp/abkeep3/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
    > $OUT/check_$lib.txt 2>&1; echo "check $lib rc=$? ok $(grep -c "^ok" $OUT/check_$lib.txt) FAIL $(grep -c "^FAIL" $OUT/check_$lib.txt)"
done
for round in 1 2 3 4 5 6 7; do for lib in final w4 w6; do
  [ $(( $(date +%s) - t0 )) -lt 430 ] || break 2
  SYMPATHY_CACHE_DIR=/tmp/abkeep3/$lib timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s $(grep -A4 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -2 | tr '\n' ' ')"
done; done
for lib in final w4 w6; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
echo "done $(( $(date +%s) - t0 )) s"
