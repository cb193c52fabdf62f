#!/bin/bash
# call 4 (2026-11-29h), run as LIB=name bash call4.sh on call 3's warm machine: the whole GPU suite, the hopper backward's
# check and the 300-step training check on the chosen library (/tmp/abkeep/$LIB, built from the committed sources).
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
export SYMPATHY_CACHE_DIR=/tmp/abkeep/$LIB PYTHONUNBUFFERED=1
ls $SYMPATHY_CACHE_DIR/cuda
timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/bwd.txt 2>&1
echo "bwd rc=$?"; grep -E "^correctness|determin" /tmp/bwd.txt | tee $OUT/bwd_check.txt | head -5
(cd /tmp && timeout 120 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -4 /tmp/train.txt | tee $OUT/train_tail.txt
cp /tmp/suite.txt $OUT/suite_full.txt
echo "done $(( $(date +%s) - t0 )) s"
