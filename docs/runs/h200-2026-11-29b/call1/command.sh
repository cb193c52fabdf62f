#!/bin/bash
# call 1: the tile order (LPT sections) on the GPU: correctness of the forward's bands, then a two-process A/B
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/lpt timeout 300 python3 -m pytest -m gpu -q -x -p no:cacheprovider \
  tests/test_attention_gpu.py tests/test_attention_masks.py tests/test_attention_mask_band.py \
  tests/test_attention_dropout_window.py > $OUT/tests_lpt.txt 2>&1
echo "tests rc=$?"; tail -3 $OUT/tests_lpt.txt
for round in 1 2; do for lib in lpt lpt0; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 200 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A20 "^| d | N" $OUT/ab_${lib}_r$round.txt | head -16
done; done
