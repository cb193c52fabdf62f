#!/bin/bash
# call 1 (2026-11-29j): review (c32edee's library, the tree's CUDA) against short (the wait after 8 of the first row's
# 16 n8 tiles and the split at a tile's first block, on d = 64's 128 x 128 causal kernel only) and, where built, sw8
# (the wait after 8 only) and sfirst (the first-block split only): float64 checks, then rounds of A/B at d = 64
# N = 1024 (the only kernels whose SASS differs), then the whole GPU suite on short.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx1
mkdir -p /tmp/abkeep && cp -r .xfer/abx1/* /tmp/abkeep/
LIBS=$(ls /tmp/abkeep); echo "libs: $LIBS; ready $(( $(date +%s) - t0 )) s"
for lib in $LIBS; do
  [ $lib = review ] && continue
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
    > $OUT/check_$lib.txt 2>&1; echo "check $lib rc=$? ok $(grep -c "^ok" $OUT/check_$lib.txt) FAIL $(grep -c "^FAIL" $OUT/check_$lib.txt)"
done
for round in 1 2 3 4 5 6; do for lib in $LIBS; do
  [ $(( $(date +%s) - t0 )) -lt 430 ] || break 2
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s $(grep -A4 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -2 | tr '\n' ' ')"
done; done
for lib in $LIBS; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
export SYMPATHY_CACHE_DIR=/tmp/abkeep/short PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
echo "done $(( $(date +%s) - t0 )) s"
