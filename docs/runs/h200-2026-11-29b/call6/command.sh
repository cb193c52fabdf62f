#!/bin/bash
# call 6: the library that ships (sections, late draw for bands): the whole GPU suite and the forward beside cuDNN.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/ship
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite.txt | head
timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 --kernels sdpa-cudnn hopper --repeat 2 --no-check \
  > $OUT/fwd_ship.txt 2>&1
echo "fwd rc=$?"; grep -A14 "^| d | N" $OUT/fwd_ship.txt
