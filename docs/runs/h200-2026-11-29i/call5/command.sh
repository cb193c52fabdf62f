#!/bin/bash
# call 5 (2026-11-29i): final (the tree: the second row after the first row's packing, the wait after the first
# row, compare-masked blocks too; its forward SASS is ordm's of calls 1-4 but for one commuted IADD3 per kernel)
# against w8 (the wait after 8 of the first row's 16 n8 tiles, SY_HOPPER_FWD_WAIT_AFTER_TILES=8): float64 checks,
# three rounds of A/B, then the whole GPU suite and the backward's check on final.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx5
mkdir -p /tmp/abkeep && cp -r .xfer/abx5/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"
for lib in final w8; do
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
    > $OUT/check_$lib.txt 2>&1; echo "check $lib rc=$? ok $(grep -c "^ok" $OUT/check_$lib.txt) FAIL $(grep -c "^FAIL" $OUT/check_$lib.txt)"
done
for round in 1 2 3; do for lib in final w8; do
  [ $(( $(date +%s) - t0 )) -lt 400 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 60 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A14 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -12
done; done
for lib in final w8; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
export SYMPATHY_CACHE_DIR=/tmp/abkeep/final PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
timeout 40 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/bwd.txt 2>&1
echo "bwd rc=$?"; grep -E "^correctness|determin" /tmp/bwd.txt | tee $OUT/bwd_check.txt | head -5
echo "done $(( $(date +%s) - t0 )) s"
