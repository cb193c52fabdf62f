#!/bin/bash
# call 2 (2026-11-29h): FlashAttention-4 in the same runs as head, vlag (call 1's libraries, kept in /tmp/abkeep) and
# vmid (vlag + SY_HOPPER_FWD_MID_WAIT=1: the wait for P V between the two rows' exponentials, as FA4's SASS has it),
# with SM clocks sampled; ncu PC sampling of FA4 and vmid at d = 128, N = 4096, not causal. FA4's second part travels here.
t0=$(date +%s)
cp .xfer/fa4b/* /tmp/fa4in/
(cd /tmp/fa4in && cat libs13x.part.aa libs13x.part.ab > libs13.tar.xz && sha256sum -c libs13x.sha) || exit 1
python3 -m pip install -q --no-deps --no-compile --target /tmp/fa4site /tmp/fa4in/*.whl 2>&1 | tail -3
tar xJf /tmp/fa4in/libs13.tar.xz -C /tmp/fa4site || exit 1
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
export PYTHONPATH=$PYTHONPATH:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
python3 scripts/prebuild_variant.py --unpack .xfer/abx2 && cp -r .xfer/abx2/* /tmp/abkeep/
ls /tmp/abkeep/*/cuda
python3 -c "import sys; sys.path.insert(0,'scripts'); import fa4_anchor as f; fn, why = f.load(); print('fa4', f.version() if fn else why)"
echo "ready $(( $(date +%s) - t0 )) s"
SYMPATHY_CACHE_DIR=/tmp/abkeep/vmid timeout 80 python3 scripts/hopper_check.py --sizes 1024 --head-dims 128 --kernels hopper \
  > /tmp/check_vmid.txt 2>&1; echo "check vmid rc=$? ok $(grep -c "^ok" /tmp/check_vmid.txt) FAIL $(grep -c "^FAIL" /tmp/check_vmid.txt)"
grep "^FAIL" /tmp/check_vmid.txt | head
for lib in vmid head vlag; do
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 100 python3 scripts/hopper_check.py --sizes 4096 8192 --head-dims 128 \
    --kernels sdpa-cudnn hopper --fa4 --repeat 2 --no-check --clocks --out /tmp/fa4_$lib > $OUT/fa4_$lib.txt 2>&1
  echo "$lib rc=$? $(( $(date +%s) - t0 )) s"; grep -A6 "^| d | N" $OUT/fa4_$lib.txt | tail -4; grep "per GHz" $OUT/fa4_$lib.txt | head -12
done
S="--section SourceCounters --section WarpStateStats --section SpeedOfLight --import-source no"
run_ncu() {  # name, kernel regex, args
  [ $(( $(date +%s) - t0 )) -lt 500 ] || return
  timeout 90 ncu -k regex:$2 --launch-skip 1 --launch-count 1 $S -o /tmp/ncu_$1 python3 scripts/hopper_ncu.py $3 --d 128 --n 4096 \
    > /tmp/ncu_$1_log.txt 2>&1; echo "ncu $1 rc=$? $(( $(date +%s) - t0 )) s"
  timeout 30 ncu -i /tmp/ncu_$1.ncu-rep --page source --print-source sass --csv > /tmp/ncu_$1_sass.csv 2>/dev/null
  python3 scripts/ncu_source_summary.py /tmp/ncu_$1_sass.csv 300 > /tmp/ncu_$1_top.txt 2>&1
  python3 scripts/ncu_source_summary.py /tmp/ncu_$1_sass.csv --by-opcode > /tmp/ncu_$1_ops.txt 2>&1
  timeout 30 ncu -i /tmp/ncu_$1.ncu-rep --page details > /tmp/ncu_$1_details.txt 2>&1
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput" /tmp/ncu_$1_details.txt | head -4; head -12 /tmp/ncu_$1_ops.txt
}
run_ncu fa4 FlashAttentionForward "--fa4"
SYMPATHY_CACHE_DIR=/tmp/abkeep/vmid run_ncu vmid hopper_fwd ""
for f in /tmp/check_vmid.txt /tmp/ncu_*_details.txt /tmp/ncu_*_ops.txt /tmp/ncu_*_top.txt /tmp/ncu_*_log.txt; do echo "==> $f"; cat $f; done > $OUT/extra.txt 2>&1
gzip -c /tmp/ncu_fa4_sass.csv > $OUT/ncu_fa4_sass.csv.gz 2>/dev/null
echo "done $(( $(date +%s) - t0 )) s"
