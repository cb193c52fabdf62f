#!/bin/bash
# call 4 (2026-11-29e): after the lse lifetime fix (sympathy/attention/cuda.py; Python only, the libraries are
# call 2's): the ring test and the new lse test under both libraries, the whole GPU suite under t80, then a third
# round of t80 against b64.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
for lib in b64 t80; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_ring_attention.py tests/test_attention_gpu_backward.py -k "simulated_ring_on_cuda or non_contiguous_lse" > $OUT/fix_$lib.txt 2>&1
  echo "$lib rc=$?"; tail -1 $OUT/fix_$lib.txt; grep -E "^E " $OUT/fix_$lib.txt | head -4
done
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/t80
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 /tmp/gpu_suite.txt | tee $OUT/gpu_suite_summary.txt; grep -E "^FAILED|^ERROR" /tmp/gpu_suite.txt | head
unset SYMPATHY_CACHE_DIR
for lib in t80 b64; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 90 python3 scripts/bwd_device.py --only-hopper --skip-check --dims 128 \
    --sizes 1024 2048 4096 8192 > $OUT/ab_${lib}_r3.txt 2>&1
  echo "$lib r3 rc=$?"; grep -E "^ +128 +[0-9]+ +False" $OUT/ab_${lib}_r3.txt | head -4
done
