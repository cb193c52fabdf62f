/* ring_work.c: work sharing and records, what sympathy.Queue is built on.
 *
 * Hardware fact served: a worker pool needs one shared line that every worker writes (the work
 * sequence, claimed by compare-and-swap) and one line per worker that only it writes (its gate);
 * a record of any size is a run of consecutive slots whose first header, published last, hands the
 * whole record over in the line the worker reads first anyway.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- work sharing and records (sympathy.Queue) -----------------------------------------------------
 *
 * multiprocessing.Queue's semantics on the ring: any number of producer processes put records, any
 * number of worker processes take them, and each record goes to exactly one worker (LMAX's
 * WorkerPool: one shared work sequence, and each worker's own gate holding the producers back). A
 * gate holds only while its worker reads a record, so a process that holds the queue and stops
 * calling get() gates nothing (a WorkProcessor thread always loops; a queue user need not).
 *
 * Records: B bytes take k = ceil((16 + B) / slot_size) consecutive slots, claimed by one
 * compare-and-swap of the cursor; the first slot's payload starts with B and a caller's tag. A
 * record that runs past the ring's end simply continues at slot 0 (slots are addressed by
 * sequence & mask), so wrap needs no padding record. Only the first slot's header is published,
 * after every byte of the record (release): one acquire, on the line the worker reads first anyway,
 * hands it the whole record. Slots rather than a descriptor ring over a byte arena, because here the
 * slot order IS the allocation order: space comes back through the same gates that free slots (no
 * allocator, no fragmentation, no second structure to repair after a crash), and the common small
 * record (a pickled dict, ~100 B) is one 128-byte slot whose header and bytes arrive in the one
 * transfer (the adjacent-line prefetcher pairs the two 64-byte lines). The cost: 8 header bytes
 * every slot_size bytes of a large record, copied in slot-sized memcpy runs.
 *
 * A worker takes the record at s = work + 1 by compare-and-swap of s's header from "published" to
 * "taken by worker i", then moves the work sequence past the record (anyone who finds s taken helps
 * move it). So the ring itself says who holds what: a worker killed while holding a record is found
 * by the gate it left and the mark naming it, and the record is counted lost exactly once. A
 * producer killed between its claim and its publish leaves a hole; its claim intent (written before
 * the claim) lets a waiting worker see that every producer that could own the hole is dead, mark
 * it skipped and go on, so the live producers' records still all arrive.
 */

#define GATE_IDLE INT64_MAX  /* a worker that is not reading a record gates nothing */
#define NO_INTENT ((int64_t)-1)
#define POOL_MAGIC 0x4C4F4F50594D5953ull  /* "SYMYPOOL": sy_queue_init finished */
#define MARK_OWNER_SHIFT 56  /* taken mark: (worker + 1) << 56 | (s + 1); sequences stay below 2^56 */
#define MAX_POOL_SEQUENCE (((int64_t)1 << MARK_OWNER_SHIFT) - 1)

typedef struct sy_record_prefix {
    int64_t bytes;  /* of the record after this prefix */
    int64_t tag;    /* the caller's (sympathy.Queue: how the bytes are framed) */
} sy_record_prefix;
#define RECORD_PREFIX_BYTES ((int64_t)sizeof(sy_record_prefix))

/* Written by its worker twice a get: its own block, so workers never share a line. */
typedef struct sy_pool_gate {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t after;  /* reads only slots after this; GATE_IDLE */
} sy_pool_gate;

/* A producer's claim in progress, read by a worker that finds a hole to learn who may still fill it. */
typedef struct sy_pool_intent {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t lo;  /* first sequence it claims; NO_INTENT */
    _Atomic int64_t hi;
    _Atomic int32_t claimed;   /* the compare-and-swap that made [lo, hi] its own succeeded */
    _Atomic int32_t reserved;  /* it holds one count of items (and unfinished) for the record */
} sy_pool_intent;

typedef struct sy_work_pool {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint64_t magic;  /* stored last by sy_queue_init (release) */
    int64_t maxsize;             /* items; 0: unbounded */
    int32_t joinable;
    _Atomic int64_t lost;        /* records a worker took and died holding */
    _Atomic int64_t abandoned;   /* puts whose producer died between its claim and its publish */
    struct { _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t sequence; } work;  /* last slot taken */
    /* Both sides write both counts on every item: one line for the two. */
    struct { _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t items; _Atomic int64_t unfinished; } count;
    sy_pool_gate gates[SY_RING_MAX_CONSUMERS];     /* by consumer record: a worker is a consumer */
    sy_pool_intent intents[SY_RING_MAX_PRODUCERS]; /* by producer record */
} sy_work_pool;
_Static_assert(sizeof(sy_work_pool) == SY_WORK_POOL_BLOCKS * SY_DESTRUCTIVE_SIZE, "the header reserves its blocks");
_Static_assert(sizeof(sy_pool_gate) == SY_DESTRUCTIVE_SIZE && sizeof(sy_pool_intent) == SY_DESTRUCTIVE_SIZE,
               "one block per gate and per intent");

struct sy_queue_producer {
    _Alignas(SY_DESTRUCTIVE_SIZE) int64_t gating_cache;  /* a minimum of gates and work: never rises past them */
    sy_ring_producer *producer;  /* the ring's record: pid and heartbeat for liveness */
    sy_ring *ring;
    int record;
};

struct sy_queue_worker {
    sy_ring_consumer *consumer;  /* the ring's record: pid and heartbeat for liveness */
    sy_ring *ring;
    int record;
    int64_t held_lo;             /* a record taken and not yet copied out (NO_INTENT: none) */
    int64_t held_bytes;
};

static inline sy_work_pool *work_pool(const sy_ring *r) { return (sy_work_pool *)r->header->work_pool; }
static inline int64_t taken_mark(int64_t s, int worker) { return (int64_t)(worker + 1) << MARK_OWNER_SHIFT | (s + 1); }
static inline bool is_taken_mark(int64_t mark, int64_t s) {
    return mark > MAX_POOL_SEQUENCE && (mark & MAX_POOL_SEQUENCE) == s + 1;
}
static inline int64_t record_slots(const sy_ring *r, int64_t bytes) {
    return (RECORD_PREFIX_BYTES + bytes + r->slot_size - 1) / r->slot_size;
}

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

struct pool_wait {
    sy_ring *ring;
    int64_t deadline_ns;
    int64_t next_liveness_ns;
    int spins;
    bool once;  /* timeout 0: one look, no wait */
};

static void pool_wait_start(struct pool_wait *pw, sy_ring *r, int64_t timeout_ns) {
    *pw = (struct pool_wait){.ring = r, .deadline_ns = deadline_from(timeout_ns), .once = timeout_ns == 0};
}

/* One step of waiting. SY_OK: look again (*liveness_due: first look for dead peers); SY_ETIMEDOUT. */
static int pool_nap(struct pool_wait *pw, bool (*ready)(void *), void *ctx, bool *liveness_due) {
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

static void release_reservation(sy_ring *r, sy_work_pool *pool) {
    atomic_fetch_sub_explicit(&pool->count.items, 1, memory_order_release);
    if (pool->joinable) atomic_fetch_sub_explicit(&pool->count.unfinished, 1, memory_order_release);
    wake_waiters(r);
}

/* Moves the work sequence from w past the record at w + 1, whose first header reads `mark`
 * (taken or skipped). The caller's gate (or work == w) keeps that slot from being reused, and a
 * stale w only makes the compare-and-swap fail. */
static void advance_work(sy_ring *r, sy_work_pool *pool, int64_t w, int64_t slots) {
    if (slots < 1 || slots > ring_capacity(r)) slots = 1;  /* a stale read: the CAS below fails anyway */
    int64_t expected = w;
    atomic_compare_exchange_strong_explicit(&pool->work.sequence, &expected, w + slots, memory_order_acq_rel,
                                            memory_order_relaxed);
}

static int64_t prefix_bytes(const sy_ring *r, int64_t s) {
    const sy_record_prefix *prefix = item_at(r, s);
    return prefix->bytes;
}

/* A dead worker's gate: its record (if the mark names it) is lost; the gate is opened either way. */
static void release_dead_gate(sy_ring *r, sy_work_pool *pool, int worker, int64_t gate) {
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
 * producer that was waiting gives back the count it reserved. */
static void pool_reap(sy_ring *r, bool free_records) {
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
        if (atomic_exchange_explicit(&intent->reserved, 0, memory_order_acq_rel)) release_reservation(r, pool);
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
static void finish_skip(sy_ring *r, sy_work_pool *pool, int64_t w) {
    int64_t s = w + 1, hi = s;
    int owner = abandoned_intent(pool, s, &hi);
    if (owner < 0 || hi < s || hi - s >= ring_capacity(r)) hi = s;
    advance_work(r, pool, w, hi - w);
    int64_t expected = s;
    if (owner >= 0 && atomic_compare_exchange_strong_explicit(&pool->intents[owner].lo, &expected, NO_INTENT,
                                                              memory_order_acq_rel, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&pool->abandoned, 1, memory_order_relaxed);
        atomic_store_explicit(&pool->intents[owner].claimed, 0, memory_order_relaxed);
        if (atomic_exchange_explicit(&pool->intents[owner].reserved, 0, memory_order_acq_rel))
            release_reservation(r, pool);
    }
}

/* The hole at s = w + 1 (claimed, unpublished) is skipped when every producer whose intent covers s
 * is dead. The cursor is acquired first: a claim seen there comes with its owner's intent (stored
 * before the claim's release). The mark is set by CAS from the value seen before the check, so a
 * publish that lands meanwhile wins. */
static bool skip_abandoned(sy_ring *r, sy_work_pool *pool, int64_t w) {
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

/* ---- producers ---- */

int sy_queue_producer_open(sy_ring *r, sy_queue_producer **out) {
    sy_queue_producer *qp = aligned_alloc(SY_DESTRUCTIVE_SIZE, align_up(sizeof *qp, SY_DESTRUCTIVE_SIZE));
    if (!qp) return SY_ENOMEM;
    int status = sy_ring_producer_open(r, &qp->producer);
    if (status == SY_EINVAL && registry_lock(r) == SY_OK) {
        /* Every record taken: free those of dead producers whose claims are settled (no count held,
         * and no intent, or one the work sequence has passed: taken or skipped since). */
        sy_work_pool *pool = work_pool(r);
        int64_t work = atomic_load_explicit(&pool->work.sequence, memory_order_acquire);
        for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
            sy_pool_intent *intent = &pool->intents[i];
            int64_t pid = atomic_load_explicit(&r->header->producers[i].pid, memory_order_acquire);
            int64_t lo = atomic_load_explicit(&intent->lo, memory_order_acquire);
            bool settled = lo == NO_INTENT || atomic_load_explicit(&intent->hi, memory_order_acquire) <= work;
            if (!pid || pid_alive(pid) || atomic_load_explicit(&intent->reserved, memory_order_acquire) || !settled)
                continue;
            atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_relaxed);
            atomic_store_explicit(&intent->claimed, 0, memory_order_relaxed);
            atomic_store_explicit(&r->header->producers[i].pid, 0, memory_order_release);
            atomic_fetch_sub_explicit(&r->header->registry.producers, 1, memory_order_relaxed);
        }
        registry_unlock(r);
        status = sy_ring_producer_open(r, &qp->producer);
    }
    if (status != SY_OK) {
        free(qp);
        return status;
    }
    qp->ring = r;
    qp->record = qp->producer->record;
    qp->gating_cache = NO_SEQUENCE;
    sy_pool_intent *intent = &work_pool(r)->intents[qp->record];
    atomic_store_explicit(&intent->claimed, 0, memory_order_relaxed);
    atomic_store_explicit(&intent->reserved, 0, memory_order_relaxed);
    atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_release);
    *out = qp;
    return SY_OK;
}

void sy_queue_producer_close(sy_queue_producer *qp) {
    if (!qp) return;
    sy_ring_producer_close(qp->producer);
    free(qp);
}

/* The producers may claim up to this plus capacity: the work sequence (nothing after it is taken)
 * and the gate of every worker reading a record. Only workers registered as consumers are read. */
static int64_t pool_gating(const sy_ring *r, const sy_work_pool *pool) {
    int64_t minimum = atomic_load_explicit(&pool->work.sequence, memory_order_acquire);
    uint64_t active = atomic_load_explicit(&r->header->registry.active_consumers, memory_order_acquire);
    for (; active; active &= active - 1) {
        int64_t gate = atomic_load_explicit(&pool->gates[__builtin_ctzll(active)].after, memory_order_acquire);
        if (gate < minimum) minimum = gate;
    }
    return minimum;
}

struct space_wanted { sy_ring *ring; sy_queue_producer *qp; int64_t wrap_point; };

static bool space_ready(void *ctx) {
    struct space_wanted *sw = ctx;
    return pool_gating(sw->ring, work_pool(sw->ring)) >= sw->wrap_point;
}

struct count_wanted { sy_work_pool *pool; int64_t limit; };

static bool count_ready(void *ctx) {
    struct count_wanted *cw = ctx;
    return atomic_load_explicit(&cw->pool->count.items, memory_order_acquire) < cw->limit;
}

/* One count of items (bounded by maxsize) and of unfinished tasks, held in the intent until the
 * record is published, so a producer that dies holding it gives it back (pool_reap, finish_skip). */
static int reserve_item(sy_queue_producer *qp, struct pool_wait *pw) {
    sy_ring *r = qp->ring;
    sy_work_pool *pool = work_pool(r);
    struct count_wanted cw = {.pool = pool, .limit = pool->maxsize};
    int64_t items = atomic_load_explicit(&pool->count.items, memory_order_relaxed);
    for (;;) {
        if (pool->maxsize == 0 || items < pool->maxsize) {
            if (atomic_compare_exchange_weak_explicit(&pool->count.items, &items, items + 1, memory_order_acq_rel,
                                                      memory_order_relaxed))
                break;
            continue;
        }
        bool liveness_due;
        int status = pool_nap(pw, count_ready, &cw, &liveness_due);
        if (status != SY_OK) return status;
        if (liveness_due) pool_reap(r, false);
        items = atomic_load_explicit(&pool->count.items, memory_order_relaxed);
    }
    if (pool->joinable) atomic_fetch_add_explicit(&pool->count.unfinished, 1, memory_order_relaxed);
    atomic_store_explicit(&pool->intents[qp->record].reserved, 1, memory_order_release);
    return SY_OK;
}

/* k slots by compare-and-swap of the cursor, only once the space is there (LMAX's tryNext): a
 * timeout leaves no hole. The intent is stored before each attempt; the CAS releases it. */
static int claim_slots(sy_queue_producer *qp, int64_t k, struct pool_wait *pw, int64_t *lo) {
    sy_ring *r = qp->ring;
    sy_work_pool *pool = work_pool(r);
    sy_pool_intent *intent = &pool->intents[qp->record];
    for (;;) {
        int64_t current = atomic_load_explicit(r->cursor, memory_order_relaxed);
        int64_t next = current + k;
        if (next > MAX_POOL_SEQUENCE) return SY_ECORRUPT;  /* 2^56 slots: decades at memory speed */
        int64_t wrap_point = next - ring_capacity(r);
        if (wrap_point > qp->gating_cache) {
            qp->gating_cache = pool_gating(r, pool);
            if (wrap_point > qp->gating_cache) {
                /* A failed CAS left an intent over slots others own: a hole there would wait on us. */
                atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_relaxed);
                struct space_wanted sw = {.ring = r, .qp = qp, .wrap_point = wrap_point};
                bool liveness_due;
                int status = pool_nap(pw, space_ready, &sw, &liveness_due);
                if (status != SY_OK) return status;
                if (liveness_due) {
                    atomic_store_explicit(&r->header->producers[qp->record].heartbeat_ns, (int64_t)sy_now_ns(),
                                          memory_order_relaxed);
                    pool_reap(r, false);
                }
                continue;
            }
        }
        atomic_store_explicit(&intent->lo, current + 1, memory_order_relaxed);
        atomic_store_explicit(&intent->hi, next, memory_order_relaxed);
        /* release: the intent above comes with the claim to whoever acquires the cursor */
        if (atomic_compare_exchange_weak_explicit(r->cursor, &current, next, memory_order_release,
                                                  memory_order_relaxed)) {
            atomic_store_explicit(&intent->claimed, 1, memory_order_release);
            *lo = current + 1;
            return SY_OK;
        }
    }
}

/* Gathers the pieces into the record's slots, around each slot's 8-byte header. */
static void scatter_record(sy_ring *r, int64_t lo, const sy_record_prefix *prefix, const void *const *pieces,
                           const int64_t *sizes, int n) {
    int64_t s = lo, room = r->slot_size;
    unsigned char *at = item_at(r, s);
    memcpy(at, prefix, sizeof *prefix);
    at += sizeof *prefix;
    room -= RECORD_PREFIX_BYTES;
    for (int i = 0; i < n; i++) {
        const unsigned char *src = pieces[i];
        for (int64_t left = sizes[i]; left > 0;) {
            if (room == 0) {
                at = item_at(r, ++s);
                room = r->slot_size;
            }
            int64_t run = left < room ? left : room;
            memcpy(at, src, (size_t)run);
            at += run, src += run, left -= run, room -= run;
        }
    }
}

int sy_queue_put(sy_queue_producer *qp, const void *const *pieces, const int64_t *sizes, int n, int64_t tag,
                 int64_t timeout_ns) {
    sy_ring *r = qp->ring;
    sy_work_pool *pool = work_pool(r);
    int64_t bytes = 0;
    if (n < 0 || (n > 0 && (!pieces || !sizes))) return SY_EINVAL;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0 || sizes[i] > sy_queue_max_record(r) - bytes) return SY_EINVAL;
        bytes += sizes[i];
    }
    struct pool_wait pw;
    pool_wait_start(&pw, r, timeout_ns);
    int status = reserve_item(qp, &pw);
    if (status != SY_OK) return status;
    int64_t lo;
    status = claim_slots(qp, record_slots(r, bytes), &pw, &lo);
    sy_pool_intent *intent = &pool->intents[qp->record];
    if (status != SY_OK) {
        atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_relaxed);
        if (atomic_exchange_explicit(&intent->reserved, 0, memory_order_acq_rel)) release_reservation(r, pool);
        return status;
    }
    sy_record_prefix prefix = {.bytes = bytes, .tag = tag};
    scatter_record(r, lo, &prefix, pieces, sizes, n);
    /* release: every byte of the record before the header that says it is there */
    atomic_store_explicit(&slot_header(r, lo)->published_plus_one, lo + 1, memory_order_release);
    atomic_store_explicit(&intent->reserved, 0, memory_order_relaxed);  /* the record holds the count now */
    atomic_store_explicit(&intent->claimed, 0, memory_order_relaxed);
    atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_release);
    wake_waiters(r);
    return SY_OK;
}

int sy_queue_put1(sy_queue_producer *qp, const void *data, int64_t size, int64_t tag, int64_t timeout_ns) {
    return sy_queue_put(qp, &data, &size, 1, tag, timeout_ns);
}

/* ---- workers ---- */

int sy_queue_worker_open(sy_ring *r, sy_queue_worker **out) {
    sy_queue_worker *w = calloc(1, sizeof *w);
    if (!w) return SY_ENOMEM;
    int status = sy_ring_consumer_open(r, NULL, 0, &w->consumer);
    if (status == SY_EINVAL) {  /* every record taken: free the dead workers' */
        pool_reap(r, true);
        status = sy_ring_consumer_open(r, NULL, 0, &w->consumer);
    }
    if (status != SY_OK) {
        free(w);
        return status;
    }
    w->ring = r;
    w->record = w->consumer->record;
    w->held_lo = NO_INTENT;
    /* A predecessor in this record that died holding a record and was freed by a reaper that knows
     * nothing of gates: its record is lost, and counted here. */
    int64_t gate = atomic_load_explicit(&work_pool(r)->gates[w->record].after, memory_order_acquire);
    if (gate != GATE_IDLE) release_dead_gate(r, work_pool(r), w->record, gate);
    *out = w;
    return SY_OK;
}

static void finish_record(sy_queue_worker *w) {
    w->held_lo = NO_INTENT;
    /* release: our reads of the record's slots before a producer, acquiring the gate, reuses them */
    atomic_store_explicit(&work_pool(w->ring)->gates[w->record].after, GATE_IDLE, memory_order_release);
    wake_waiters(w->ring);
}

void sy_queue_worker_close(sy_queue_worker *w) {
    if (!w) return;
    if (w->held_lo != NO_INTENT) {  /* taken and never copied out: nobody will have it */
        atomic_fetch_add_explicit(&work_pool(w->ring)->lost, 1, memory_order_relaxed);
        finish_record(w);
    }
    atomic_store_explicit(&work_pool(w->ring)->gates[w->record].after, GATE_IDLE, memory_order_release);
    sy_ring_consumer_close(w->consumer);
    free(w);
}

struct record_wanted { sy_ring *ring; int64_t work; int64_t header; };

/* Something moved: the work sequence, or the header of the slot after it. */
static bool record_ready(void *ctx) {
    struct record_wanted *rw = ctx;
    sy_work_pool *pool = work_pool(rw->ring);
    return atomic_load_explicit(&pool->work.sequence, memory_order_acquire) != rw->work ||
           atomic_load_explicit(&slot_header(rw->ring, rw->work + 1)->published_plus_one,
                                memory_order_acquire) != rw->header;
}

/* Takes the record at work + 1: see the section comment. */
static int take_record(sy_queue_worker *w, int64_t timeout_ns, int64_t *lo, sy_record_prefix *prefix) {
    sy_ring *r = w->ring;
    sy_work_pool *pool = work_pool(r);
    _Atomic int64_t *gate = &pool->gates[w->record].after;
    struct pool_wait pw;
    pool_wait_start(&pw, r, timeout_ns);
    int64_t waiting_on = NO_SEQUENCE - 1, wait_header = 0;
    for (;;) {
        int64_t work = atomic_load_explicit(&pool->work.sequence, memory_order_acquire);
        /* seq_cst: the gate is in place before we look at the slot it protects */
        atomic_store_explicit(gate, work, memory_order_seq_cst);
        int64_t s = work + 1;
        _Atomic int64_t *header = &slot_header(r, s)->published_plus_one;
        int64_t seen = atomic_load_explicit(header, memory_order_acquire);
        if (seen == s + 1) {
            memcpy(prefix, item_at(r, s), sizeof *prefix);
            int64_t slots = record_slots(r, prefix->bytes);
            if (prefix->bytes < 0 || slots > ring_capacity(r)) {
                /* a prefix out of range under a live header: scribbled, unless work moved (stale) */
                if (atomic_load_explicit(&pool->work.sequence, memory_order_acquire) == work) return SY_ECORRUPT;
                continue;
            }
            if (atomic_compare_exchange_strong_explicit(header, &seen, taken_mark(s, w->record),
                                                        memory_order_acq_rel, memory_order_acquire)) {
                atomic_fetch_sub_explicit(&pool->count.items, 1, memory_order_release);
                advance_work(r, pool, work, slots);
                *lo = s;
                return SY_OK;
            }
            continue;
        }
        if (is_taken_mark(seen, s)) {  /* another worker's, the work sequence not yet past it: help */
            advance_work(r, pool, work, record_slots(r, prefix_bytes(r, s)));
            continue;
        }
        if (seen == skipped_mark(s)) {
            finish_skip(r, pool, work);
            continue;
        }
        /* Nothing at s yet. Only the first look at a slot spins; a look after something moved
         * starts the backoff again. */
        if (s != waiting_on || seen != wait_header) {
            waiting_on = s;
            wait_header = seen;
            pw.spins = 0;
        }
        atomic_store_explicit(gate, GATE_IDLE, memory_order_release);  /* waiting gates nothing */
        struct record_wanted rw = {.ring = r, .work = work, .header = seen};
        bool liveness_due;
        int status = pool_nap(&pw, record_ready, &rw, &liveness_due);
        if (status != SY_OK) return status;
        if (liveness_due) {
            atomic_store_explicit(&r->header->consumers[w->record].heartbeat_ns, (int64_t)sy_now_ns(),
                                  memory_order_relaxed);
            pool_reap(r, false);
            skip_abandoned(r, pool, work);
        }
    }
}

static void gather_record(const sy_ring *r, int64_t lo, unsigned char *dst, int64_t bytes) {
    int64_t s = lo, room = r->slot_size - RECORD_PREFIX_BYTES;
    const unsigned char *at = (const unsigned char *)item_at(r, s) + RECORD_PREFIX_BYTES;
    while (bytes > 0) {
        if (room == 0) {
            at = item_at(r, ++s);
            room = r->slot_size;
        }
        int64_t run = bytes < room ? bytes : room;
        memcpy(dst, at, (size_t)run);
        dst += run, at += run, bytes -= run, room -= run;
    }
}

int sy_queue_get(sy_queue_worker *w, void *dst, int64_t capacity, int64_t timeout_ns, int64_t *bytes, int64_t *tag) {
    if (w->held_lo != NO_INTENT) return SY_EINVAL;  /* the held record must be copied out first */
    int64_t lo;
    sy_record_prefix prefix;
    int status = take_record(w, timeout_ns, &lo, &prefix);
    if (status != SY_OK) return status;
    *bytes = prefix.bytes;
    *tag = prefix.tag;
    if (prefix.bytes > capacity || prefix.tag != 0 || !dst) {
        w->held_lo = lo;  /* the caller allocates, then sy_queue_copy_held */
        w->held_bytes = prefix.bytes;
        return SY_QUEUE_HELD;
    }
    gather_record(w->ring, lo, dst, prefix.bytes);
    finish_record(w);
    return SY_OK;
}

int sy_queue_copy_held(sy_queue_worker *w, void *dst) {
    if (w->held_lo == NO_INTENT) return SY_EINVAL;
    gather_record(w->ring, w->held_lo, dst, w->held_bytes);
    finish_record(w);
    return SY_OK;
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
