#!/bin/bash
# call 2: dropout's price on every backend in one run (ours and SDPA's p=0.1 over p=0), the dropout GPU tests on
# the new tile order, and a third round of the tile-order A/B.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/lpt
timeout 150 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_attention_dropout.py \
  tests/test_attention_dropout_mask.py tests/test_attention_gpu_api.py > $OUT/tests_dropout.txt 2>&1
echo "tests rc=$?"; tail -1 $OUT/tests_dropout.txt
timeout 260 python3 scripts/dropout_check.py --sizes 4096 16384 --dims 128 --rounds 3 --out $OUT > $OUT/dropout_sdpa.txt 2>&1
echo "dropout rc=$?"; grep "^|" $OUT/dropout_sdpa.txt
for lib in lpt0 lpt; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r3.txt 2>&1
  echo "$lib r3 rc=$?"; grep "yes |" $OUT/ab_${lib}_r3.txt | tail -6
done
