#!/bin/bash
# call 6 (2026-11-29h): FlashAttention-4 in the same runs as fin (the final library, kept from call 5) and head, d = 128,
# N = 4096 and 8192, SM clocks sampled. FA4's second part travels here.
t0=$(date +%s)
cp .xfer/fa4b/* /tmp/fa4in/
(cd /tmp/fa4in && cat libs13x.part.aa libs13x.part.ab > libs13.tar.xz && sha256sum -c libs13x.sha) || exit 1
python3 -m pip install -q --no-deps --no-compile --target /tmp/fa4site /tmp/fa4in/*.whl 2>&1 | tail -3
tar xJf /tmp/fa4in/libs13.tar.xz -C /tmp/fa4site || exit 1
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
export PYTHONPATH=$PYTHONPATH:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
python3 scripts/prebuild_variant.py --unpack .xfer/abx6 && cp -r .xfer/abx6/* /tmp/abkeep/
python3 -c "import sys; sys.path.insert(0,'scripts'); import fa4_anchor as f; fn, why = f.load(); print('fa4', f.version() if fn else why)"
echo "ready $(( $(date +%s) - t0 )) s"
for lib in fin head fin; do
  [ $(( $(date +%s) - t0 )) -lt 480 ] || break
  SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 100 python3 scripts/hopper_check.py --sizes 4096 8192 --head-dims 128 \
    --kernels sdpa-cudnn hopper --fa4 --repeat 2 --no-check --clocks --out /tmp/fa4_$lib > /tmp/fa4_$lib.txt 2>&1
  echo "$lib rc=$? $(( $(date +%s) - t0 )) s"; grep -A6 "^| d | N" /tmp/fa4_$lib.txt | tail -4
  cat /tmp/fa4_$lib.txt >> $OUT/fa4_$lib.txt
done
echo "done $(( $(date +%s) - t0 )) s"
