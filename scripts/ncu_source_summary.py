"""Where in the SASS a kernel's warps stall: a summary of Nsight Compute's PC sampling (the SourceCounters section).

Profile one kernel with the section, print its source page as CSV, then summarise it (on the GPU machine: the report
and the CSV are large, the summary is not):

    ncu -k regex:hopper_bwd --launch-skip 1 --launch-count 1 --section SourceCounters --import-source no \\
        -o /tmp/bwd python3 scripts/hopper_ncu.py --backward --d 128
    ncu -i /tmp/bwd.ncu-rep --page source --print-source sass --csv > /tmp/bwd_sass.csv
    python3 scripts/ncu_source_summary.py /tmp/bwd_sass.csv 1000          # instructions with >= 1000 samples
    python3 scripts/ncu_source_summary.py /tmp/bwd_sass.csv --by-opcode   # samples per opcode instead

Prints the stall reasons' totals, then every instruction with at least MIN samples in address order with its three
largest reasons and its execution count (a loop's instructions share one count, which shows the loop's shape).
A stall is sampled at the instruction that waits to issue: a barrier's wait shows on the instruction after BAR.SYNC,
a WARPGROUP.DEPBAR's on itself. Session 2026-11-29d (docs/notes-attention-bwd.md) found the backward's LSE loads and
dQ share this way.
"""
import argparse
import collections
import csv
import sys

TOTAL = "Warp Stall Sampling (All Samples)"


def load(path):
    rows = list(csv.reader(open(path, newline="")))
    # Row 0 names the kernel, row 1 the columns; a file without both is not a source page.
    if len(rows) < 3 or TOTAL not in rows[1]:
        sys.exit(f"{path}: not an ncu source page with PC sampling "
                 "(ncu --section SourceCounters ... --page source --csv)")
    return rows[0], rows[1], rows[2:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu -i REPORT --page source --print-source sass --csv > FILE")
    ap.add_argument("min", nargs="?", type=int, default=300, help="list instructions with at least this many samples")
    ap.add_argument("--by-opcode", action="store_true", help="samples and 'wait' stalls per opcode instead")
    args = ap.parse_args()
    kernel, header, data = load(args.csv)
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def value(row, name):
        try:
            return float(row[col[name]] or 0)
        except (ValueError, IndexError):
            return 0.0

    total = sum(value(r, TOTAL) for r in data) or 1.0
    print(kernel[1][:200] if len(kernel) > 1 else kernel)
    print(f"instructions {len(data)}, samples {total:.0f}")
    for reason in sorted(reasons, key=lambda h: -sum(value(r, h) for r in data))[:10]:
        v = sum(value(r, reason) for r in data)
        print(f"  {reason:28s} {v:9.0f} {100 * v / total:5.1f} %")
    if args.by_opcode:
        samples, waits, executed = collections.Counter(), collections.Counter(), collections.Counter()
        for r in data:
            words = r[col["Source"]].split()
            if not words:
                continue
            op = (words[1] if words[0].startswith("@") and len(words) > 1 else words[0]).split(".")[0]
            samples[op] += value(r, TOTAL)
            waits[op] += value(r, "stall_wait")
            executed[op] += value(r, "Instructions Executed")
        print("-- per opcode: samples (share), of them 'wait', warp instructions executed")
        for op, v in samples.most_common(20):
            print(f"  {op:12s} {v:8.0f} ({100 * v / total:4.1f} %) wait {waits[op]:7.0f} executed {executed[op]:11.0f}")
        return 0
    print(f"-- in address order, >= {args.min} samples: address, instruction, samples, top reasons, executed")
    for n, r in enumerate(data):
        s = value(r, TOTAL)
        if s < args.min:
            continue
        top = sorted(((value(r, h), h[len("stall_"):]) for h in reasons), reverse=True)[:3]
        reasons_text = " ".join(f"{h}:{v:.0f}" for v, h in top if v > 0)
        print(f"{n:5d} {r[col['Address']][-5:]} {r[col['Source']][:64]:64s} {s:7.0f} {reasons_text} "
              f"{r[col['Instructions Executed']]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
