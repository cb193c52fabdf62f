# call 5: P dropped by a bf16x2 multiply with 1.0 / 0.0 (ve) instead of an AND, against main (cur)
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
lib() { ls $PWD/.xfer/ab/$1/cuda/*.so; }
( SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/ve timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_dropout.py tests/test_attention_dropout_window.py tests/test_attention_dropout_mask.py tests/test_attention_gpu.py ) > $R/ve_tests.txt 2>&1; tail -3 $R/ve_tests.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/ve timeout 330 python3 scripts/dropout_check.py --sizes 4096 16384 --dims 64 128 --skip-sdpa --rounds 3 --lib cur=$(lib cur) --lib ve=$(lib ve) --train-libs cur ve --train-dims 128 64 --out $R > $R/dropout_ab.txt 2>&1; grep "fwd |" $R/dropout_ab.txt | grep -v "p=0.0"
cd $OUT && tar czf r.tgz r && rm -rf r
