# call 1: verify 88ca152 (GPU suite, backward checks incl. d = 256 B = 3), then the 3-consumer d = 128 forward (64-key blocks) A/B for dropout
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
lib() { ls $PWD/.xfer/ab/$1/cuda/*.so; }
( time SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/cur timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider tests ) > $R/suite.txt 2>&1; tail -4 $R/suite.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/cur timeout 120 python3 scripts/bwd_device.py --only-hopper --sizes 2048 > $R/bwdcheck.txt 2>&1; tail -6 $R/bwdcheck.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/cur timeout 120 python3 scripts/bwd256_device.py --sizes 2048 --skip flash ours-det ours-mma ours-atomic math > $R/bwd256.txt 2>&1; tail -8 $R/bwd256.txt
( SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/w3s2 timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -k "not mask" tests/test_attention_gpu.py tests/test_attention_dropout.py tests/test_attention_dropout_window.py ) > $R/w3s2_tests.txt 2>&1; tail -3 $R/w3s2_tests.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/cur timeout 200 python3 scripts/dropout_check.py --sizes 4096 --dims 128 --skip-sdpa --rounds 3 --lib cur=$(lib cur) --lib w3s2=$(lib w3s2) --lib w3s3=$(lib w3s3) --train-libs cur w3s2 --out $R > $R/dropout_ab.txt 2>&1; tail -30 $R/dropout_ab.txt
cd $OUT && tar czf r.tgz r && rm -rf r
