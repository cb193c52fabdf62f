#!/bin/bash
# call 4 (2026-11-29k): final (the wait after 8 of 16 n8 tiles) against w6 (after 6), both from call 3, in more
# alternating rounds at d = 64 N = 1024 on call 3's machine.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx4
mkdir -p /tmp/abkeep4 && cp -r .xfer/abx4/* /tmp/abkeep4/
echo "ready $(( $(date +%s) - t0 )) s"; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
for round in $(seq 1 14); do for lib in final w6; do
  [ $(( $(date +%s) - t0 )) -lt 390 ] || break 2
  SYMPATHY_CACHE_DIR=/tmp/abkeep4/$lib timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s $(grep -A4 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -2 | tr '\n' ' ')"
done; done
for lib in final w6; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
echo "done $(( $(date +%s) - t0 )) s"
