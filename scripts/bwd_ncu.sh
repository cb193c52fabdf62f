#!/bin/sh
# Nsight Compute counters of the hopper backward and of cuDNN's backward on the same shape (bf16, N = 4096,
# B = 4, H * d = 2048, not causal), for docs/notes-attention-bwd.md. Usage: scripts/bwd_ncu.sh OUTDIR [D]
# Beside the tensor pipe and the instruction count: shared-memory wavefronts (wgmma's operand reads included) against
# their peak, and each stall reason per issued instruction (times the instructions issued: warp-cycles), which is what
# told the two kernels apart in session 2026-11-29c (MIO throttle 402 M against 60 M warp-cycles); last, our kernel's
# stalls per SASS instruction (scripts/ncu_source_summary.py), which located them in session 2026-11-29d.
out=$1; d=${2:-128}
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,lts__t_sectors_op_red.sum,smsp__inst_executed.sum
metrics=$metrics,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
metrics="$metrics,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
sections="--section SpeedOfLight --section WarpStateStats --section SchedulerStats"
ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 $sections --metrics "$metrics" \
    python3 scripts/hopper_ncu.py --backward --d "$d" > "$out/ncu_hopper_bwd_d$d.txt" 2>&1
# cuDNN's backward: every kernel of the script (the names vary by version; the report names each, and
# its backward kernel is the long one of the second call).
ncu --launch-count 30 $sections --metrics "$metrics" \
    python3 scripts/hopper_ncu.py --backward --cudnn --d "$d" > "$out/ncu_cudnn_bwd_d$d.txt" 2>&1
for f in "$out/ncu_hopper_bwd_d$d.txt" "$out/ncu_cudnn_bwd_d$d.txt"; do
    echo "== $f"
    grep -E "^  [a-zA-Z_].*\(|Duration|hmma|Issued Warp|Eligible Warps|No Eligible|Warp Cycles Per Issued|red.sum|inst_executed.sum|wavefronts|bank_conflicts|stalled|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput" "$f" | grep -v "^==" | head -80
done
# Where our backward's warps stall, instruction by instruction (PC sampling; the commands of session 2026-11-29d's
# calls 1 and 3): the source page as CSV (gzipped) and its summary. The report itself (~11 MB) stays in /tmp.
ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 --section SourceCounters --import-source no -f \
    -o "/tmp/bwd_src_d$d" python3 scripts/hopper_ncu.py --backward --d "$d" > /dev/null 2>&1
ncu -i "/tmp/bwd_src_d$d.ncu-rep" --page source --print-source sass --csv > "/tmp/bwd_sass_d$d.csv"
python3 scripts/ncu_source_summary.py "/tmp/bwd_sass_d$d.csv" 2000 > "$out/bwd_stalls_d$d.txt"
head -30 "$out/bwd_stalls_d$d.txt"
gzip -c "/tmp/bwd_sass_d$d.csv" > "$out/bwd_sass_d$d.csv.gz"
