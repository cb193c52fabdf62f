"""SASS of the d = 256 wgmma backward's consumer loops (attention_hopper_bwd256.cu, notes session d256o.2).

Usage: python3 scripts/bwd256_sass_loops.py OBJECT [CUOBJDUMP]
  OBJECT: the file compiled alone, e.g. nvcc -std=c++17 -O3 -lineinfo -Xcompiler -fPIC
  -gencode arch=compute_90a,code=sm_90a -Icuda_src -c cuda_src/attention_hopper_bwd256.cu -o /tmp/b256.o

For each hopper_bwd256_kernel the two consumer loops (the first two backward branches whose body holds an HGMMA:
the dS warpgroup's, then the P warpgroup's; a causal kernel's loop holds the masked and the unmasked tile bodies):
instructions between the loop's label and its back-branch, a warp and (query) tile, and the counts of a few kinds.
"""
import re
import subprocess
import sys

obj = sys.argv[1]
tool = sys.argv[2] if len(sys.argv) > 2 else "cuobjdump"
text = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, check=True).stdout
for func in re.split(r"\n\s*Function : ", text)[1:]:
    name = func.split("\n", 1)[0].strip()
    if "hopper_bwd256_kernel" not in name:
        continue
    ins = [(int(m.group(1), 16), m.group(2).strip())
           for m in (re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line) for line in func.split("\n")) if m]
    index = {a: i for i, (a, _) in enumerate(ins)}
    kind = re.search(r"kernelI(\w+?)Li(\d)E", name)
    found = 0
    for i, (a, s) in enumerate(ins):
        t = re.search(r"BRA\s.*?0x([0-9a-f]+)", s)
        if not t or int(t.group(1), 16) >= a or int(t.group(1), 16) not in index:
            continue
        ops = [re.sub(r"^@!?U?P\w+\s+", "", x).split()[0] for _, x in ins[index[int(t.group(1), 16)]:i + 1]]
        if not any(o.startswith("HGMMA") for o in ops):
            continue
        count = lambda *p: sum(1 for o in ops if o.startswith(p))
        role = ("dS", "P")[found]
        print(f"{kind.group(1)} band {kind.group(2)} {role:>2}: {len(ops)} instructions, HGMMA {count('HGMMA')}, "
              f"R2UR {count('R2UR')}, LDS {count('LDS')}, STS/STSM {count('STS')}, LD/ST {count('LD.', 'ST.')}, "
              f"MUFU.EX2 {count('MUFU.EX2')}, RED {count('RED')}, BAR {count('BAR')}")
        found += 1
        if found == 2:
            break
