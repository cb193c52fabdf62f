#!/bin/bash
# FlashAttention-4 in the same run as ours, on the device machine (no network there). Run from the project
# root after the wheels are stashed in /tmp/fa4in on the same warm machine (docs/notes-hopper.md, "FA4 in
# the same run"). Staging, here:
#   pip download --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux_2_28_x86_64 \
#       --platform manylinux_2_24_x86_64 --platform any -d W flash-attn-4==4.0.0b36 nvidia-cutlass-dsl==4.8.1 \
#       nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 \
#       quack-kernels 'apache-tvm-ffi<0.2' torch-c-dlpack-ext einops 'cuda-bindings>=13,<14' cuda-pathfinder protobuf
#   the 92 MB libs-cu13 wheel renamed libs13.whl, `sha256sum libs13.whl > libs13.sha`, `split -b 46000000
#   libs13.whl libs13.part.`: part aa (+ cuda-bindings) in one call's carry, part ab, libs13.sha and the rest
#   in the next, each call copying its folder to /tmp/fa4in; then this script, with .device and a prebuilt
#   SYMPATHY_CACHE_DIR carried, on the still-warm machine (it goes back after ~30 s idle).
#   Where libraries travel in the same calls (the working tree counts against the 64 MiB too), the libs-cu13 wheel's
#   contents as an xz tar are 64 MB instead of 92 (unzip; tar c | xz -9, ~5 min on two cores), split in two and
#   untarred over the other wheels' --target install: docs/runs/h200-2026-11-29f/call2/command.sh.
set -u
(cd /tmp/fa4in && cat libs13.part.aa libs13.part.ab > libs13.whl && sha256sum -c libs13.sha && mv libs13.whl nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm libs13.part.*) || exit 1
python3 -m pip install -q --no-deps --no-compile --target /tmp/fa4site /tmp/fa4in/*.whl 2>&1 | tail -3
export SYMPATHY_CACHE_DIR=$PWD/.xfer/cache PYTHONUNBUFFERED=1
. .device/bootstrap.sh || exit 1
export PYTHONPATH=$PYTHONPATH:/tmp/fa4site
python3 -c "import sys; sys.path.insert(0,'scripts'); import fa4_anchor as f; fn, why = f.load(); print('fa4', f.version() if fn else why)"
timeout 200 python3 scripts/hopper_check.py --sizes 1024 4096 --head-dims 64 128 --kernels sdpa-cudnn hopper --fa4 --repeat 2 --out $OUT > $OUT/fwd.txt 2>&1; echo "fwd rc $?"; tail -12 $OUT/fwd.txt
timeout 170 python3 scripts/bwd_device.py --only-hopper --sizes 4096 --skip-check --fa4 > $OUT/bwd.txt 2>&1; echo "bwd rc $?"; tail -10 $OUT/bwd.txt
