#!/bin/bash
# (.xfer/s/sass_top.py, carried in that call, is committed as scripts/ncu_source_summary.py.)
# call 3 (2026-11-29d): one named-barrier pair per dQ buffer (call 2's two-buffer builds failed to launch); all =
# defaults (LSE / D preload, two dQ buffers, late fence), buf2 = all without the late fence, base = the shipped
# code's behaviour. Correctness of all first, then the A/B in two rounds, then where all's stalls moved.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
ab() {
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$1 timeout 80 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 > $OUT/ab_$1_r$2.txt 2>&1
  echo "$1 r$2 rc=$?"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/ab_$1_r$2.txt | head -12
}
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/all timeout 80 python3 scripts/bwd_device.py --only-hopper --sizes 1024 > $OUT/check_all.txt 2>&1
echo "check all rc=$?"; grep -E "^correctness" $OUT/check_all.txt | head
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/all timeout 100 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests > $OUT/gpu_suite_all.txt 2>&1
echo "suite all rc=$?"; tail -1 $OUT/gpu_suite_all.txt; grep -E "^FAILED|^ERROR" $OUT/gpu_suite_all.txt | head
ab base 1; ab all 1; ab buf2 1; ab all 2; ab base 2; ab buf2 2
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/all
timeout 150 ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 --section SourceCounters --section WarpStateStats --import-source no -o /tmp/bwd_all python3 scripts/hopper_ncu.py --backward --d 128 > /tmp/ncu_log.txt 2>&1; echo "ncu rc=$?"
timeout 60 ncu -i /tmp/bwd_all.ncu-rep --page source --print-source sass --csv > /tmp/bwd_all_sass.csv 2>&1
python3 .xfer/s/sass_top.py /tmp/bwd_all_sass.csv 2000 > $OUT/bwd_all_top.txt; gzip -c /tmp/bwd_all_sass.csv > $OUT/bwd_all_sass.csv.gz
head -60 $OUT/bwd_all_top.txt
