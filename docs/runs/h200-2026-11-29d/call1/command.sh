#!/bin/bash
# call 1 (2026-11-29d): where in the SASS the stalls sit -- ncu's PC sampling (SourceCounters) of the shipped
# library's backward (d = 128, N = 4096, not causal) and forward (d = 64, N = 1024, causal), per instruction.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/ship
ncu --version | tail -1
S="--section SourceCounters --section WarpStateStats --import-source no"
timeout 150 ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 $S -o $OUT/bwd python3 scripts/hopper_ncu.py --backward --d 128 > $OUT/bwd_log.txt 2>&1; echo "bwd rc=$?"
timeout 60 ncu -i $OUT/bwd.ncu-rep --page source --print-source sass --csv > $OUT/bwd_sass.csv 2>&1; echo "bwd src rc=$?"
timeout 60 ncu -i $OUT/bwd.ncu-rep --page details > $OUT/bwd_details.txt 2>&1
timeout 120 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 $S -o $OUT/fwd python3 scripts/hopper_ncu.py --d 64 --n 1024 --causal > $OUT/fwd_log.txt 2>&1; echo "fwd rc=$?"
timeout 60 ncu -i $OUT/fwd.ncu-rep --page source --print-source sass --csv > $OUT/fwd_sass.csv 2>&1; echo "fwd src rc=$?"
timeout 60 ncu -i $OUT/fwd.ncu-rep --page details > $OUT/fwd_details.txt 2>&1
head -c 1500 $OUT/bwd_sass.csv; echo; wc -l $OUT/*.csv
gzip -k $OUT/bwd_sass.csv $OUT/fwd_sass.csv
