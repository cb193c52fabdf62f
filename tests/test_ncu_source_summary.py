"""scripts/ncu_source_summary.py: the summary of ncu's PC-sampling source page (pure Python; the profile needs a GPU).

A page shaped as `ncu -i REPORT --page source --print-source sass --csv` writes it: row 0 names the kernel, row 1
the columns, then one row per SASS instruction. The summary must rank the reasons by their totals, list only the
instructions at or above the threshold (in address order), count per opcode with --by-opcode, and refuse a file
that is not such a page with a message instead of a traceback.
"""
import csv
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "ncu_source_summary.py"
COLUMNS = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
           "Instructions Executed", "stall_barrier", "stall_long_sb", "stall_short_sb", "stall_wait",
           "stall_barrier (Not Issued)"]
ROWS = [  # address, instruction, samples, executed, barrier, long_sb, short_sb, wait
    ("0x7fc0df7b7f00", "LDS.64 R14, [R8+0x30020]", 130, 1024, 0, 0, 0, 60),
    ("0x7fc0df7b7f10", "WARPGROUP.DEPBAR.LE gsb0, 0x1", 13645, 1024, 13564, 0, 0, 17),
    ("0x7fc0df7b7f20", "FFMA R19, R188, R2, -R14", 11600, 1024, 0, 0, 11524, 0),
    ("0x7fc0df7b7f30", "@!P0 BRA 0x7fc0df7b7f00", 900, 1056, 0, 880, 0, 9),
    ("0x7fc0df7b7f40", "FFMA R20, R189, R2, -R15", 58, 1024, 0, 0, 0, 3),
]


def page(tmp_path) -> Path:
    path = tmp_path / "page.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "void hopper_bwd_kernel<...>(...)"])
        w.writerow(COLUMNS)
        for addr, src, samples, executed, barrier, long_sb, short_sb, wait in ROWS:
            w.writerow([addr, src, samples, samples, executed, barrier, long_sb, short_sb, wait, barrier])
    return path


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_reasons_are_ranked_and_instructions_filtered_in_address_order(tmp_path):
    out = run(page(tmp_path), 800)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("void hopper_bwd_kernel")
    assert "samples 26333" in lines[1]
    # barrier 13564 > short_sb 11524 > long_sb 880 > wait 89; the "(Not Issued)" column is not a reason of its own
    ranked = [line.split()[0] for line in lines[2:6]]
    assert ranked == ["stall_barrier", "stall_short_sb", "stall_long_sb", "stall_wait"]
    assert not any("Not Issued" in line for line in lines)
    listed = lines[lines.index(next(line for line in lines if line.startswith("-- in address order"))) + 1:]
    assert [line.split()[1] for line in listed] == ["b7f10", "b7f20", "b7f30"]   # >= 800 samples, address order
    assert "barrier:13564" in listed[0] and "short_sb:11524" in listed[1]


def test_by_opcode_sums_predicated_instructions_under_their_opcode(tmp_path):
    out = run(page(tmp_path), "--by-opcode")
    assert out.returncode == 0, out.stderr
    per_op = {line.split()[0]: line for line in out.stdout.splitlines() if line.startswith("  ") and "(" in line}
    assert "11658" in per_op["FFMA"] and "executed        2048" in per_op["FFMA"]
    assert "BRA" in per_op and "@!P0" not in per_op   # the predicate is not an opcode


def test_a_file_that_is_not_a_source_page_is_refused_with_a_message(tmp_path):
    bad = tmp_path / "other.csv"
    bad.write_text("a,b\n1,2\n")
    out = run(bad)
    assert out.returncode != 0
    assert "not an ncu source page" in out.stderr and "Traceback" not in out.stderr
