# call 4: the final library's d = 256 check, and its two schedule levers measured again under the tile-major adds
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
mkdir -p $OUT/r
A=$PWD/.xfer/ab
SYMPATHY_CACHE_DIR=$A/final python3 scripts/bwd256_device.py --sizes 2048 --skip flash ours-det ours-mma ours-atomic math > $OUT/r/check_final.txt 2>&1; grep -E "passed|failed|worst|BAD" $OUT/r/check_final.txt | head -5
for run in 1 2; do for v in final pahead0 lpt0; do
  echo "== $v run $run"
  SYMPATHY_CACHE_DIR=$A/$v python3 scripts/bwd256_device.py --skip-check --skip-tests --sizes 2048 4096 8192 --skip flash ours-det ours-mma ours-atomic math > $OUT/r/t_${v}_$run.txt 2>&1; grep -A8 "N causal" $OUT/r/t_${v}_$run.txt
done; done
cd $OUT && tar czf r.tgz r && rm -rf r
