/* ring_work_pool.c: the work pool under sympathy.Queue: its settings, waiting, the liveness of its
 * workers and producers, and the shared counts (qsize, task_done, join). Records themselves are put
 * and taken in ring_work_records.c; the layout is in ring_work_internal.h.
 *
 * Hardware fact served: a waiter that spins holds a core the peer it waits for may need (threads
 * outnumber cores in a pool), so waits spin briefly, then yield, then sleep on the ring's futex
 * word, and look for dead peers only every LIVENESS_PERIOD_NS of waiting, never on the hot path.
 */
#include "ring_work_internal.h"

#include <sched.h>

int64_t sy_queue_max_record(const sy_ring *r) { return ring_capacity(r) * r->slot_size - RECORD_PREFIX_BYTES; }

int sy_queue_init(sy_ring *r, int64_t maxsize, int joinable) {
    sy_work_pool *pool = work_pool(r);
    if (maxsize < 0 || r->producer_kind != SY_RING_MULTI_PRODUCER || r->slot_size < RECORD_PREFIX_BYTES ||
        atomic_load_explicit(&pool->magic, memory_order_acquire) != 0)
        return SY_EINVAL;
    pool->maxsize = maxsize;
    pool->joinable = joinable != 0;
    atomic_store_explicit(&pool->work.sequence, NO_SEQUENCE, memory_order_relaxed);
    for (int i = 0; i < SY_RING_MAX_CONSUMERS; i++)
        atomic_store_explicit(&pool->gates[i].after, GATE_IDLE, memory_order_relaxed);
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++)
        atomic_store_explicit(&pool->intents[i].lo, NO_INTENT, memory_order_relaxed);
    /* release: whoever sees the magic sees the fields above */
    atomic_store_explicit(&pool->magic, POOL_MAGIC, memory_order_release);
    return SY_OK;
}

int sy_queue_check(const sy_ring *r, int64_t *maxsize, int *joinable) {
    const sy_work_pool *pool = work_pool(r);
    if (atomic_load_explicit(&pool->magic, memory_order_acquire) != POOL_MAGIC) return SY_EINVAL;
    if (pool->maxsize < 0 || r->producer_kind != SY_RING_MULTI_PRODUCER || r->slot_size < RECORD_PREFIX_BYTES)
        return SY_EINVAL;
    *maxsize = pool->maxsize;
    *joinable = pool->joinable;
    return SY_OK;
}


/* ---- waiting: spin, yield, then sleep on the ring's futex word (threads outnumber cores) ---- */

/* One step of waiting. SY_OK: look again (*liveness_due: first look for dead peers); SY_ETIMEDOUT. */
int pool_nap(struct pool_wait *pw, bool (*ready)(void *), void *ctx, bool *liveness_due) {
    enum { SPIN_PHASE = 64, YIELD_PHASE = SPIN_PHASE + 16 };
    *liveness_due = false;
    if (pw->once) return SY_ETIMEDOUT;
    int spins = pw->spins++;
    if (spins < SPIN_PHASE) {
        sy_cpu_relax();
        return SY_OK;
    }
    int64_t now = (int64_t)sy_now_ns();
    if (pw->next_liveness_ns == 0) pw->next_liveness_ns = now + LIVENESS_PERIOD_NS;
    if (now >= pw->next_liveness_ns) {
        pw->next_liveness_ns = now + LIVENESS_PERIOD_NS;
        *liveness_due = true;
        return SY_OK;
    }
    if (now >= pw->deadline_ns) return SY_ETIMEDOUT;
    if (spins < YIELD_PHASE) {
        sched_yield();
        return SY_OK;
    }
    sy_ring_wake *wake = &pw->ring->header->wake;
    uint32_t seen = atomic_fetch_or_explicit(&wake->word, WAKE_SLEEPER, memory_order_relaxed) | WAKE_SLEEPER;
    atomic_thread_fence(memory_order_seq_cst); /* StoreLoad: the sleeper bit before the re-check */
    if (ready(ctx)) return SY_OK;
    int64_t nap = pw->next_liveness_ns - now;
    if (pw->deadline_ns - now < nap) nap = pw->deadline_ns - now;
    futex_wait(&wake->word, seen, nap, pw->ring->futex_op_flags);
    return SY_OK;
}

/* ---- liveness: dead workers and dead producers ---- */

/* A dead worker's gate: its record (if the mark names it) is lost; the gate is opened either way. */
void release_dead_gate(sy_ring *r, sy_work_pool *pool, int worker, int64_t gate) {
    int64_t s = gate + 1;
    /* read while the gate still holds the slot; only the winner of the CAS below acts on it */
    int64_t mark = atomic_load_explicit(&slot_header(r, s)->published_plus_one, memory_order_acquire);
    int64_t bytes = prefix_bytes(r, s);
    if (!atomic_compare_exchange_strong_explicit(&pool->gates[worker].after, &gate, GATE_IDLE,
                                                 memory_order_acq_rel, memory_order_relaxed))
        return;
    if (mark == taken_mark(s, worker)) {
        atomic_fetch_add_explicit(&pool->lost, 1, memory_order_relaxed);
        if (pool->joinable) atomic_fetch_sub_explicit(&pool->count.unfinished, 1, memory_order_release);
        advance_work(r, pool, gate, record_slots(r, bytes));  /* it may have died before moving it */
    }
    wake_waiters(r);
}

/* Dead workers' gates are opened (their held records counted lost) and, with free_records, their
 * records freed (only when a new worker finds none free: each costs a look at /proc); a dead
 * producer gives back the counts it held (a put under way, records it kept spilled): those puts
 * never reach the ring, and are counted abandoned. */
void pool_reap(sy_ring *r, bool free_records) {
    struct sy_ring_header *h = r->header;
    sy_work_pool *pool = work_pool(r);
    uint64_t active = atomic_load_explicit(&h->registry.active_consumers, memory_order_acquire), dead = 0;
    for (int i = 0; i < SY_RING_MAX_CONSUMERS; i++) {
        /* The gate first: a live worker stored its pid before its gate (release), so a gate seen
         * here comes with the pid of the worker that set it. pid 0: a record freed without its gate
         * opened (a reaper of dead consumers that knows nothing of gates). */
        int64_t gate = atomic_load_explicit(&pool->gates[i].after, memory_order_acquire);
        if (gate == GATE_IDLE && !(free_records && (active >> i & 1))) continue;
        int64_t pid = atomic_load_explicit(&h->consumers[i].pid, memory_order_acquire);
        bool died = pid != 0 && !pid_alive(pid);
        if (gate != GATE_IDLE && (pid == 0 || died)) release_dead_gate(r, pool, i, gate);
        if (died && (active >> i & 1)) dead |= 1ull << i;
    }
    if (dead && registry_lock(r) == SY_OK) {  /* free the records, as sy_ring_consumer_close does */
        active = atomic_load_explicit(&h->registry.active_consumers, memory_order_relaxed);
        for (uint64_t d = dead & active; d; d &= d - 1) {  /* re-checked: the record may be new since */
            int i = __builtin_ctzll(d);
            int64_t pid = atomic_load_explicit(&h->consumers[i].pid, memory_order_relaxed);
            if (pid == 0 || pid_alive(pid)) continue;
            active &= ~(1ull << i);
            atomic_store_explicit(&h->consumers[i].pid, 0, memory_order_relaxed);
            atomic_store_explicit(&h->consumers[i].after_mask, 0, memory_order_relaxed);
        }
        atomic_store_explicit(&h->registry.gating_consumers, leaves_of(h, active), memory_order_release);
        atomic_store_explicit(&h->registry.active_consumers, active, memory_order_release);
        registry_unlock(r);
    }
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        sy_pool_intent *intent = &pool->intents[i];
        int64_t pid = atomic_load_explicit(&h->producers[i].pid, memory_order_acquire);
        if (!atomic_load_explicit(&intent->reserved, memory_order_acquire) || (pid != 0 && pid_alive(pid))) continue;
        /* claimed: its hole is the skipper's to account for (skip_abandoned) */
        if (atomic_load_explicit(&intent->claimed, memory_order_acquire)) continue;
        int64_t held = atomic_exchange_explicit(&intent->reserved, 0, memory_order_acq_rel);
        if (held > 0) {
            atomic_fetch_add_explicit(&pool->abandoned, held, memory_order_relaxed);
            release_reservation(r, pool, held);
        }
    }
}

/* The span of a dead producer's claim that starts at s (its intent, written before the claim):
 * a claimed one first; without one (two dead at once) the shortest, and the rest slot by slot. */
static int abandoned_intent(sy_work_pool *pool, int64_t s, int64_t *hi) {
    int found = -1;
    bool found_claimed = false;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        sy_pool_intent *intent = &pool->intents[i];
        if (atomic_load_explicit(&intent->lo, memory_order_acquire) != s) continue;
        int64_t h = atomic_load_explicit(&intent->hi, memory_order_acquire);
        bool c = atomic_load_explicit(&intent->claimed, memory_order_acquire);
        if (found < 0 || (c && !found_claimed) || (c == found_claimed && h < *hi)) {
            found = i;
            *hi = h;
            found_claimed = c;
        }
    }
    return found;
}

/* After s = w + 1 was marked skipped: move the work sequence past the dead claim; whoever clears
 * its intent counts it. Every waiting worker may run this; they all compute the same span. */
void finish_skip(sy_ring *r, sy_work_pool *pool, int64_t w) {
    int64_t s = w + 1, hi = s;
    int owner = abandoned_intent(pool, s, &hi);
    if (owner < 0 || hi < s || hi - s >= ring_capacity(r)) hi = s;
    advance_work(r, pool, w, hi - w);
    int64_t expected = s;
    if (owner >= 0 && atomic_compare_exchange_strong_explicit(&pool->intents[owner].lo, &expected, NO_INTENT,
                                                              memory_order_acq_rel, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&pool->abandoned, 1, memory_order_relaxed);
        atomic_store_explicit(&pool->intents[owner].claimed, 0, memory_order_relaxed);
        /* its hole's count, and those of records its process kept spilled: abandoned too */
        int64_t held = atomic_exchange_explicit(&pool->intents[owner].reserved, 0, memory_order_acq_rel);
        if (held > 1) atomic_fetch_add_explicit(&pool->abandoned, held - 1, memory_order_relaxed);
        if (held > 0) release_reservation(r, pool, held);
    }
}

/* The hole at s = w + 1 (claimed, unpublished) is skipped when every producer whose intent covers s
 * is dead. The cursor is acquired first: a claim seen there comes with its owner's intent (stored
 * before the claim's release). The mark is set by CAS from the value seen before the check, so a
 * publish that lands meanwhile wins. */
bool skip_abandoned(sy_ring *r, sy_work_pool *pool, int64_t w) {
    int64_t s = w + 1;
    if (atomic_load_explicit(r->cursor, memory_order_acquire) < s) return false;  /* nobody claimed it yet */
    _Atomic int64_t *header = &slot_header(r, s)->published_plus_one;
    int64_t seen = atomic_load_explicit(header, memory_order_acquire);
    if (seen == s + 1 || seen == skipped_mark(s) || is_taken_mark(seen, s)) return false;
    bool dead_owner = false;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        sy_pool_intent *intent = &pool->intents[i];
        int64_t lo = atomic_load_explicit(&intent->lo, memory_order_acquire);
        if (lo == NO_INTENT || lo > s || atomic_load_explicit(&intent->hi, memory_order_acquire) < s) continue;
        int64_t pid = atomic_load_explicit(&r->header->producers[i].pid, memory_order_acquire);
        if (pid != 0 && pid_alive(pid)) return false;  /* a live producer may still publish it */
        dead_owner = true;
    }
    if (!dead_owner || !atomic_compare_exchange_strong_explicit(header, &seen, skipped_mark(s),
                                                                memory_order_acq_rel, memory_order_acquire))
        return false;
    finish_skip(r, pool, w);
    return true;
}

/* ---- counts, task_done, join ---- */

int sy_queue_counts(sy_ring *r, int reap, sy_queue_tally *out) {
    sy_work_pool *pool = work_pool(r);
    if (reap) pool_reap(r, false);
    out->items = atomic_load_explicit(&pool->count.items, memory_order_acquire);
    out->unfinished = atomic_load_explicit(&pool->count.unfinished, memory_order_acquire);
    out->lost = atomic_load_explicit(&pool->lost, memory_order_relaxed);
    out->abandoned = atomic_load_explicit(&pool->abandoned, memory_order_relaxed);
    out->maxsize = pool->maxsize;
    return SY_OK;
}

int sy_queue_task_done(sy_ring *r) {
    sy_work_pool *pool = work_pool(r);
    int64_t unfinished = atomic_load_explicit(&pool->count.unfinished, memory_order_relaxed);
    do {
        if (unfinished <= 0) return SY_EINVAL;  /* task_done() called too many times */
    } while (!atomic_compare_exchange_weak_explicit(&pool->count.unfinished, &unfinished, unfinished - 1,
                                                    memory_order_acq_rel, memory_order_relaxed));
    if (unfinished == 1) wake_waiters(r);
    return SY_OK;
}

static bool all_done(void *ctx) {
    return atomic_load_explicit(&work_pool(ctx)->count.unfinished, memory_order_acquire) <= 0;
}

int sy_queue_join(sy_ring *r, int64_t timeout_ns) {
    struct pool_wait pw;
    pool_wait_start(&pw, r, timeout_ns);
    while (!all_done(r)) {
        bool liveness_due;
        int status = pool_nap(&pw, all_done, r, &liveness_due);
        if (status != SY_OK) return status;
        if (liveness_due) pool_reap(r, false);
    }
    return SY_OK;
}

void sy_queue_note_abandoned(sy_ring *r) {
    atomic_fetch_add_explicit(&work_pool(r)->abandoned, 1, memory_order_relaxed);
}
