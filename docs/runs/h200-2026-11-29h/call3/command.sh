#!/bin/bash
# call 3 (2026-11-29h): fin (the tree: V one block behind K with its coordinates in shared memory, and the wait for P V
# between the two rows' exponentials, SY_HOPPER_FWD_MID_WAIT=1) against head: float64 check, then three rounds of A/B
# at d = 64 and 128.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx3
mkdir -p /tmp/abkeep && cp -r .xfer/abx3/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"
for lib in fin; do
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
    > /tmp/check_$lib.txt 2>&1; echo "check $lib rc=$? ok $(grep -c "^ok" /tmp/check_$lib.txt) FAIL $(grep -c "^FAIL" /tmp/check_$lib.txt)"
  grep "^FAIL" /tmp/check_$lib.txt | head
done
for round in 1 2 3; do for lib in head fin; do
  [ $(( $(date +%s) - t0 )) -lt 530 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 4096 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A10 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -8
done; done
cat /tmp/check_fin.txt > $OUT/checks.txt
echo "done $(( $(date +%s) - t0 )) s"
