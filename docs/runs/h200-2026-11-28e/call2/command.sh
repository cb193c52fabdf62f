# call 2: dropout keep bits drawn while waiting for S (SY_HOPPER_DROPOUT_DRAW_BEFORE_S=1) against main's placement
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
lib() { ls $PWD/.xfer/ab/$1/cuda/*.so; }
( SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/dbs timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_dropout.py tests/test_attention_dropout_window.py tests/test_attention_dropout_mask.py ) > $R/dbs_tests.txt 2>&1; tail -3 $R/dbs_tests.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/dbs timeout 300 python3 scripts/dropout_check.py --sizes 4096 16384 --dims 128 --skip-sdpa --rounds 3 --lib cur=$(lib cur) --lib dbs=$(lib dbs) --train-libs cur dbs --out $R > $R/dropout_ab.txt 2>&1; tail -30 $R/dropout_ab.txt
cd $OUT && tar czf r.tgz r && rm -rf r
