# call 4: the softmax scale in a vector register (vc) and the round keys from shared memory too (vd), against main (cur)
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
lib() { ls $PWD/.xfer/ab/$1/cuda/*.so; }
( SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/vc timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_attention_dropout.py tests/test_attention_dropout_window.py tests/test_attention_dropout_mask.py tests/test_attention_gpu.py ) > $R/vc_tests.txt 2>&1; tail -3 $R/vc_tests.txt
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/vc timeout 330 python3 scripts/dropout_check.py --sizes 4096 16384 --dims 64 128 --skip-sdpa --rounds 3 --lib cur=$(lib cur) --lib vc=$(lib vc) --lib vd=$(lib vd) --train-libs cur vc --train-dims 128 --out $R > $R/dropout_ab.txt 2>&1; grep "fwd |" $R/dropout_ab.txt | grep -v "p=0.0"
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/vc timeout 120 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 --set full -o $R/vc_p0.1 python3 scripts/hopper_ncu.py --dropout 0.1 > $R/ncu_log.txt 2>&1
ncu -i $R/vc_p0.1.ncu-rep --page raw --csv > $R/raw_vc_p0.1.csv 2>&1; ncu -i $R/vc_p0.1.ncu-rep > $R/details_vc_p0.1.txt 2>&1; rm -f $R/vc_p0.1.ncu-rep
grep -E "Duration" $R/details_vc_p0.1.txt
cd $OUT && tar czf r.tgz r && rm -rf r
