/* ring_internal.h: what the ring's C files share (not part of the public API in ring.h): the
 * shared-memory layout, the per-process handles, and the inline helpers of the hot paths.
 *
 * The ring is split along the Disruptor's own concepts, one file each:
 *   ring_segment.c    the shared segment: create, attach, validate, reclaim, unlink
 *   ring_liveness.c   peer liveness: dead consumers reaped, dead producers' claims abandoned, the
 *                     registration lock, the peers table
 *   ring_wait.c       wait strategies (busy spin, yield, sleep, blocking futex) behind one checkpoint
 *   ring_sequencer.c  sequences and sequencers: single- and multi-producer claims, publishing
 *   ring_barrier.c    sequence barriers and consumers: what is readable, reads, the event poller
 *
 * Hot-path helpers stay `static inline` here so that the per-item paths compile as one unit per
 * call site, as they did in one file; only slow paths (waits, liveness, registration) cross files.
 *
 * Hardware fact exploited: a cache line written by one core and read by another moves between
 * their caches on every write, so each sequence that one side writes and the other reads sits
 * alone on its own 128-byte block, each side keeps a private cached copy of the other side's
 * sequence, and a slot says itself that it is published (a header word in the slot's own line), so
 * one line transfer hands a consumer both the "published" signal and the item.
 *
 * Memory layout of a ring region (all offsets fixed by struct sy_ring_header; see the asserts):
 *
 *   header : identity block, wake word, registry, the hot sequences (cursor, gating cache, one per
 *            consumer: `sequence_stride` apart, 128 B unless a false-sharing ablation packs them),
 *            consumer and producer liveness records: one 128-byte block per independently
 *            written field
 *   slots  : capacity x slot_stride bytes; each slot is an 8-byte header (the sequence published
 *            into it, plus one) followed by the item, so a batch is one strided NumPy array
 *            (layout SLOTS, the default), or, in the CONTIGUOUS layout, capacity 8-byte headers (to
 *            the next block) and then capacity items back to back: a batch is one memcpy each way,
 *            and a single producer writes no header at all (its cursor says what is published)
 *
 * Memory-ordering contract: a producer writes a slot's item, then publishes it with a release store
 * of the slot's header (and, single producer, of the cursor after a batch); a consumer acquire-loads
 * the header (or the cursor) before reading the item. A consumer releases slots with a release
 * store of its sequence; a producer acquire-loads the gating sequences before overwriting.
 * Dependent consumers acquire-load their upstream consumers' sequences, which transitively carries
 * the producer's release.
 */
#ifndef SY_RING_INTERNAL_H
#define SY_RING_INTERNAL_H

#include "ring.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Internal symbols: visible to the ring's other C files, not exported from the extension. */
#define SY_RING_INTERNAL __attribute__((visibility("hidden")))

#define SY_RING_MAGIC 0x474E495259504D59ull  /* "YMPYRING" little-endian: identifies our segments */
/* 5: the producer record's owner lane (owner_floor): a version-4 reader would not see its claims;
 * the dead producer's cursor mark (dead_cursor_plus_one) that lets its record be reclaimed.
 * 4: the work pool's blocks at the header's end (sympathy.Queue: work sequence, item counts, one
 * gate per worker, one claim intent per producer).
 * 3: the origin block at the header's end (creation nonce, creator pid, item type).
 * 2: per-slot published headers, strided slots, the sequence area (1 had a cursor-only single
 * producer and a separate lap-number array for multi producers). */
/* 6: the identity's layout word and the contiguous layout (headers apart from the items). */
#define SY_RING_VERSION 6u
#define NO_SEQUENCE (-1)
/* 128-byte blocks of the work pool: settings, work sequence, counts, 64 gates, 64 intents. */
#define SY_WORK_POOL_BLOCKS (3 + SY_RING_MAX_CONSUMERS + SY_RING_MAX_PRODUCERS)

/* ---- the shared layout ------------------------------------------------------------------------ */

/* Immutable after creation: read by everyone, written once, so sharing it costs nothing. */
typedef struct sy_ring_identity {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint64_t magic;  /* stored last (release): see init_region */
    uint32_t version;
    uint32_t header_bytes;      /* sizeof(struct sy_ring_header): catches layout drift */
    int64_t capacity;
    int64_t slot_size;          /* bytes of an item */
    int64_t slot_stride;        /* bytes from one slot's header to the next */
    int32_t producer_kind;
    int32_t wait;
    int32_t max_consumers;
    int32_t max_producers;
    int32_t sequence_stride;    /* bytes between the hot sequences: 128, or 64/8 for the ablation */
    int32_t payload_offset;     /* bytes from a slot's header to its item (SLOTS; 0: CONTIGUOUS) */
    int32_t layout;             /* enum sy_ring_layout */
    int32_t reserved;
    int64_t slots_offset;
    int64_t region_bytes;
    uint64_t checksum;          /* of the fields above: a torn or scribbled header fails attach */
} sy_ring_identity;

/* The futex word: bit 0 says "someone may sleep on this value", the bits above count wakes.
 * Written only by a waiter about to sleep and by the one publisher that wakes it: a publisher
 * skips the wake syscall when nobody sleeps (the common case), and while a woken waiter is still
 * getting back on a CPU the next publishers skip it too (one syscall per sleep, not per publish). */
#define WAKE_SLEEPER ((uint32_t)1)
#define WAKE_EPOCH ((uint32_t)2)
typedef struct sy_ring_wake {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint32_t word;
} sy_ring_wake;

/* Registration state: written only when consumers join or leave, or the stream closes. */
typedef struct sy_ring_registry {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint64_t active_consumers;  /* bit i: record i in use */
    _Atomic uint64_t gating_consumers;  /* bit i: record i is a leaf and gates the producers */
    _Atomic int32_t lock_pid;           /* registration lock: owner pid, 0 when free */
    _Atomic int32_t closed;             /* end of stream */
    _Atomic int32_t producers;          /* live producer handles, for the single-producer check */
    /* bit i: record i was declared at creation (sy_ring_declare_consumers) and no consumer has
     * attached to it yet: it gates the producers from sequence -1, so nothing is published past it
     * unseen; the first consumers to open without `after` take these records. */
    _Atomic uint64_t declared_consumers;
} sy_ring_registry;

/* The hot sequences: the cursor (written by producers), the shared gating cache (multi producer)
 * and each consumer's release sequence. Room for each on its own 128-byte block (the L2 spatial
 * prefetcher pulls 64-byte lines in pairs, so 64 B apart still interferes); a ring placed
 * `sequence_stride` = 64 or 8 apart uses the same room packed tighter: the false-sharing ablation
 * runs THIS ring, not a model of it. */
/* The cursor and consumer 0 come first and adjacent: the SPSC pair, `sequence_stride` apart. */
enum { SEQ_CURSOR = 0, SEQ_FIRST_CONSUMER = 1, SEQ_GATING_CACHE = SEQ_FIRST_CONSUMER + SY_RING_MAX_CONSUMERS,
       SEQ_COUNT = SEQ_GATING_CACHE + 1 };
typedef struct sy_ring_sequences {
    _Alignas(SY_DESTRUCTIVE_SIZE) unsigned char room[SEQ_COUNT * SY_DESTRUCTIVE_SIZE];
} sy_ring_sequences;

/* Who a consumer is, apart from its hot sequence: liveness updates never disturb that line. */
typedef struct sy_consumer_record {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t pid;
    _Atomic int64_t heartbeat_ns;
    _Atomic uint64_t after_mask;        /* consumers this one runs after */
} sy_consumer_record;

typedef struct sy_producer_record {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t pid;
    _Atomic int64_t heartbeat_ns;
    /* Peer liveness, multi producer (in the record's own block, after the fields above): which
     * holes (claimed, not yet published) this handle may own. A consumer stuck on a hole whose only
     * possible owner is a dead process skips it. Two lanes, because the handle may be shared:
     * its owner thread (the first that claimed through it) writes owner_floor with plain stores,
     * a sequence none of its open claim starts before (INT64_MAX: none open); every other thread
     * counts its claims in open_claims (read-modify-writes) under claim_floor, as low as the
     * first of them that is still open. */
    _Atomic int64_t open_claims;
    _Atomic int64_t claim_floor;
    _Atomic int64_t owner_floor;
    /* Once the producer is seen dead with a claim open: the cursor then, plus one (0: not yet). Its
     * claims all lie at or below it, so once every consumer has passed it the record can go. */
    _Atomic int64_t dead_cursor_plus_one;
} sy_producer_record;

/* Who made the segment and what its items are: written once before the magic, like the identity,
 * and never on a hot path, so it sits after everything else. */
typedef struct sy_ring_origin {
    _Alignas(SY_DESTRUCTIVE_SIZE) uint64_t nonce;  /* random per creation: a close() removes the name
                                                      only while it still names the segment it made */
    int64_t creator_pid;
    uint32_t item_type_bytes;   /* strlen(item_type) */
    uint32_t reserved;
    char item_type[SY_RING_ITEM_TYPE_MAX];  /* the caller's item type (NumPy's dtype descr); "" for raw */
    uint64_t checksum;          /* of the fields above */
} sy_ring_origin;

struct sy_ring_header {
    sy_ring_identity identity;
    sy_ring_wake wake;
    sy_ring_registry registry;
    sy_ring_sequences sequences;
    sy_consumer_record consumers[SY_RING_MAX_CONSUMERS];
    sy_producer_record producers[SY_RING_MAX_PRODUCERS];
    sy_ring_origin origin;
    /* sympathy.Queue's shared state (struct sy_work_pool, defined in ring_work_internal.h); zero, and unused, in a plain ring. */
    _Alignas(SY_DESTRUCTIVE_SIZE) unsigned char work_pool[SY_WORK_POOL_BLOCKS * SY_DESTRUCTIVE_SIZE];
};

/* A slot's header: the sequence last published into it, plus one, so that the zero-filled fresh
 * region reads "nothing published" without a pass over every page. Stored with release after the
 * item is written; the consumer spins on it, and the item shares its cache line. */
typedef struct sy_slot_header {
    _Atomic int64_t published_plus_one;
} sy_slot_header;
#define SLOT_HEADER_BYTES ((int64_t)sizeof(sy_slot_header))

#define BLOCK SY_DESTRUCTIVE_SIZE
_Static_assert(offsetof(struct sy_ring_header, identity) == 0, "identity first: attach reads it");
_Static_assert(sizeof(sy_ring_identity) == BLOCK, "identity fits one block");
_Static_assert(offsetof(sy_ring_identity, version) == 8 && offsetof(sy_ring_identity, capacity) == 16,
               "version and capacity where every format version keeps them");
_Static_assert(offsetof(struct sy_ring_header, wake) == 1 * BLOCK, "wake word on block 1");
_Static_assert(offsetof(struct sy_ring_header, registry) == 2 * BLOCK, "registry on block 2");
_Static_assert(offsetof(struct sy_ring_header, sequences) == 3 * BLOCK, "hot sequences from block 3");
_Static_assert(offsetof(struct sy_ring_header, consumers) == (3 + SEQ_COUNT) * BLOCK, "records after them");
_Static_assert(sizeof(sy_consumer_record) == BLOCK, "one block per consumer record");
_Static_assert(sizeof(sy_producer_record) == BLOCK, "one block per producer record");
_Static_assert(offsetof(struct sy_ring_header, origin) ==
               offsetof(struct sy_ring_header, producers) + SY_RING_MAX_PRODUCERS * BLOCK, "origin last");
_Static_assert(sizeof(struct sy_ring_header) % BLOCK == 0, "slots start on a block");
_Static_assert(SLOT_HEADER_BYTES == 8, "an 8-byte header keeps 8-byte items aligned");
_Static_assert(SY_RING_MAX_CONSUMERS <= 64, "consumer sets are 64-bit masks");

/* ---- per-process handles ------------------------------------------------------------------------ */

struct sy_ring {
    struct sy_ring_header *header;
    unsigned char *slots;             /* slot 0's header */
    unsigned char *items;             /* slot 0's item: slots + 8 (SLOTS) or after the header array */
    int64_t header_stride;            /* bytes between two slots' headers: slot_stride, or 8 */
    int64_t item_stride;              /* bytes between two items: slot_stride, or slot_size */
    bool cursor_publishes;            /* single producer, CONTIGUOUS: no header is written; the cursor
                                         (stored with release after the items) is the only signal */
    _Atomic int64_t *cursor;          /* pointers into the sequence area, placed by its stride */
    _Atomic int64_t *gating_cache;
    unsigned char *sequences;
    int64_t sequence_stride;
    int64_t mask;                     /* capacity - 1 */
    int64_t slot_size;
    int64_t slot_stride;
    int wait;
    int producer_kind;
    int futex_op_flags;               /* FUTEX_PRIVATE_FLAG unless the region is shared */
    int shared;
    size_t region_bytes;
    _Atomic int refs;                 /* this handle + each open producer/consumer: the mapping lives
                                         until the last is closed, in whatever order finalisers run */
    _Atomic int closing;              /* sy_ring_shutdown: every wait through this handle ends */
    int64_t wait_slice_ns;            /* > 0: waits return SY_RING_WAIT_SLICE this often (see ring.h) */
    int refuse_concurrent_claims;     /* single producer: a second thread's claim gets SY_RING_EBUSY */
    _Atomic int64_t *gil_waiters;     /* sy_ring_set_gil_handoff: threads of this process inside a
                                         wait through such a handle (NULL: no handoff; ring_wait.c) */
};

/* The private side of a producer. The single-producer claim state lives here, on its own block,
 * because only the producing thread touches it. */
struct sy_ring_producer {
    _Alignas(SY_DESTRUCTIVE_SIZE) int64_t next_claim;  /* single: last claimed */
    int64_t gating_cache;                               /* single: cached min of gating sequences */
    _Atomic int busy;                                   /* single: a claim is open (claim to publish) */
    _Atomic uintptr_t owner_thread;                     /* multi: the thread of the owner lane, 0: none yet */
    int64_t owner_seen;                                 /* multi, owner thread only: a cursor value it saw */
    sy_ring *ring;
    int record;
};

struct sy_ring_consumer {
    _Alignas(SY_DESTRUCTIVE_SIZE) int64_t next;         /* next sequence to read */
    int64_t available_cache;                            /* highest known readable: the read_idx_cache */
    _Atomic int64_t *sequence;                          /* our release sequence in the shared area */
    int64_t lost;                                       /* sequences skipped: their producer died */
    int64_t next_liveness_ns;                           /* the poller's next look for dead claims */
    int ahead_pending;                                  /* read_ahead took items its caller may still hold
                                                           back: read_now refuses until sy_ring_ahead_taken */
    sy_ring *ring;
    int record;
    int n_after;
    int after[SY_RING_MAX_CONSUMERS];
};

/* ---- small helpers ----------------------------------------------------------------------------- */

static inline int64_t ring_capacity(const sy_ring *r) { return r->mask + 1; }

static inline _Atomic int64_t *consumer_sequence(const sy_ring *r, int record) {
    return (_Atomic int64_t *)(r->sequences + (SEQ_FIRST_CONSUMER + record) * r->sequence_stride);
}

static inline sy_slot_header *slot_header(const sy_ring *r, int64_t sequence) {
    return (sy_slot_header *)(r->slots + (size_t)(sequence & r->mask) * (size_t)r->header_stride);
}

static inline void *item_at(const sy_ring *r, int64_t sequence) {
    return r->items + (size_t)(sequence & r->mask) * (size_t)r->item_stride;
}

/* Items back to back (CONTIGUOUS): a run of them is one memcpy. */
static inline bool items_contiguous(const sy_ring *r) { return r->item_stride == r->slot_size; }

/* acquire: the item written before the producer's release store of this header is visible. */
static inline bool slot_published(const sy_ring *r, int64_t sequence) {
    return atomic_load_explicit(&slot_header(r, sequence)->published_plus_one, memory_order_acquire) == sequence + 1;
}

static inline int64_t align_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

static inline void ring_retain(sy_ring *r) { atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); }

static inline int64_t deadline_from(int64_t timeout_ns) {
    int64_t now = (int64_t)sy_now_ns();
    return timeout_ns < 0 || timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;  /* saturate */
}

/* Consumers never pass the producers, so the minimum over the leaf consumers is the minimum over
 * all of them; reading only the leaves is what "only leaf consumers gate the producer" buys. */
static inline int64_t minimum_gating(const sy_ring *r, int64_t no_consumers_value) {
    uint64_t leaves = atomic_load_explicit(&r->header->registry.gating_consumers, memory_order_acquire);
    int64_t minimum = no_consumers_value;
    for (; leaves; leaves &= leaves - 1) {
        int i = __builtin_ctzll(leaves);
        int64_t s = atomic_load_explicit(consumer_sequence(r, i), memory_order_acquire);
        if (s < minimum) minimum = s;
    }
    return minimum;
}

/* A slot's header once a consumer gave its sequence up: negative, so it never reads as published. */
static inline int64_t skipped_mark(int64_t sequence) { return -(sequence + 1); }

/* How many of the `left` items from `sequence` on sit before the ring's end: a copy walks the
 * slots in at most two runs, stepping a pointer by the slot stride instead of masking and
 * multiplying per item. */
static inline int64_t run_before_end(const sy_ring *r, int64_t sequence, int64_t left) {
    int64_t room = ring_capacity(r) - (sequence & r->mask);
    return left < room ? left : room;
}

/* ---- liveness (ring_liveness.c) ------------------------------------------------------------------ */

enum wait_side { WAITING_FOR_DATA, WAITING_FOR_SPACE };

/* A waiter that has waited this long starts checking that its peers still exist. */
#define LIVENESS_PERIOD_NS 10000000  /* 10 ms: a dead peer is noticed within about that */

SY_RING_INTERNAL bool pid_alive(int64_t pid);
SY_RING_INTERNAL bool any_consumer_dead(const sy_ring *r, uint64_t among);
SY_RING_INTERNAL void reap_dead_consumers(sy_ring *r);
SY_RING_INTERNAL bool abandon_dead_claim(sy_ring *r, int64_t want);
SY_RING_INTERNAL int64_t mark_dead_cursor(sy_ring *r, sy_producer_record *rec);
SY_RING_INTERNAL bool stream_drained(const sy_ring *r, int64_t want, uint64_t upstream);
SY_RING_INTERNAL int registry_lock(sy_ring *r);
SY_RING_INTERNAL void registry_unlock(sy_ring *r);

/* ---- waits (ring_wait.c) ---------------------------------------------------------------------------- */

/* ---- wait strategies (ring_wait.c) ------------------------------------------------------------------------------
 *
 * A wait is a probe (is what I want there yet?), a deadline, and the side it waits on. Each
 * strategy is one function; all share `wait_checkpoint` for deadline, end of stream and liveness.
 */
struct sy_wait {
    sy_ring *ring;
    int64_t (*probe)(void *ctx, int64_t want);  /* returns >= want when ready */
    void *ctx;
    int64_t want;
    int64_t timeout_ns;                         /* < 0: none; turned into deadline_ns by wait_for */
    int64_t deadline_ns;
    int64_t next_liveness_ns;
    _Atomic int64_t *heartbeat;                 /* this waiter's own liveness record */
    enum wait_side side;
    uint64_t upstream;                          /* consumers a waiting consumer runs after */
    sy_ring_consumer *consumer;                 /* data waits: skips sequences whose producer died */
    int64_t slice_end_ns;                       /* SY_RING_WAIT_SLICE from here (INT64_MAX: never) */
};

SY_RING_INTERNAL int wait_for(struct sy_wait *w, int64_t *got);
SY_RING_INTERNAL void futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t wait_ns, int flags);
SY_RING_INTERNAL void futex_wake_all(_Atomic uint32_t *word, int flags);

/* The other half of the blocking strategy: after a release store that a sleeper may wait for. */
static inline void wake_waiters(sy_ring *r) {
    if (r->wait != SY_WAIT_BLOCKING) return;
    atomic_thread_fence(memory_order_seq_cst); /* StoreLoad: our publish before the sleeper bit */
    sy_ring_wake *wake = &r->header->wake;
    uint32_t word = atomic_load_explicit(&wake->word, memory_order_relaxed);
    /* Whoever clears the bit wakes everyone asleep on the old value; a sleeper arriving after sees
     * a new value (its futex_wait returns at once) or our publish in its re-check. */
    while (word & WAKE_SLEEPER) {
        if (atomic_compare_exchange_weak_explicit(&wake->word, &word, (word + WAKE_EPOCH) & ~WAKE_SLEEPER,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            futex_wake_all(&wake->word, r->futex_op_flags);
            return;
        }
    }
}

/* ---- barriers (ring_barrier.c) ----------------------------------------------------------------------- */

SY_RING_INTERNAL int64_t highest_published(const sy_ring *r, int64_t want);
SY_RING_INTERNAL uint64_t leaves_of(const struct sy_ring_header *h, uint64_t active);
SY_RING_INTERNAL bool skip_lost(sy_ring_consumer *c, int64_t want);
SY_RING_INTERNAL bool skip_dead_claims(sy_ring_consumer *c, bool look_for_dead);

#endif /* SY_RING_INTERNAL_H */
