#!/bin/bash
# call 1 (2026-11-29g): the d = 64 small blocks (hopper_fwd_small_kernel, one warpgroup of 64 rows a block, three or
# four blocks an SM) against HEAD (ac642ab's sources: 159e859). sm128: 64 x 128 tiles, Q in shared memory, 3 blocks/SM;
# sm64: 64 x 64, Q in registers, 4 blocks/SM; both with SY_HOPPER_D64_SMALL_MAX_Q=4096 (small blocks at N <= 4096).
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx
echo "ready $(( $(date +%s) - t0 )) s"
for lib in sm128 sm64; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py \
    tests/test_attention_masks.py -k "small or random or edge or causal_with or scale or band" > $OUT/tests_$lib.txt 2>&1
  echo "tests $lib rc=$?"; tail -1 $OUT/tests_$lib.txt; grep -E "^FAILED|^E  " $OUT/tests_$lib.txt | head -8
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 60 python3 scripts/hopper_check.py --sizes 1024 2048 --head-dims 64 \
    --kernels hopper > $OUT/check_$lib.txt 2>&1; echo "check $lib rc=$?"; echo "ok $(grep -c "^ok" $OUT/check_$lib.txt) FAIL $(grep -c "^FAIL" $OUT/check_$lib.txt)"
done
echo "tests done $(( $(date +%s) - t0 )) s"
for round in 1 2; do for lib in head sm128 sm64; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 64 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A8 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -6
done; done
echo "done $(( $(date +%s) - t0 )) s"
