# call 6: ve (P dropped by a bf16x2 multiply) against main again, forward only, 5 rounds
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
lib() { ls $PWD/.xfer/ab/$1/cuda/*.so; }
SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/cur timeout 150 python3 scripts/dropout_check.py --sizes 4096 16384 --dims 128 --skip-sdpa --fwd-only --rounds 5 --lib cur=$(lib cur) --lib ve=$(lib ve) --out $R > $R/dropout_ab.txt 2>&1; grep "fwd |" $R/dropout_ab.txt
cd $OUT && tar czf r.tgz r && rm -rf r
