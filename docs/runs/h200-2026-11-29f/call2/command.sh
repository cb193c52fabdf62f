#!/bin/bash
# run as: LIB=base bash call2.sh
# call 2 (2026-11-29f): FlashAttention-4 in the same run as ours (library $LIB from call 1's /tmp/abkeep) and cuDNN:
# the forward at N = 1024 .. 8192 and forward + backward at N = 2048 .. 8192, d = 64 and 128. The wheels' second
# part travels here; the first came with call 1 (scripts/fa4_device.sh's header says how they were split).
t0=$(date +%s)
cp .xfer/fa4b/* /tmp/fa4in/
# nvidia-cutlass-dsl-libs-cu13's wheel travels as an xz tar of its contents (64 MB against the wheel's 92 MB), joined
# and checked here, and unpacked over the other wheels' --target install (pip would not merge into its folders).
(cd /tmp/fa4in && cat libs13x.part.aa libs13x.part.ab > libs13.tar.xz && sha256sum -c libs13x.sha) || exit 1
python3 -m pip install -q --no-deps --no-compile --target /tmp/fa4site /tmp/fa4in/*.whl 2>&1 | tail -3
tar xJf /tmp/fa4in/libs13.tar.xz -C /tmp/fa4site || exit 1
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
export PYTHONPATH=$PYTHONPATH:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
export SYMPATHY_CACHE_DIR=/tmp/abkeep/$LIB
ls $SYMPATHY_CACHE_DIR
python3 -c "import sys; sys.path.insert(0,'scripts'); import fa4_anchor as f; fn, why = f.load(); print('fa4', f.version() if fn else why)"
echo "ready $(( $(date +%s) - t0 )) s"
timeout 250 python3 scripts/hopper_check.py --sizes 1024 2048 4096 8192 --head-dims 64 128 --kernels sdpa-cudnn hopper --fa4 \
  --repeat 2 --no-check > $OUT/fwd_fa4.txt 2>&1
echo "fwd rc=$? $(( $(date +%s) - t0 )) s"; grep -A20 "^| d | N" $OUT/fwd_fa4.txt | head -40
timeout 250 python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 8192 --fa4 > $OUT/bwd_fa4.txt 2>&1
echo "bwd rc=$? $(( $(date +%s) - t0 )) s"; grep -E "^ +(64|128) +[0-9]+ +(True|False)" $OUT/bwd_fa4.txt
