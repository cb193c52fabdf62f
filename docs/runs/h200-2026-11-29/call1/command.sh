# call 1: dropout's keep bits drawn by warps 1-3 of the producer warpgroup (draw, SY_HOPPER_DRAW_WARPS=1) against
# the consumers drawing them (base, =0: main's kernels); the dropout GPU tests on the draw build first
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
lib() { ls $PWD/.xfer/ab/$1/cuda/*.so; }
( SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/draw timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_dropout.py tests/test_attention_dropout_window.py tests/test_attention_dropout_mask.py ) > $R/draw_tests.txt 2>&1; tail -3 $R/draw_tests.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/draw timeout 300 python3 scripts/dropout_check.py --sizes 4096 16384 --dims 128 --skip-sdpa --rounds 3 --lib base=$(lib base) --lib draw=$(lib draw) --train-libs base draw --out $R > $R/dropout_ab.txt 2>&1; tail -40 $R/dropout_ab.txt
cd $OUT && tar czf r.tgz r && rm -rf r
