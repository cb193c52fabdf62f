#!/bin/bash
# call 1 (2026-11-29h): V one block behind K in the forward's producer (vlag: SY_HOPPER_FWD_V_LAG=1, FA3/FA4's order)
# against HEAD's library (head: K and V of a block together). Float64 check of vlag, two rounds of A/B at d = 128,
# ncu PC sampling of both at d = 128, N = 4096, not causal. Stages FA4's first part.
t0=$(date +%s)
mkdir -p /tmp/fa4in && cp .xfer/fa4a/* /tmp/fa4in/
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx1
mkdir -p /tmp/abkeep && cp -r .xfer/abx1/* /tmp/abkeep/
echo "ready $(( $(date +%s) - t0 )) s"
SYMPATHY_CACHE_DIR=/tmp/abkeep/vlag timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 128 --kernels hopper \
  > /tmp/check_vlag.txt 2>&1; echo "check vlag rc=$? ok $(grep -c "^ok" /tmp/check_vlag.txt) FAIL $(grep -c "^FAIL" /tmp/check_vlag.txt)"
grep "^FAIL" /tmp/check_vlag.txt | head
for round in 1 2; do for lib in head vlag; do
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 80 python3 scripts/hopper_check.py --sizes 1024 4096 8192 \
    --head-dims 128 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/ab_${lib}_r$round.txt 2>&1
  echo "$lib r$round rc=$? $(( $(date +%s) - t0 )) s"; grep -A8 "^| d | N" $OUT/ab_${lib}_r$round.txt | tail -6
done; done
S="--section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no"
for lib in head vlag; do
  [ $(( $(date +%s) - t0 )) -lt 480 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 60 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 $S -o /tmp/ncu_$lib \
    python3 scripts/hopper_ncu.py --d 128 --n 4096 > /tmp/ncu_${lib}_log.txt 2>&1; echo "ncu $lib rc=$?"
  timeout 30 ncu -i /tmp/ncu_$lib.ncu-rep --page source --print-source sass --csv > /tmp/ncu_${lib}_sass.csv 2>/dev/null
  python3 scripts/ncu_source_summary.py /tmp/ncu_${lib}_sass.csv 300 > /tmp/ncu_${lib}_top.txt 2>&1
  python3 scripts/ncu_source_summary.py /tmp/ncu_${lib}_sass.csv --by-opcode > /tmp/ncu_${lib}_ops.txt 2>&1
  timeout 30 ncu -i /tmp/ncu_$lib.ncu-rep --page details > /tmp/ncu_${lib}_details.txt 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput" /tmp/ncu_${lib}_details.txt | head -6
  head -12 /tmp/ncu_${lib}_ops.txt
done
for f in /tmp/check_vlag.txt /tmp/ncu_*_details.txt /tmp/ncu_*_ops.txt /tmp/ncu_*_top.txt /tmp/ncu_*_log.txt; do echo "==> $f"; cat $f; done > $OUT/extra.txt 2>&1
gzip -c /tmp/ncu_head_sass.csv > $OUT/ncu_head_sass.csv.gz 2>/dev/null
echo "done $(( $(date +%s) - t0 )) s"
