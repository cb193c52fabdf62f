#!/bin/bash
# call 4 (2026-11-29d): the final library (fin: LSE / D preload and two dQ buffers, the late fence removed) -- the
# whole GPU suite, the backward's check against float64, the 300-step training check -- then fin against fbase
# (-DSY_HOPPER_BWD_PRELOAD=0 -DSY_HOPPER_BWD_DQ_BUFFERS=1: the shipped code's kernel) in two rounds.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$1 timeout 80 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 > $OUT/ab_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$?"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/ab_$1_r$2.txt | head -12
}
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/fin
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/gpu_suite.txt 2>&1
echo "suite rc=$?"; tail -1 /tmp/gpu_suite.txt | tee $OUT/gpu_suite_summary.txt; grep -E "^FAILED|^ERROR" /tmp/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/check_fin.txt 2>&1
echo "check rc=$?"; grep -E "^correctness" /tmp/check_fin.txt | tee $OUT/check_fin_summary.txt
(cd /tmp && timeout 120 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -12 /tmp/train.txt | tee $OUT/train_tail.txt
unset SYMPATHY_CACHE_DIR
ab fin 1; ab fbase 1; ab fin 2; ab fbase 2
