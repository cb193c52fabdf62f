#!/bin/bash
# call 3 (2026-11-29g): three independent pipelines a block (hopper_fwd_pipes_kernel) against HEAD:
# pp128: 64 x 128 tiles, 2 stages, one Q buffer; pp64: 64 x 64 tiles, 3 stages, two Q buffers; both with
# SY_HOPPER_D64_PIPES_MAX_Q=4096. Tests and float64 checks of both, two rounds of A/B, ncu of pp128 and head.

t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx
echo "ready $(( $(date +%s) - t0 )) s"
for lib in pp128 pp64; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_gpu.py \
    tests/test_attention_masks.py -k "small or random or edge or causal_with or scale or band" > /tmp/tests_$lib.txt 2>&1
  echo "tests $lib rc=$?"; tail -1 /tmp/tests_$lib.txt; grep -E "^FAILED|^E  " /tmp/tests_$lib.txt | cut -c1-300 | head -8
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 60 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 \
    --kernels hopper > /tmp/check_$lib.txt 2>&1; echo "check $lib rc=$? ok $(grep -c "^ok" /tmp/check_$lib.txt) FAIL $(grep -c "^FAIL" /tmp/check_$lib.txt)"
done
echo "tests done $(( $(date +%s) - t0 )) s"
for round in 1 2; do for lib in head pp128 pp64; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 64 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A8 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -6
done; done
echo "ab done $(( $(date +%s) - t0 )) s"
for lib in pp128 head; do
  [ $(( $(date +%s) - t0 )) -lt 500 ] || break
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/$lib timeout 60 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    python3 scripts/hopper_ncu.py --d 64 --n 1024 --causal > /tmp/ncu_$lib.txt 2>&1
  echo "ncu $lib rc=$?"; grep -E "Duration|L2 Cache Throughput|Compute \(SM\) Throughput|Cluster Size|Grid Size|Achieved Occ|Theoretical Occ|Block Limit (Sh|Reg)" /tmp/ncu_$lib.txt | head -12
done
for f in /tmp/tests_* /tmp/check_* /tmp/ncu_*; do echo "==> $f"; tail -n 150 $f; done > $OUT/extra.txt 2>&1
echo "done $(( $(date +%s) - t0 )) s"
