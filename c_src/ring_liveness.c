/* ring_liveness.c: peer liveness: a ring shared between processes must outlive any one of them.
 *
 * Hardware fact served: none of this is on a hot path. A waiter looks at its peers once per
 * LIVENESS_PERIOD_NS (reading /proc costs microseconds, a thousand handoffs), so a dead consumer
 * stops gating and a dead producer's claimed-but-unpublished slots are skipped (and counted) within
 * about that period, while the per-item paths never pay for it. The records sit on their own
 * 128-byte blocks, so heartbeats never disturb the lines the hot sequences live on.
 */
#include "ring_internal.h"

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* kill(pid, 0) says nothing about zombies (killed but not yet reaped), so /proc settles it. */
bool pid_alive(int64_t pid) {
    if (pid <= 0) return false;
    if (kill((pid_t)pid, 0) == -1 && errno == ESRCH) return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;  /* no /proc: trust kill() */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');  /* the command name may itself contain ") " */
    if (!paren || paren[1] != ' ') return true;
    return paren[2] != 'Z' && paren[2] != 'X';
}

/* ---- liveness ------------------------------------------------------------------------------------ */


bool any_consumer_dead(const sy_ring *r, uint64_t among) {
    uint64_t active = among & atomic_load_explicit(&r->header->registry.active_consumers, memory_order_acquire);
    for (; active; active &= active - 1) {
        int64_t pid = atomic_load_explicit(&r->header->consumers[__builtin_ctzll(active)].pid,
                                           memory_order_acquire);
        if (pid != 0 && !pid_alive(pid)) return true;
    }
    return false;
}


/* A dead leaf consumer stops gating: its record is freed as if it had closed, so producers go on
 * and a new consumer may join. A dead consumer that others run after stays: they get ClosedError
 * (what it did not pass on never comes), and once they leave it is a leaf and goes too. */
void reap_dead_consumers(sy_ring *r) {
    struct sy_ring_header *h = r->header;
    if (!any_consumer_dead(r, atomic_load_explicit(&h->registry.gating_consumers, memory_order_acquire))) return;
    if (registry_lock(r) != SY_OK) return;
    uint64_t active = atomic_load_explicit(&h->registry.active_consumers, memory_order_relaxed);
    uint64_t dead = 0;
    for (uint64_t leaves = leaves_of(h, active); leaves; leaves &= leaves - 1) {
        int i = __builtin_ctzll(leaves);
        int64_t pid = atomic_load_explicit(&h->consumers[i].pid, memory_order_relaxed);
        if (pid != 0 && !pid_alive(pid)) dead |= 1ull << i;
    }
    active &= ~dead;
    /* the order of sy_ring_consumer_close: gating set first, then the record */
    atomic_store_explicit(&h->registry.gating_consumers, leaves_of(h, active), memory_order_release);
    atomic_store_explicit(&h->registry.active_consumers, active, memory_order_release);
    for (; dead; dead &= dead - 1) {
        atomic_store_explicit(&h->consumers[__builtin_ctzll(dead)].pid, 0, memory_order_relaxed);
        atomic_store_explicit(&h->consumers[__builtin_ctzll(dead)].after_mask, 0, memory_order_relaxed);
    }
    registry_unlock(r);
}


/* Multi producer: is the hole at `want` (claimed, not published) a dead producer's? Only if no
 * live producer holds an open claim that may reach down to it and a dead one does. The cursor is
 * acquired first: a claim seen there comes with its producer's floor (the owner lane's, or the
 * shared lane's count and floor: each written before the claim's release RMW of the cursor). Then
 * the slot is marked skipped by compare-and-swap from the value seen before the check, so a publish
 * that lands meanwhile wins. */
bool abandon_dead_claim(sy_ring *r, int64_t want) {
    _Atomic int64_t *header = &slot_header(r, want)->published_plus_one;
    int64_t seen = atomic_load_explicit(header, memory_order_acquire);
    if (seen == want + 1) return false;
    if (seen == skipped_mark(want)) return true;
    if (atomic_load_explicit(r->cursor, memory_order_acquire) < want) return false;  /* not claimed */
    uint64_t dead_owners = 0;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        sy_producer_record *rec = &r->header->producers[i];
        int64_t pid = atomic_load_explicit(&rec->pid, memory_order_acquire);
        if (!pid) continue;
        /* either lane (see owner_claims in ring_sequencer.c) may hold a claim reaching down to want */
        bool shared_may_own = atomic_load_explicit(&rec->open_claims, memory_order_acquire) &&
                              atomic_load_explicit(&rec->claim_floor, memory_order_acquire) <= want;
        if (!shared_may_own && atomic_load_explicit(&rec->owner_floor, memory_order_acquire) > want) continue;
        /* A reclaimed record handed to a new producer while we read it: the fields above may be
         * the new one's (their stores are releases, after the reclaim), so the pid we hold would
         * not be theirs. Decide on a later look. */
        if (atomic_load_explicit(&rec->pid, memory_order_acquire) != pid) return false;
        if (pid_alive(pid)) return false;  /* a live producer may still publish it */
        dead_owners |= 1ull << i;
    }
    if (!dead_owners) return false;
    for (uint64_t d = dead_owners; d; d &= d - 1) mark_dead_cursor(r, &r->header->producers[__builtin_ctzll(d)]);
    return atomic_compare_exchange_strong_explicit(header, &seen, skipped_mark(want), memory_order_acq_rel,
                                                   memory_order_acquire) || seen == skipped_mark(want);
}

/* A producer seen dead with a claim open: the cursor now, read after its death was seen, is at
 * or above every sequence it claimed. Recorded once (the first look wins); returns it. Once every
 * consumer has passed it, every hole of that producer is behind them (skipped), and its record
 * goes (reclaim_dead_producers): without this, each such death kept one of the 64 records for
 * good. */
int64_t mark_dead_cursor(sy_ring *r, sy_producer_record *rec) {
    int64_t marked = atomic_load_explicit(&rec->dead_cursor_plus_one, memory_order_acquire);
    if (marked) return marked - 1;
    int64_t cursor = atomic_load_explicit(r->cursor, memory_order_acquire);
    if (atomic_compare_exchange_strong_explicit(&rec->dead_cursor_plus_one, &marked, cursor + 1,
                                                memory_order_acq_rel, memory_order_acquire))
        return cursor;
    return marked - 1;
}

/* Upstream consumers that left without closing (detached): frozen, they will release no more. */
static bool any_consumer_detached(const sy_ring *r, uint64_t among) {
    uint64_t active = among & atomic_load_explicit(&r->header->registry.active_consumers, memory_order_acquire);
    for (; active; active &= active - 1)
        if (atomic_load_explicit(&r->header->consumers[__builtin_ctzll(active)].pid, memory_order_acquire) == 0)
            return true;
    return false;
}

/* Once the stream is closed: is nothing left for a consumer that wants `want`? The producers publish
 * before closing, so a look at what THEY published cannot miss their final items. A consumer that
 * runs after others is not drained while they still hold published items for it, unless one of them
 * has detached and will never pass them on. */
bool stream_drained(const sy_ring *r, int64_t want, uint64_t upstream) {
    return highest_published(r, want) < want || any_consumer_detached(r, upstream);
}

int sy_ring_peers(const sy_ring *r, sy_ring_peer *out, int max_peers) {
    int n = 0;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS && n < max_peers; i++) {
        const sy_producer_record *p = &r->header->producers[i];
        int64_t pid = atomic_load_explicit(&p->pid, memory_order_acquire);
        if (!pid) continue;
        out[n++] = (sy_ring_peer){.kind = 0, .index = i, .pid = pid, .sequence = NO_SEQUENCE,
                                  .heartbeat_ns = atomic_load_explicit(&p->heartbeat_ns, memory_order_relaxed),
                                  .alive = pid_alive(pid)};
    }
    uint64_t active = atomic_load_explicit(&r->header->registry.active_consumers, memory_order_acquire);
    for (; active && n < max_peers; active &= active - 1) {
        int i = __builtin_ctzll(active);
        const sy_consumer_record *c = &r->header->consumers[i];
        int64_t pid = atomic_load_explicit(&c->pid, memory_order_acquire);
        out[n++] = (sy_ring_peer){.kind = 1, .index = i, .pid = pid,
                                  .heartbeat_ns = atomic_load_explicit(&c->heartbeat_ns, memory_order_relaxed),
                                  .sequence = atomic_load_explicit(consumer_sequence(r, i), memory_order_acquire),
                                  .after_mask = atomic_load_explicit(&c->after_mask, memory_order_relaxed),
                                  .alive = pid_alive(pid)};
    }
    return n;
}

/* ---- the registration lock ------------------------------------------------------------------------
 * Joining and leaving are rare, so a lock is fine there; the word holds the owner's pid so that a
 * process killed while holding it does not wedge every later registration. */

int registry_lock(sy_ring *r) {
    _Atomic int32_t *lock = &r->header->registry.lock_pid;
    int32_t me = (int32_t)getpid();
    int64_t give_up = (int64_t)sy_now_ns() + 5000000000ll;
    for (int spins = 0;; spins++) {
        int32_t owner = 0;
        if (atomic_compare_exchange_weak_explicit(lock, &owner, me, memory_order_acquire, memory_order_relaxed))
            return SY_OK;
        if (owner != 0 && (spins & 1023) == 1023 && !pid_alive(owner))
            atomic_compare_exchange_strong_explicit(lock, &owner, 0, memory_order_relaxed, memory_order_relaxed);
        if ((int64_t)sy_now_ns() > give_up) return SY_ETIMEDOUT;
        sched_yield();
    }
}

void registry_unlock(sy_ring *r) {
    atomic_store_explicit(&r->header->registry.lock_pid, 0, memory_order_release);
}
