#!/bin/bash
# call 5 (2026-11-29k), nvidia-h200-x2 (two H200s, NCCL; NVLink multicast off as the image sets it): issue 23's
# two-GPU run, on the tree's library (the final forward of calls 1-4): ring_attention across the two GPUs against
# the unsharded kernel, throughput at N = 128k, 256k, 512k beside one GPU and PyTorch's context_parallel, memory
# per GPU, and the overlap in a profiler trace. The device budget left is short: sizes stop after 70 s of script.
t0=$(date +%s)
. .device/bootstrap.sh > $OUT/bootstrap.log 2>&1; tail -1 $OUT/bootstrap.log
python3 scripts/prebuild_variant.py --unpack .xfer/abx5
mkdir -p /tmp/abkeep5 && cp -r .xfer/abx5/* /tmp/abkeep5/
echo "ready $(( $(date +%s) - t0 )) s"; nvidia-smi --query-gpu=name --format=csv,noheader; env | grep -E "NVLS|MULTICAST"
export SYMPATHY_CACHE_DIR=/tmp/abkeep5/final PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
timeout 240 torchrun --nproc-per-node 2 scripts/ring_attention_multi.py --sizes 131072 262144 524288 --budget 70 --reps 2 \
  --out $OUT 2>&1 | grep -v "^W1" | tee $OUT/ring_multi.txt | tail -40
echo "done $(( $(date +%s) - t0 )) s"
