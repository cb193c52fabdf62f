#!/bin/bash
# call 2 (2026-11-29i), on call 1's warm machine: FA4's first part staged; the whole GPU suite, the hopper backward's
# check and the 300-step training check on ordm (/tmp/abkeep/ordm from call 1).
t0=$(date +%s)
mkdir -p /tmp/fa4in && cp .xfer/fa4a/* /tmp/fa4in/
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
export SYMPATHY_CACHE_DIR=/tmp/abkeep/ordm PYTHONUNBUFFERED=1
ls $SYMPATHY_CACHE_DIR/cuda
timeout 220 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/bwd.txt 2>&1
echo "bwd rc=$?"; grep -E "^correctness|determin" /tmp/bwd.txt | tee $OUT/bwd_check.txt | head -5
(cd /tmp && timeout 120 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -4 /tmp/train.txt | tee $OUT/train_tail.txt
cp /tmp/suite.txt $OUT/suite_full.txt
echo "done $(( $(date +%s) - t0 )) s"
