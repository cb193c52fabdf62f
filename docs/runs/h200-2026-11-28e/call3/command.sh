# call 3: ncu of the d = 128 forward with and without dropout 0.1 (bf16, N = 4096, not causal): pipes, issue, stalls per instruction
. .device/bootstrap.sh >/dev/null 2>&1 || { echo bootstrap failed; exit 1; }
python3 scripts/prebuild_variant.py --unpack .xfer/ab
export PYTHONUNBUFFERED=1 SYMPATHY_CACHE_DIR=$PWD/.xfer/ab/cur
R=$OUT/r; mkdir -p $R
for P in 0 0.1; do
  timeout 200 ncu -k regex:hopper_fwd --launch-skip 1 --launch-count 1 --set full --import-source yes -o $R/fwd_p$P python3 scripts/hopper_ncu.py --dropout $P > $R/ncu_log_p$P.txt 2>&1
  ncu -i $R/fwd_p$P.ncu-rep > $R/details_p$P.txt 2>&1
  ncu -i $R/fwd_p$P.ncu-rep --page raw --csv > $R/raw_p$P.csv 2>&1
  ncu -i $R/fwd_p$P.ncu-rep --page source --csv --print-source sass > $R/sass_p$P.csv 2>&1
  rm -f $R/fwd_p$P.ncu-rep
done
grep -E "Duration|Issue Slots Busy|Executed Ipc|Tensor|Pipe" $R/details_p*.txt | head -40
cd $OUT && tar czf r.tgz r && rm -rf r
