# call 2: the d = 256 backward with a tile-major dq_accum (tiled) against the session's base; GPU suite on tiled
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
# base was built from 017ed5c: give it the current sources' name so the loader takes it
key=$(python3 -c "import sys; sys.path.insert(0,'.'); from sympathy.attention import cuda_build as c; print(c._source_key('sm_90a', c.find_nvcc()))")
for f in .xfer/ab/base/cuda/*.so; do mv $f .xfer/ab/base/cuda/attention_sm_90a_$key.so; done
ls .xfer/ab/*/cuda/
T=$PWD/.xfer/ab/tiled B=$PWD/.xfer/ab/base
SYMPATHY_CACHE_DIR=$T python3 scripts/bwd256_device.py --sizes 2048 --skip flash ours-det ours-mma ours-atomic math > $OUT/r/check_tiled.txt 2>&1; tail -14 $OUT/r/check_tiled.txt
SYMPATHY_CACHE_DIR=$T python3 -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/r/suite_tiled.txt 2>&1; tail -3 $OUT/r/suite_tiled.txt
for run in 1 2; do for v in base tiled; do
  echo "== $v run $run"
  SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/$v python3 scripts/bwd256_device.py --skip-check --skip-tests --sizes 2048 4096 8192 --skip flash ours-det ours-mma ours-atomic math > $OUT/r/t_${v}_$run.txt 2>&1; tail -8 $OUT/r/t_${v}_$run.txt
done; done
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors_op_red.sum,smsp__inst_executed.sum
SYMPATHY_CACHE_DIR=$T ncu -k regex:hopper_bwd256 --launch-skip 1 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --metrics $metrics python3 scripts/hopper_ncu.py --backward --d 256 > $OUT/r/ncu_tiled.txt 2>&1
grep -E "Duration|hmma|red.sum|L2 Cache Throughput|Issued Warp|inst_executed" $OUT/r/ncu_tiled.txt
cd $OUT && tar czf r.tgz r && rm -rf r
