#!/bin/bash
# call 1 (2026-11-29i): the second row's exponentials ordered after the first row's packing (SY_HOPPER_FWD_ROW_ORDER=1,
# ord), and the same wait between the rows on compare-masked blocks too (SY_HOPPER_FWD_MID_WAIT_MASKED=1, ordm),
# against head (52e6897's library): float64 checks, then rounds of A/B at d = 64 and 128.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx1
mkdir -p /tmp/abkeep && cp -r .xfer/abx1/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"
for lib in ord ordm; do
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
    > $OUT/check_$lib.txt 2>&1; echo "check $lib rc=$? ok $(grep -c "^ok" $OUT/check_$lib.txt) FAIL $(grep -c "^FAIL" $OUT/check_$lib.txt)"
  grep "^FAIL" $OUT/check_$lib.txt | head -5
done
for round in 1 2 3; do for lib in head ord ordm; do
  [ $(( $(date +%s) - t0 )) -lt 540 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 60 python3 scripts/hopper_check.py --sizes 1024 4096 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A10 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -8
done; done
for lib in head ord ordm; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
echo "done $(( $(date +%s) - t0 )) s"
