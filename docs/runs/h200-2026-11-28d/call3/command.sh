# call 3: fp16 d = 64 tile-major adds (t2 = the candidate), the d = 128 / bf16 d = 64 tile-major adds as variants
# (t2q: SY_HOPPER_BWD_DQ_TMA=2, t2q3: and 3 stages at d = 128) against `tiled` (main at 6302c97)
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
key=$(python3 -c "import sys; sys.path.insert(0,'.'); from sympathy.attention import cuda_build as c; print(c._source_key('sm_90a', c.find_nvcc()))")
for f in .xfer/ab/tiled/cuda/*.so; do mv $f .xfer/ab/tiled/cuda/attention_sm_90a_$key.so; done
ls .xfer/ab/*/cuda/
A=$PWD/.xfer/ab
SYMPATHY_CACHE_DIR=$A/t2 python3 scripts/bwd_device.py --only-hopper --sizes 2048 > $OUT/r/check_t2.txt 2>&1; grep -E "correctness|BAD|check|hopper/cudnn" -A5 $OUT/r/check_t2.txt | head -20
SYMPATHY_CACHE_DIR=$A/t2 python3 -m pytest -m gpu -q -p no:cacheprovider tests > $OUT/r/suite_t2.txt 2>&1; tail -2 $OUT/r/suite_t2.txt
SYMPATHY_CACHE_DIR=$A/t2q3 python3 scripts/bwd_device.py --only-hopper --sizes 2048 > $OUT/r/check_t2q3.txt 2>&1; grep -E "correctness|BAD" $OUT/r/check_t2q3.txt | head -8
for run in 1 2; do for v in tiled t2q t2q3; do
  echo "== bf16 $v run $run"
  SYMPATHY_CACHE_DIR=$A/$v python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 8192 > $OUT/r/bf16_${v}_$run.txt 2>&1; grep -A20 "^fwd+bwd" $OUT/r/bf16_${v}_$run.txt | cut -c1-20,45-85,120-
done; done
for run in 1 2; do for v in tiled t2; do
  echo "== fp16 d64 $v run $run"
  SYMPATHY_CACHE_DIR=$A/$v python3 scripts/bwd_device.py --only-hopper --skip-check --sizes 2048 4096 8192 --dims 64 --dtype fp16 > $OUT/r/fp16_${v}_$run.txt 2>&1; grep -A20 "^fwd+bwd" $OUT/r/fp16_${v}_$run.txt | cut -c1-20,45-85,120-
done; done
SYMPATHY_CACHE_DIR=$A/t2 timeout 240 python3 -m sympathy.cli demo attention_train > $OUT/r/train_t2.txt 2>&1; tail -6 $OUT/r/train_t2.txt
cd $OUT && tar czf r.tgz r && rm -rf r
