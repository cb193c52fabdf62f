#!/bin/bash
# call 3 (2026-11-29i): FlashAttention-4 in the same runs as ordm and head (kept from call 1), d = 64 and 128,
# N = 1024, 4096, 8192, SM clocks sampled. FA4's second part travels here.
t0=$(date +%s)
cp .xfer/fa4b/* /tmp/fa4in/
(cd /tmp/fa4in && cat libs13x.part.aa libs13x.part.ab > libs13.tar.xz && sha256sum -c libs13x.sha) || exit 1
python3 -m pip install -q --no-deps --no-compile --target /tmp/fa4site /tmp/fa4in/*.whl 2>&1 | tail -3
tar xJf /tmp/fa4in/libs13.tar.xz -C /tmp/fa4site || exit 1
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
export PYTHONPATH=$PYTHONPATH:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
python3 -c "import sys; sys.path.insert(0,'scripts'); import fa4_anchor as f; fn, why = f.load(); print('fa4', f.version() if fn else why)"
echo "ready $(( $(date +%s) - t0 )) s"
for lib in ordm head ordm head; do
  [ $(( $(date +%s) - t0 )) -lt 470 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 110 python3 scripts/hopper_check.py --sizes 1024 4096 8192 --head-dims 64 128 \
    --kernels sdpa-cudnn hopper --fa4 --repeat 2 --no-check --clocks > /tmp/fa4_$lib.txt 2>&1
  echo "$lib rc=$? $(( $(date +%s) - t0 )) s"; grep -A14 "^| d | N" /tmp/fa4_$lib.txt | tail -12
  cat /tmp/fa4_$lib.txt >> $OUT/fa4_$lib.txt
done
echo "done $(( $(date +%s) - t0 )) s"
