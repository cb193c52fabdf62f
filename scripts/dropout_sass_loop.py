"""Instructions a Philox call in the hopper forward's key-block loop (docs/notes-dropout.md, session philox20).

    python3 scripts/dropout_sass_loop.py OBJ_OR_LIB [BASE_OBJ_OR_LIB]    # needs cuobjdump (the CUDA toolkit)

For each dropout kernel of hopper_fwd_kernel (mode & 8) the loop of unmasked key blocks (the first backward
branch whose body holds the HGMMAs and at least 32 MUFU.EX2) is counted without the blocks that a short
forward branch skips when they hold integer compare code only (bytes_to_drop_bits: p >= 0.5, cold), less the
same loop of the kernel's no-dropout mode (mode & ~8; kBandMask 11 against 3), over its 4 Philox calls a
thread. With BASE, the base object's figure beside each. The opcode lines are the difference by opcode.
"""
import collections
import re
import subprocess
import sys


def kernels(path):
    text = subprocess.run(["cuobjdump", "-sass", path], capture_output=True, text=True, check=True).stdout
    out = {}
    for f in re.split(r"\n\s*Function : ", text)[1:]:
        m = re.search(r"HopperTraitsILi(\d+)ELi(\d+)ELi(\d)ELi(\d)ELb\dEEE(\d+__\w+?)Li(\d+)EE", f.split("\n", 1)[0])
        if not m:
            continue
        key = (f"d{m.group(1)} n{m.group(2)} st{m.group(3)} wg{m.group(4)} {'bf16' if 'bfloat' in m.group(5) else 'fp16'}",
               int(m.group(6)))
        out[key] = [(int(a, 16), s.strip()) for a, s in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", f)]
    return out


def opcode(s):
    return re.sub(r"^@!?U?P\w+\s+", "", s).split()[0]


def step_loop(ins):
    for a, s in ins:
        m = re.search(r"BRA\s+(0x[0-9a-f]+)", s)
        if m and int(m.group(1), 16) < a:
            body = [x for x in ins if int(m.group(1), 16) <= x[0] <= a]
            ops = [opcode(s) for _, s in body]
            if any(o.startswith("HGMMA") for o in ops) and ops.count("MUFU.EX2") >= 32:
                return body
    raise ValueError("no key-block loop found")


def hot(body):
    out, skip = [], None
    for a, s in body:
        if skip is not None and a < skip:
            continue
        skip = None
        m = re.match(r"@P\d BRA (0x[0-9a-f]+)", s)
        if m and 0 < int(m.group(1), 16) - a < 0x800:
            block = [x for x in body if a < x[0] < int(m.group(1), 16)]
            if block and all(re.search(r"LOP3|VIADD|IMAD.IADD|IADD3", x[1]) for x in block):
                skip = int(m.group(1), 16)
                continue
        out.append((a, s))
    return out


def per_call(table, key):
    shape, mode = key
    plain = step_loop(table[(shape, 3 if mode == 11 else mode & ~8)])
    loop = hot(step_loop(table[key]))
    diff = collections.Counter(opcode(s) for _, s in loop)
    diff.subtract(collections.Counter(opcode(s) for _, s in plain))
    return (len(loop) - len(plain)) / 4, len(plain), len(loop), diff


def main():
    new = kernels(sys.argv[1])
    base = kernels(sys.argv[2]) if len(sys.argv) > 2 else None
    for key in sorted(k for k in new if k[1] & 8):
        if (key[0], 3 if key[1] == 11 else key[1] & ~8) not in new:
            print(f"{key[0]} mode {key[1]}: its no-dropout mode is not in {sys.argv[1]} (a whole build has it)")
            continue
        call, plain, loop, diff = per_call(new, key)
        line = f"{key[0]} mode {key[1]}: loop {loop} (no dropout {plain}), {call:.2f} a call"
        if base and key in base:
            b_call, _, b_loop, b_diff = per_call(base, key)
            line += f"; base loop {b_loop}, {b_call:.2f} a call"
            diff.subtract(b_diff)
            line += "; against base: " + ", ".join(f"{o} {n:+d}" for o, n in sorted(diff.items()) if n)
        print(line)


if __name__ == "__main__":
    main()
