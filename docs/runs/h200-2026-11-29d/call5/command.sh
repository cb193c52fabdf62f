#!/bin/bash
# (.xfer/s/sass_top.py, carried in that call, is committed as scripts/ncu_source_summary.py.)
# call 5 (2026-11-29d): where the forward's target cell waits (d = 64, N = 1024, causal) -- ncu's PC sampling of our
# forward (the final library; the forward is unchanged this session) and of cuDNN's, summarised here.
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/fin
S="--section SourceCounters --section WarpStateStats --import-source no"
timeout 75 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 $S -o /tmp/fwd python3 scripts/hopper_ncu.py --d 64 --n 1024 --causal > /tmp/fwd_log.txt 2>&1; echo "fwd rc=$?"
timeout 40 ncu -i /tmp/fwd.ncu-rep --page source --print-source sass --csv > /tmp/fwd_sass.csv 2>&1
python3 .xfer/s/sass_top.py /tmp/fwd_sass.csv 400 > $OUT/fwd_top.txt; gzip -c /tmp/fwd_sass.csv > $OUT/fwd_sass.csv.gz
timeout 75 ncu -k regex:fprop --launch-skip 1 --launch-count 1 $S -o /tmp/fwdc python3 scripts/hopper_ncu.py --cudnn --d 64 --n 1024 --causal > /tmp/fwdc_log.txt 2>&1; echo "cudnn rc=$?"
timeout 40 ncu -i /tmp/fwdc.ncu-rep --page source --print-source sass --csv > /tmp/fwdc_sass.csv 2>&1
python3 .xfer/s/sass_top.py /tmp/fwdc_sass.csv 400 > $OUT/fwd_cudnn_top.txt; gzip -c /tmp/fwdc_sass.csv > $OUT/fwd_cudnn_sass.csv.gz
head -14 $OUT/fwd_top.txt; head -14 $OUT/fwd_cudnn_top.txt
