#!/bin/bash
# call 3: bands drawing their next tile early (SY_HOPPER_BAND_DRAW_EARLY=1) on the sectioned order, A/B against the
# committed library; correctness of the early build first.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/early timeout 200 python3 -m pytest -m gpu -q -x -p no:cacheprovider \
  tests/test_attention_gpu.py tests/test_attention_masks.py tests/test_attention_mask_band.py \
  tests/test_attention_dropout_window.py tests/test_attention_dropout.py > $OUT/tests_early.txt 2>&1
echo "tests rc=$?"; tail -1 $OUT/tests_early.txt
for round in 1 2 3; do for lib in cur early; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep "yes |" $OUT/ab_${lib}_r$round.txt | tail -6
done; done
