#!/bin/bash
# call 4: the final library (sections + d = 128 bands drawing early): the whole GPU suite, the 300-step training
# check, and the forward beside cuDNN.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/final
timeout 330 python3 -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite.txt | head
(cd $OUT && timeout 120 python3 -m sympathy.cli demo attention_train > $OUT/train.txt 2>&1; echo "train rc=$?"); tail -12 $OUT/train.txt
timeout 90 python3 scripts/hopper_check.py --sizes 1024 2048 4096 --kernels sdpa-cudnn hopper --repeat 2 --no-check \
  > $OUT/fwd_final.txt 2>&1
echo "fwd rc=$?"; grep -A14 "^| d | N" $OUT/fwd_final.txt
