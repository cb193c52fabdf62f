/* ring_work_internal.h: what the work pool's two files share (c_src/ring_work_pool.c, the pool
 * and its liveness; c_src/ring_work_records.c, records put and taken): the pool's shared layout, the
 * per-process handles, the hot-path inlines.
 *
 * Hardware fact served: a worker pool needs one shared line that every worker writes (the work
 * sequence, claimed by compare-and-swap) and one line per worker that only it writes (its gate), so
 * each sits alone on its own 128-byte block; the per-item helpers stay inline here so that
 * splitting the files costs the hot paths nothing.
 */
#ifndef SY_RING_WORK_INTERNAL_H
#define SY_RING_WORK_INTERNAL_H

#include "ring_internal.h"

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
    int32_t unused;
    /* Counts of items (and unfinished) it holds: one for a record being put, one per record its
     * process keeps spilled (sympathy.Queue's feeder buffer). A dead producer's are given back. */
    _Atomic int64_t reserved;
} sy_pool_intent;

typedef struct sy_work_pool {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint64_t magic;  /* stored last by sy_queue_init (release) */
    int64_t maxsize;             /* items; 0: unbounded */
    int32_t joinable;
    _Atomic int64_t lost;        /* records a worker took and died holding */
    _Atomic int64_t abandoned;   /* puts whose producer died before they were published */
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


/* The producers may claim up to this plus capacity: the work sequence (nothing after it is taken)
 * and the gate of every worker reading a record. Only workers registered as consumers are read. */
static inline int64_t pool_gating(const sy_ring *r, const sy_work_pool *pool) {
    int64_t minimum = atomic_load_explicit(&pool->work.sequence, memory_order_acquire);
    uint64_t active = atomic_load_explicit(&r->header->registry.active_consumers, memory_order_acquire);
    for (; active; active &= active - 1) {
        int64_t gate = atomic_load_explicit(&pool->gates[__builtin_ctzll(active)].after, memory_order_acquire);
        if (gate < minimum) minimum = gate;
    }
    return minimum;
}

/* Moves the work sequence from w past the record at w + 1, whose first header reads taken or
 * skipped. The caller's gate (or work == w) keeps that slot from being reused, and a stale w only
 * makes the compare-and-swap fail. */
static inline void advance_work(sy_ring *r, sy_work_pool *pool, int64_t w, int64_t slots) {
    if (slots < 1 || slots > ring_capacity(r)) slots = 1;  /* a stale read: the CAS below fails anyway */
    int64_t expected = w;
    atomic_compare_exchange_strong_explicit(&pool->work.sequence, &expected, w + slots, memory_order_acq_rel,
                                            memory_order_relaxed);
}

static inline int64_t prefix_bytes(const sy_ring *r, int64_t s) {
    const sy_record_prefix *prefix = item_at(r, s);
    return prefix->bytes;
}

/* n counts of items (and unfinished tasks) given back: a dead producer's, or a put undone. */
static inline void release_reservation(sy_ring *r, sy_work_pool *pool, int64_t n) {
    atomic_fetch_sub_explicit(&pool->count.items, n, memory_order_release);
    if (pool->joinable) atomic_fetch_sub_explicit(&pool->count.unfinished, n, memory_order_release);
    wake_waiters(r);
}

/* ---- waiting (ring_work_pool.c): spin, yield, then sleep on the ring's futex word ---- */

struct pool_wait {
    sy_ring *ring;
    int64_t deadline_ns;
    int64_t next_liveness_ns;
    int spins;
    bool once;  /* timeout 0: one look, no wait */
};

static inline void pool_wait_start(struct pool_wait *pw, sy_ring *r, int64_t timeout_ns) {
    *pw = (struct pool_wait){.ring = r, .deadline_ns = deadline_from(timeout_ns), .once = timeout_ns == 0};
}

/* One step of waiting. SY_OK: look again (*liveness_due: first look for dead peers); SY_ETIMEDOUT. */
SY_RING_INTERNAL int pool_nap(struct pool_wait *pw, bool (*ready)(void *), void *ctx, bool *liveness_due);

/* ---- liveness (ring_work_pool.c) ---- */

/* Dead workers' gates opened (their held records counted lost), with free_records their consumer
 * records freed; dead producers' counts given back. */
SY_RING_INTERNAL void pool_reap(sy_ring *r, bool free_records);
/* A dead worker's gate: its record (if the mark names it) is lost; the gate is opened either way. */
SY_RING_INTERNAL void release_dead_gate(sy_ring *r, sy_work_pool *pool, int worker, int64_t gate);
/* The hole at w + 1: skipped (and true) when every producer that could own it is dead. */
SY_RING_INTERNAL bool skip_abandoned(sy_ring *r, sy_work_pool *pool, int64_t w);
/* After w + 1 was marked skipped: the work sequence moved past the dead claim, which is counted. */
SY_RING_INTERNAL void finish_skip(sy_ring *r, sy_work_pool *pool, int64_t w);

#endif /* SY_RING_WORK_INTERNAL_H */
