#!/bin/bash
# call 5: the final library against the same sources with -DSY_HOPPER_BAND_DRAW_EARLY=0 (d = 128 bands back to the
# late draw), d = 128 only (d = 64 is the same code in both), three rounds, each library in its own process.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
for round in 1 2 3; do for lib in late final; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 2048 4096 \
    --head-dims 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$?"; grep -A8 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -6
done; done
