#!/bin/bash
# call 7 (2026-11-29h): nolag (the wait between the rows without V one block behind K) beside fin (both) at N = 1024,
# where call 5 did not measure, and the whole GPU suite and the 300-step training check on nolag.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx5
echo "ready $(( $(date +%s) - t0 )) s"
for round in 1 2; do for lib in nolag fin; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/abx5/$lib timeout 60 python3 scripts/hopper_check.py --sizes 1024 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A6 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -4
done; done
export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx5/nolag PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite nolag rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite_nolag.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite_nolag.txt | head
(cd /tmp && timeout 60 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -4 /tmp/train.txt | tee $OUT/train_tail_nolag.txt
echo "done $(( $(date +%s) - t0 )) s"
