#!/bin/bash
# call 4 (2026-11-29i): a tile's first block waits between its two rows as well (SY_HOPPER_FWD_MID_WAIT_FIRST=1,
# first) against first0 (=1 off: call 1-3's ordm, SASS identical) and head (52e6897): float64 check, three rounds
# of A/B at d = 64 and 128, then the whole GPU suite, the backward's check and the training check on first.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx4
mkdir -p /tmp/abkeep && cp -r .xfer/abx4/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"
SYMPATHY_CACHE_DIR=/tmp/abkeep/first timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels hopper \
  > $OUT/check_first.txt 2>&1; echo "check first rc=$? ok $(grep -c "^ok" $OUT/check_first.txt) FAIL $(grep -c "^FAIL" $OUT/check_first.txt)"
for round in 1 2 3; do for lib in head first0 first; do
  [ $(( $(date +%s) - t0 )) -lt 420 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 60 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A14 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -12
done; done
for lib in head first0 first; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
export SYMPATHY_CACHE_DIR=/tmp/abkeep/first PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests > /tmp/suite.txt 2>&1
echo "suite rc=$? $(( $(date +%s) - t0 )) s"; tail -1 /tmp/suite.txt | tee $OUT/gpu_suite.txt; grep -E "^FAILED|^ERROR" /tmp/suite.txt | tee -a $OUT/gpu_suite.txt | head
timeout 40 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/bwd.txt 2>&1
echo "bwd rc=$?"; grep -E "^correctness|determin" /tmp/bwd.txt | tee $OUT/bwd_check.txt | head -5
echo "done $(( $(date +%s) - t0 )) s"
