#!/bin/sh
# SASS evidence for the hopper kernel: instruction counts per kernel and the bf16 d=128 kernel's
# listing. Usage: scripts/hopper_sass.sh LIBRARY.so OUTDIR   (needs cuobjdump: the CUDA toolkit)
set -e
lib=$1; out=$2
cuobjdump --dump-sass "$lib" > "$out/sass_all.txt"
python3 - "$out/sass_all.txt" "$out" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
funcs = re.split(r"\n\s*Function : ", text)
keep = []
for f in funcs[1:]:
    name = f.split("\n", 1)[0].strip()
    if "hopper_fwd_kernel" not in name:
        continue
    ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", f)
    count = lambda p: sum(1 for o in ops if o.startswith(p))
    print(f"{name[:120]}: {len(ops)} instructions, HGMMA {count('HGMMA')}, UTMALDG {count('UTMALDG')}, "
          f"SYNCS {count('SYNCS')}, USETMAXREG {count('USETMAXREG')}, WARPGROUP {count('WARPGROUP')}, "
          f"BAR {count('BAR')}, MUFU.EX2 {count('MUFU.EX2')}, LDL {count('LDL')}, STL {count('STL')}")
    if "ILi128ELi128E" in name and "bfloat16Lb0" in name:
        keep.append(f)
open(sys.argv[2] + "/sass_hopper_bf16_d128.txt", "w").write("\n".join(keep))
PY
rm "$out/sass_all.txt"
