#!/bin/bash
# call 3 (2026-11-29e): the ring test that failed under t80 in call 2, with both libraries, and each backward
# sub-call of that test against float64 (.xfer/e/ringdiag.py).
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
for lib in t80 b64; do
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_ring_attention.py -k simulated_ring_on_cuda > $OUT/ring_$lib.txt 2>&1
  echo "$lib ring rc=$?"; tail -1 $OUT/ring_$lib.txt; grep -E "^E " $OUT/ring_$lib.txt | head -6
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$lib timeout 100 python3 .xfer/e/ringdiag.py > $OUT/diag_$lib.txt 2>&1; echo "$lib diag rc=$?"
  cut -c1-400 $OUT/diag_$lib.txt | tail -30
done
