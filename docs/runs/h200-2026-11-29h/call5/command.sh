#!/bin/bash
# call 5 (2026-11-29h): the two changes apart. nolag (the tree with SY_HOPPER_FWD_V_LAG=0: the wait for P V between
# the rows only) against fin (the tree: both), two rounds at d = 64 and 128, N = 2048 and 4096 (head against fin: call
# 3). Stages FA4's first part for call 6.
t0=$(date +%s)
mkdir -p /tmp/fa4in && cp .xfer/fa4a/* /tmp/fa4in/
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx5
mkdir -p /tmp/abkeep && cp -r .xfer/abx5/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"
SYMPATHY_CACHE_DIR=/tmp/abkeep/nolag timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
  > $OUT/check_nolag.txt 2>&1; echo "check nolag rc=$? ok $(grep -c "^ok" $OUT/check_nolag.txt) FAIL $(grep -c "^FAIL" $OUT/check_nolag.txt)"
for round in 1 2; do for lib in nolag fin; do
  [ $(( $(date +%s) - t0 )) -lt 500 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 2048 4096 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A10 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -8
done; done
echo "done $(( $(date +%s) - t0 )) s"
