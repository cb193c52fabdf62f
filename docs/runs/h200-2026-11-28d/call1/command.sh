# call 1: verify 017ed5c (GPU suite, backward check), baseline timings, ncu of the d = 256 backward and the N = 1024 forward
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/base PYTHONUNBUFFERED=1
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/r/gpu.txt
( time python3 -m pytest -m gpu -q -p no:cacheprovider tests ) > $OUT/r/suite.txt 2>&1; tail -4 $OUT/r/suite.txt
python3 scripts/bwd_device.py --only-hopper --sizes 2048 > $OUT/r/bwdcheck.txt 2>&1; tail -25 $OUT/r/bwdcheck.txt
python3 scripts/bwd256_device.py --skip-tests --sizes 2048 4096 8192 --skip flash ours-det ours-mma ours-atomic math > $OUT/r/bwd256.txt 2>&1; tail -12 $OUT/r/bwd256.txt
python3 scripts/hopper_check.py --sizes 1024 4096 --kernels sdpa-cudnn hopper --repeat 2 --no-check > $OUT/r/fwd.txt 2>&1; tail -12 $OUT/r/fwd.txt
ncu -k regex:hopper_bwd256 --launch-skip 1 --launch-count 1 --set full --import-source yes -o $OUT/r/d256 python3 scripts/hopper_ncu.py --backward --d 256 > $OUT/r/ncu_d256_log.txt 2>&1
ncu -i $OUT/r/d256.ncu-rep --page source --csv --print-source sass > $OUT/r/d256_sass.csv 2>&1
ncu -i $OUT/r/d256.ncu-rep > $OUT/r/d256_details.txt 2>&1
sh scripts/bwd_ncu.sh $OUT/r 256 > $OUT/r/bwd_ncu_256_summary.txt 2>&1
ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 --set full --import-source yes -o $OUT/r/f1024 python3 scripts/hopper_ncu.py --n 1024 > $OUT/r/ncu_f1024_log.txt 2>&1
ncu -i $OUT/r/f1024.ncu-rep > $OUT/r/f1024_details.txt 2>&1
ncu -i $OUT/r/f1024.ncu-rep --page source --csv --print-source sass > $OUT/r/f1024_sass.csv 2>&1
ls -la $OUT/r; cd $OUT && tar czf r.tgz r && rm -rf r
