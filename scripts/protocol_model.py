"""An explicit-state model checker for the block protocols of the hopper backward kernels (bwd256_protocol.py,
bwd_dq_protocol.py): each role of a block (producer, consumer warpgroups, dQ warp) is a program of ops, and every
interleaving of those programs is explored. A script supplies its programs and a step function; this module holds
the search and the named-barrier rule they share.

Named barriers on the GPU count arriving threads, not phases: a party arriving twice before another arrived once
pushes the count past the barrier's thread count, which the hardware does not catch (session 2026-11-29d's failed
launch). `barrier` therefore raises on a second arrival of one party within a phase.
"""


class Violation(Exception):
    pass


def barrier(kind, actor, party, name, members, bars, waiting):
    """Named barrier `name` met by the parties in `members`: `kind` "arrive" or "sync" of `actor` on behalf of `party`
    (itself, or a warp standing in for another role). bars: name -> (phase, parties arrived); waiting: actor -> the
    phase its sync arrived in. Returns True (done), None (arrived; the sync waits for the phase) or False (waits on)."""
    phase, arrived = bars.get(name, (0, frozenset()))
    if actor in waiting:
        if phase > waiting[actor]:
            del waiting[actor]
            return True
        return False
    if party in arrived:
        raise Violation(f"actor {party} arrives twice on barrier {name} in phase {phase}")
    arrived = arrived | {party}
    bars[name] = (phase + 1, frozenset()) if arrived == members else (phase, arrived)
    if kind == "sync" and bars[name][0] == phase:
        waiting[actor] = phase
        return None
    return True


def explore(progs, step, parts):
    """Every interleaving of the programs in progs (one list of ops per actor). step(op, actor, *dicts) applies op to
    `parts` dicts of state (changed in place) and returns True (op done), None (op started, stays current) or False
    (the actor must wait). Raises Violation on a deadlock or on what step raises; returns the states seen."""
    start = (tuple(0 for _ in progs),) + ((),) * parts
    seen, todo = set(), [start]
    while todo:
        state = todo.pop()
        if state in seen:
            continue
        seen.add(state)
        pcs = state[0]
        moved = False
        for actor, prog in enumerate(progs):
            if pcs[actor] == len(prog):
                continue
            dicts = [dict(items) for items in state[1:]]
            result = step(prog[pcs[actor]], actor, *dicts)
            if result is False:
                continue
            moved = True
            npcs = list(pcs)
            npcs[actor] += result is True
            todo.append((tuple(npcs),) + tuple(tuple(sorted(d.items())) for d in dicts))
        if not moved and any(pc < len(prog) for pc, prog in zip(pcs, progs)):
            stuck = [prog[pc] if pc < len(prog) else "done" for pc, prog in zip(pcs, progs)]
            raise Violation(f"deadlock at {stuck}")
    return len(seen)


def check_all(cases, run):
    """Print run(case)'s state count for each (label, case), or the violation; 0 if none was found, else 1."""
    ok = True
    for label, case in cases:
        try:
            print(f"{label}: {run(case)} states, ok")
        except Violation as exc:
            print(f"{label}: VIOLATION {exc}")
            ok = False
    return 0 if ok else 1
