#!/bin/bash
# call 2 (2026-11-29k): final (the tree with short-causal.patch adopted: call 1's short library, renamed to the
# tree's key; the sources differ from call 1's by a comment) against review (c1d6d0f's CUDA): the 300-step training
# check and the hopper backward's check on final, two rounds of the whole forward table, then more rounds at the
# target cell (d = 64 N = 1024).
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx2
mkdir -p /tmp/abkeep2 && cp -r .xfer/abx2/* /tmp/abkeep2/
echo "ready $(( $(date +%s) - t0 )) s"; nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
export PYTHONUNBUFFERED=1
(cd /tmp && SYMPATHY_CACHE_DIR=/tmp/abkeep2/final timeout 150 python3 -m sympathy.cli demo attention_train > /tmp/train.txt 2>&1; echo "train rc=$?"); tail -4 /tmp/train.txt | tee $OUT/train_tail.txt
SYMPATHY_CACHE_DIR=/tmp/abkeep2/final timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > /tmp/bwd.txt 2>&1
echo "bwd rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^correctness|determin" /tmp/bwd.txt | tee $OUT/bwd_check.txt | head -5
for round in 1 2; do for lib in review final; do
  [ $(( $(date +%s) - t0 )) -lt 460 ] || break 2
  SYMPATHY_CACHE_DIR=/tmp/abkeep2/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 64 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A14 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -12
done; done
for round in 3 4 5 6 7 8; do for lib in review final; do
  [ $(( $(date +%s) - t0 )) -lt 540 ] || break 2
  SYMPATHY_CACHE_DIR=/tmp/abkeep2/$lib timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 \
    --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s $(grep -A4 "^| d | N" /tmp/ab_${lib}_r$round.txt | tail -2 | tr '\n' ' ')"
done; done
for lib in review final; do cat /tmp/ab_${lib}_r*.txt > $OUT/ab_$lib.txt 2>/dev/null; done
cp /tmp/train.txt $OUT/train_full.txt
echo "done $(( $(date +%s) - t0 )) s"
