/* ring.c: the Disruptor core: padded sequences, sequencers, barriers, wait strategies.
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
 *
 * Memory-ordering contract: a producer writes a slot's item, then publishes it with a release store
 * of the slot's header (and, single producer, of the cursor after a batch); a consumer acquire-loads
 * the header (or the cursor) before reading the item. A consumer releases slots with a release
 * store of its sequence; a producer acquire-loads the gating sequences before overwriting.
 * Dependent consumers acquire-load their upstream consumers' sequences, which transitively carries
 * the producer's release.
 */
#include "ring.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SY_RING_MAGIC 0x474E495259504D59ull  /* "YMPYRING" little-endian: identifies our segments */
/* 4: the work pool's blocks at the header's end (sympathy.Queue: work sequence, item counts, one
 * gate per worker, one claim intent per producer).
 * 3: the origin block at the header's end (creation nonce, creator pid, item type).
 * 2: per-slot published headers, strided slots, the sequence area (1 had a cursor-only single
 * producer and a separate lap-number array for multi producers). */
#define SY_RING_VERSION 4u
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
    int32_t payload_offset;     /* bytes from a slot's header to its item */
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
    /* sympathy.Queue's shared state (struct sy_work_pool, defined with its code at the end of this
     * file); zero, and unused, in a plain ring. */
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
};

/* The private side of a producer. The single-producer claim state lives here, on its own block,
 * because only the producing thread touches it. */
struct sy_ring_producer {
    _Alignas(SY_DESTRUCTIVE_SIZE) int64_t next_claim;  /* single: last claimed */
    int64_t gating_cache;                               /* single: cached min of gating sequences */
    sy_ring *ring;
    int record;
};

struct sy_ring_consumer {
    _Alignas(SY_DESTRUCTIVE_SIZE) int64_t next;         /* next sequence to read */
    int64_t available_cache;                            /* highest known readable: the read_idx_cache */
    _Atomic int64_t *sequence;                          /* our release sequence in the shared area */
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
    return (sy_slot_header *)(r->slots + (size_t)(sequence & r->mask) * (size_t)r->slot_stride);
}

static inline void *item_at(const sy_ring *r, int64_t sequence) {
    return (unsigned char *)slot_header(r, sequence) + SLOT_HEADER_BYTES;
}

/* acquire: the item written before the producer's release store of this header is visible. */
static inline bool slot_published(const sy_ring *r, int64_t sequence) {
    return atomic_load_explicit(&slot_header(r, sequence)->published_plus_one, memory_order_acquire) == sequence + 1;
}

static int64_t deadline_from(int64_t timeout_ns) {
    int64_t now = (int64_t)sy_now_ns();
    return timeout_ns < 0 || timeout_ns > INT64_MAX - now ? INT64_MAX : now + timeout_ns;  /* saturate */
}

/* Whatever it returns (woken, EAGAIN: the word moved first, EINTR, ETIMEDOUT) the caller re-checks
 * its condition, so the result is not needed. */
static void futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t wait_ns, int flags) {
    struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT | flags, expected, &ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word, int flags) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE | flags, INT_MAX, NULL, NULL, 0);
}

/* kill(pid, 0) says nothing about zombies (killed but not yet reaped), so /proc settles it. */
static bool pid_alive(int64_t pid) {
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

/* Consumers never pass the producers, so the minimum over the leaf consumers is the minimum over
 * all of them; reading only the leaves is what "only leaf consumers gate the producer" buys. */
static int64_t minimum_gating(const sy_ring *r, int64_t no_consumers_value) {
    uint64_t leaves = atomic_load_explicit(&r->header->registry.gating_consumers, memory_order_acquire);
    int64_t minimum = no_consumers_value;
    for (; leaves; leaves &= leaves - 1) {
        int i = __builtin_ctzll(leaves);
        int64_t s = atomic_load_explicit(consumer_sequence(r, i), memory_order_acquire);
        if (s < minimum) minimum = s;
    }
    return minimum;
}

/* ---- liveness ------------------------------------------------------------------------------------ */

enum wait_side { WAITING_FOR_DATA, WAITING_FOR_SPACE };

/* A waiter that has waited this long starts checking that its peers still exist. */
#define LIVENESS_PERIOD_NS 10000000  /* 10 ms: a dead peer is noticed within about that */

static bool any_producer_dead(const sy_ring *r) {
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        int64_t pid = atomic_load_explicit(&r->header->producers[i].pid, memory_order_acquire);
        if (pid != 0 && !pid_alive(pid)) return true;
    }
    return false;
}

static bool any_consumer_dead(const sy_ring *r, uint64_t among) {
    uint64_t active = among & atomic_load_explicit(&r->header->registry.active_consumers, memory_order_acquire);
    for (; active; active &= active - 1) {
        int64_t pid = atomic_load_explicit(&r->header->consumers[__builtin_ctzll(active)].pid,
                                           memory_order_acquire);
        if (pid != 0 && !pid_alive(pid)) return true;
    }
    return false;
}

static int64_t highest_published(const sy_ring *r, int64_t want);

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
static bool stream_drained(const sy_ring *r, int64_t want, uint64_t upstream) {
    return highest_published(r, want) < want || any_consumer_detached(r, upstream);
}

/* ---- wait strategies ------------------------------------------------------------------------------
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
};

/* Returns SY_OK to keep waiting, or why to stop. Called every few hundred spins, not every spin:
 * clock_gettime costs ~20 ns, far more than one PAUSE. */
static int wait_checkpoint(struct sy_wait *w) {
    int64_t now = (int64_t)sy_now_ns();
    sy_ring_registry *reg = &w->ring->header->registry;
    if (atomic_load_explicit(&reg->closed, memory_order_acquire)) {
        if (w->side == WAITING_FOR_SPACE || stream_drained(w->ring, w->want, w->upstream)) return SY_ECLOSED;
    }
    if (now >= w->next_liveness_ns) {
        w->next_liveness_ns = now + LIVENESS_PERIOD_NS;
        if (w->heartbeat) atomic_store_explicit(w->heartbeat, now, memory_order_relaxed);
        /* Data comes from the producers, or through the consumers this one runs after; space is
         * freed by every consumer (an upstream one that died stalls its leaves for good). */
        bool dead = w->side == WAITING_FOR_DATA
                        ? any_producer_dead(w->ring) || any_consumer_dead(w->ring, w->upstream)
                        : any_consumer_dead(w->ring, UINT64_MAX);
        if (dead) return SY_ECLOSED;
    }
    if (now >= w->deadline_ns) return SY_ETIMEDOUT;
    return SY_OK;
}

#define SPINS_PER_CHECK 256

/* Use when each side owns a core and latency is everything (the ping-pong benchmark, pinned
 * pipelines). Burns its core while waiting; on an oversubscribed machine it starves the peer. */
static int wait_busy_spin(struct sy_wait *w, int64_t *got) {
    for (;;) {
        for (int i = 0; i < SPINS_PER_CHECK; i++) {
            if ((*got = w->probe(w->ctx, w->want)) >= w->want) return SY_OK;
            sy_cpu_relax();
        }
        int status = wait_checkpoint(w);
        if (status != SY_OK) return status;
    }
}

/* Use when threads may outnumber cores but latency still matters: after a short spin it gives the
 * core to whoever is runnable, which is usually the peer it waits for. */
static int wait_yield(struct sy_wait *w, int64_t *got) {
    for (int spins = 0;; spins++) {
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) return SY_OK;
        if (spins < 100) {
            sy_cpu_relax();
            continue;
        }
        sched_yield();
        if ((spins & 15) == 0) {
            int status = wait_checkpoint(w);
            if (status != SY_OK) return status;
        }
    }
}

/* Use when waits are long or frequent and CPU matters more than microseconds (background stages):
 * spins, yields, then sleeps with exponential backoff from 1 us up to 1 ms. */
static int wait_sleep(struct sy_wait *w, int64_t *got) {
    int64_t nap_ns = 1000;
    for (int spins = 0;; spins++) {
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) return SY_OK;
        if (spins < 100) {
            sy_cpu_relax();
            continue;
        }
        int status = wait_checkpoint(w);
        if (status != SY_OK) return status;
        if (spins < 200) {
            sched_yield();
            continue;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 1000000) nap_ns *= 2;
    }
}

/* Use when waits are long and the waiter must cost nothing (threads > cores, idle pipelines): the
 * waiter sleeps on a futex and the other side wakes it. A sleep and its wake cost tens of
 * microseconds on a VM, so it first spins briefly and yields a few times: a reply that is already
 * on its way never pays for the kernel round trip. The waiter sets the sleeper bit, fences and
 * re-checks; the publisher stores, fences and then reads the bit: at least one of them sees the
 * other (Dekker), so a wake is never lost. */
static int wait_blocking(struct sy_wait *w, int64_t *got) {
    enum { SPIN_PHASE = 64, YIELD_PHASE = SPIN_PHASE + 16 };
    sy_ring_wake *wake = &w->ring->header->wake;
    for (int spins = 0;; spins++) {
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) return SY_OK;
        if (spins < SPIN_PHASE) {
            sy_cpu_relax();
            continue;
        }
        int status = wait_checkpoint(w);
        if (status != SY_OK) return status;
        if (spins < YIELD_PHASE) {
            sched_yield();
            continue;
        }
        uint32_t seen = atomic_fetch_or_explicit(&wake->word, WAKE_SLEEPER, memory_order_relaxed) | WAKE_SLEEPER;
        atomic_thread_fence(memory_order_seq_cst); /* StoreLoad: the sleeper bit before the re-check */
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) return SY_OK;  /* a stale bit costs one wake */
        /* Sleep at most until the deadline or the next liveness check, whichever comes first. */
        int64_t now = (int64_t)sy_now_ns();
        int64_t nap = LIVENESS_PERIOD_NS;
        if (w->deadline_ns - now < nap) nap = w->deadline_ns - now > 0 ? w->deadline_ns - now : 0;
        futex_wait(&wake->word, seen, nap, w->ring->futex_op_flags);
    }
}

/* Probes a waiter makes before it reads the clock: a handoff already on its way (the other side
 * is one cache-line transfer from done) never pays for two clock_gettime calls on its critical
 * path. Every strategy starts by spinning at least this long anyway. */
#define SPINS_BEFORE_CLOCK 32

static int wait_for(struct sy_wait *w, int64_t *got) {
    for (int i = 0; i < SPINS_BEFORE_CLOCK; i++) {
        sy_cpu_relax();
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) return SY_OK;
    }
    w->deadline_ns = deadline_from(w->timeout_ns);  /* late by the spins above: tens of ns */
    w->next_liveness_ns = (int64_t)sy_now_ns() + LIVENESS_PERIOD_NS;
    switch (w->ring->wait) {
    case SY_WAIT_BUSY_SPIN: return wait_busy_spin(w, got);
    case SY_WAIT_YIELD: return wait_yield(w, got);
    case SY_WAIT_SLEEP: return wait_sleep(w, got);
    default: return wait_blocking(w, got);
    }
}

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

/* ---- region creation, attach, validation --------------------------------------------------------- */

/* FNV-1a over bytes [from, to) of a header block. */
static uint64_t fnv1a(const void *block, size_t from, size_t to) {
    const unsigned char *p = block;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = from; i < to; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t identity_checksum(const sy_ring_identity *id) {
    /* the fields between `magic` (written last) and `checksum` */
    return fnv1a(id, offsetof(sy_ring_identity, version), offsetof(sy_ring_identity, checksum));
}

static int64_t align_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

/* Header plus item, rounded so that a slot never straddles a cache line it need not: up to 56-byte
 * items get a power-of-two stride (16, 32, 64: the header and the whole item share one line);
 * larger ones start on a line, so the header and the item's first bytes arrive together. */
static int64_t slot_stride_for(int64_t slot_size) {
    int64_t bytes = SLOT_HEADER_BYTES + slot_size;
    if (bytes > SY_CACHE_LINE) return align_up(bytes, SY_CACHE_LINE);
    int64_t stride = 2 * SLOT_HEADER_BYTES;
    while (stride < bytes) stride *= 2;
    return stride;
}

static bool valid_sequence_stride(int64_t stride) {
    return stride == SY_DESTRUCTIVE_SIZE || stride == SY_CACHE_LINE || stride == (int64_t)sizeof(int64_t);
}

static int layout_for(int64_t capacity, int64_t slot_size, int64_t *slot_stride, int64_t *slots_offset,
                      int64_t *region_bytes) {
    if (capacity < 2 || (capacity & (capacity - 1)) || capacity > ((int64_t)1 << 40)) return SY_EINVAL;
    if (slot_size < 1 || slot_size > ((int64_t)1 << 30)) return SY_EINVAL;
    *slot_stride = slot_stride_for(slot_size);
    if (capacity > (INT64_MAX / 4) / *slot_stride) return SY_EINVAL;
    *slots_offset = (int64_t)sizeof(struct sy_ring_header);
    *region_bytes = align_up(*slots_offset + capacity * *slot_stride, 4096);
    return SY_OK;
}

/* Our magic and version, checksum and a layout that adds up: what attach reads (with pread) from
 * the file before it maps anything. */
static int validate_identity(const sy_ring_identity *id) {
    /* acquire: pairs with the creator's release of the magic, so the fields below are complete */
    if (atomic_load_explicit(&id->magic, memory_order_acquire) != SY_RING_MAGIC) return SY_EINVAL;
    /* Our magic in another format: say so (the caller names both versions) rather than "corrupt". */
    if (id->version != SY_RING_VERSION) return SY_EUNSUPPORTED;
    if (id->header_bytes != sizeof(struct sy_ring_header)) return SY_EINVAL;
    if (id->checksum != identity_checksum(id)) return SY_EINVAL;
    if (id->producer_kind != SY_RING_SINGLE_PRODUCER && id->producer_kind != SY_RING_MULTI_PRODUCER) return SY_EINVAL;
    if (id->wait < SY_WAIT_BUSY_SPIN || id->wait > SY_WAIT_BLOCKING) return SY_EINVAL;
    if (id->max_consumers != SY_RING_MAX_CONSUMERS || id->max_producers != SY_RING_MAX_PRODUCERS) return SY_EINVAL;
    if (!valid_sequence_stride(id->sequence_stride) || id->payload_offset != SLOT_HEADER_BYTES) return SY_EINVAL;
    int64_t slot_stride, slots_offset, bytes;
    if (layout_for(id->capacity, id->slot_size, &slot_stride, &slots_offset, &bytes) != SY_OK) return SY_EINVAL;
    if (slot_stride != id->slot_stride || slots_offset != id->slots_offset) return SY_EINVAL;
    if (bytes != id->region_bytes) return SY_EINVAL;
    return SY_OK;
}

static uint64_t origin_checksum(const sy_ring_origin *o) {
    return fnv1a(o, 0, offsetof(sy_ring_origin, checksum));  /* every field before `checksum` */
}

static bool valid_pid(int64_t pid) { return pid >= 0 && pid <= INT32_MAX; }

/* The fields that change while the ring runs cannot be checksummed: each must lie in its possible
 * range, so a scribbled segment is refused at attach instead of being trusted. */
static int validate_live_fields(const struct sy_ring_header *h, int64_t capacity, int64_t sequence_stride) {
    const sy_ring_registry *reg = &h->registry;
    int32_t closed = atomic_load_explicit(&reg->closed, memory_order_relaxed);
    int32_t producers = atomic_load_explicit(&reg->producers, memory_order_relaxed);
    if ((closed != 0 && closed != 1) || producers < 0 || producers > SY_RING_MAX_PRODUCERS) return SY_EINVAL;
    if (!valid_pid(atomic_load_explicit(&reg->lock_pid, memory_order_relaxed))) return SY_EINVAL;
    for (int i = 0; i < SY_RING_MAX_CONSUMERS; i++)
        if (!valid_pid(atomic_load_explicit(&h->consumers[i].pid, memory_order_relaxed))) return SY_EINVAL;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++)
        if (!valid_pid(atomic_load_explicit(&h->producers[i].pid, memory_order_relaxed))) return SY_EINVAL;
    /* Every consumer sequence (and the multi-producer gating cache, a minimum of them) is read
     * before the cursor, which only grows, so it is checked against a cursor at least as new. */
    const unsigned char *room = h->sequences.room;
    int64_t highest = NO_SEQUENCE, lowest = NO_SEQUENCE;
    for (int i = SEQ_FIRST_CONSUMER; i <= SEQ_GATING_CACHE; i++) {
        int64_t s = atomic_load_explicit((const _Atomic int64_t *)(room + i * sequence_stride), memory_order_acquire);
        if (s > highest) highest = s;
        if (s < lowest) lowest = s;
    }
    int64_t cursor = atomic_load_explicit((const _Atomic int64_t *)(room + SEQ_CURSOR * sequence_stride),
                                          memory_order_acquire);
    /* A single producer stores the cursor after a batch's slot headers, so a consumer may be up to
     * a batch (at most a lap) past it for a moment. */
    if (lowest < NO_SEQUENCE || cursor < NO_SEQUENCE || cursor > INT64_MAX - 4 * capacity || highest > cursor + capacity)
        return SY_EINVAL;
    return SY_OK;
}

static int validate_origin(const sy_ring_origin *o) {
    if (o->checksum != origin_checksum(o) || o->nonce == 0 || !valid_pid(o->creator_pid)) return SY_EINVAL;
    if (o->item_type_bytes >= SY_RING_ITEM_TYPE_MAX || o->item_type[o->item_type_bytes] != '\0') return SY_EINVAL;
    return SY_OK;
}

int sy_ring_validate(const void *region, int64_t region_bytes) {
    if (region_bytes < (int64_t)sizeof(sy_ring_identity)) return SY_EINVAL;
    const struct sy_ring_header *h = region;
    int status = validate_identity(&h->identity);
    if (status != SY_OK) return status;
    if (region_bytes < (int64_t)sizeof(struct sy_ring_header) || h->identity.region_bytes > region_bytes)
        return SY_EINVAL;
    status = validate_origin(&h->origin);
    if (status != SY_OK) return status;
    return validate_live_fields(h, h->identity.capacity, h->identity.sequence_stride);
}

uint32_t sy_ring_format_version(void) { return SY_RING_VERSION; }

int64_t sy_ring_region_bytes(int64_t capacity, int64_t slot_size) {
    int64_t slot_stride, slots_offset, bytes;
    return layout_for(capacity, slot_size, &slot_stride, &slots_offset, &bytes) == SY_OK ? bytes : -1;
}

/* Random, never 0 (0 marks "no origin"): tells apart two rings created under one name. */
static uint64_t creation_nonce(void) {
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = sy_now_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    return nonce ? nonce : 1;
}

static void init_region(struct sy_ring_header *h, const sy_ring_config *c, int64_t sequence_stride,
                        int64_t slot_stride, int64_t slots_offset, int64_t region_bytes) {
    /* The region comes zeroed from mmap/ftruncate; only the non-zero fields are set. Zeroed slot
     * headers already read "unpublished" (they hold sequence + 1). */
    sy_ring_identity *id = &h->identity;
    id->version = SY_RING_VERSION;
    id->header_bytes = sizeof(struct sy_ring_header);
    id->capacity = c->capacity;
    id->slot_size = c->slot_size;
    id->slot_stride = slot_stride;
    id->producer_kind = c->producer_kind;
    id->wait = c->wait;
    id->max_consumers = SY_RING_MAX_CONSUMERS;
    id->max_producers = SY_RING_MAX_PRODUCERS;
    id->sequence_stride = (int32_t)sequence_stride;
    id->payload_offset = (int32_t)SLOT_HEADER_BYTES;
    id->slots_offset = slots_offset;
    id->region_bytes = region_bytes;
    for (int i = 0; i < SEQ_COUNT; i++)
        atomic_init((_Atomic int64_t *)(h->sequences.room + i * sequence_stride), NO_SEQUENCE);
    id->checksum = identity_checksum(id);
    sy_ring_origin *o = &h->origin;
    o->nonce = creation_nonce();
    o->creator_pid = (int64_t)getpid();
    if (c->item_type) {  /* length checked by sy_ring_create */
        o->item_type_bytes = (uint32_t)strlen(c->item_type);
        memcpy(o->item_type, c->item_type, o->item_type_bytes);
    }
    o->checksum = origin_checksum(o);
    /* The magic goes last, with release: an attacher that sees it sees the rest. */
    atomic_store_explicit(&id->magic, SY_RING_MAGIC, memory_order_release);
}

static int wrap_region(void *region, size_t bytes, int shared, sy_ring **out) {
    sy_ring *r = calloc(1, sizeof *r);
    if (!r) return SY_ENOMEM;
    struct sy_ring_header *h = region;
    r->header = h;
    r->mask = h->identity.capacity - 1;
    r->slot_size = h->identity.slot_size;
    r->slot_stride = h->identity.slot_stride;
    r->wait = h->identity.wait;
    r->producer_kind = h->identity.producer_kind;
    r->slots = (unsigned char *)region + h->identity.slots_offset;
    r->sequences = h->sequences.room;
    r->sequence_stride = h->identity.sequence_stride;
    r->cursor = (_Atomic int64_t *)(r->sequences + SEQ_CURSOR * r->sequence_stride);
    r->gating_cache = (_Atomic int64_t *)(r->sequences + SEQ_GATING_CACHE * r->sequence_stride);
    r->shared = shared;
    r->futex_op_flags = shared ? 0 : FUTEX_PRIVATE_FLAG;
    r->region_bytes = bytes;
    atomic_init(&r->refs, 1);
    *out = r;
    return SY_OK;
}

static int valid_name(const char *name) {
    size_t n = strnlen(name, SY_RING_NAME_MAX + 1);
    return name[0] == '/' && n > 1 && n <= SY_RING_NAME_MAX && !strchr(name + 1, '/');
}

/* Fails with errno set, leaving the caller to close and unlink. */
static int fail_os(int error) {
    errno = error;
    return SY_EOS;
}

/* tmpfs gives a page its memory on first touch: without a reservation a full /dev/shm surfaces as
 * SIGBUS at some later write into a slot. posix_fallocate reserves it all now (ENOSPC here instead).
 * tmpfs checks only the filesystem's total size up front and otherwise fills memory page by page
 * before it gives up, so a request beyond what is free is refused first, without touching a page. */
static int reserve_segment(int fd, int64_t bytes) {
    if (ftruncate(fd, (off_t)bytes) != 0) return SY_EOS;
    struct statvfs fs;
    /* f_blocks 0: a tmpfs mounted without a size limit reports no figures; fallocate alone decides */
    if (fstatvfs(fd, &fs) == 0 && fs.f_blocks && (uint64_t)bytes > (uint64_t)fs.f_bavail * fs.f_frsize)
        return fail_os(ENOSPC);
    int error = posix_fallocate(fd, 0, (off_t)bytes);
    return error ? fail_os(error) : SY_OK;
}

static int create_segment(const char *name, int64_t bytes, void **region) {
    /* O_EXCL: never adopt someone else's segment. */
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return SY_EOS;
    /* A shared lock for as long as this process maps the segment (the mapping holds the open file,
     * and with it the lock, past close(fd)): sy_ring_reclaim_stale removes only an unlocked one.
     * fchmod: the umask may have cleared bits of 0600, and attach refuses anything but 0600. */
    int status = flock(fd, LOCK_SH) == 0 && fchmod(fd, 0600) == 0 ? reserve_segment(fd, bytes) : SY_EOS;
    if (status == SY_OK) {
        *region = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (*region == MAP_FAILED) status = SY_EOS;
    }
    int saved = errno;
    close(fd);
    if (status != SY_OK) shm_unlink(name);
    errno = saved;
    return status;
}

int sy_ring_create(const sy_ring_config *c, const char *name, sy_ring **out) {
    if (!c || !out) return SY_EINVAL;
    if (c->producer_kind != SY_RING_SINGLE_PRODUCER && c->producer_kind != SY_RING_MULTI_PRODUCER) return SY_EINVAL;
    if (c->wait < SY_WAIT_BUSY_SPIN || c->wait > SY_WAIT_BLOCKING) return SY_EINVAL;
    if (c->item_type && strnlen(c->item_type, SY_RING_ITEM_TYPE_MAX) >= SY_RING_ITEM_TYPE_MAX) return SY_EINVAL;
    int64_t sequence_stride = c->sequence_stride ? c->sequence_stride : SY_DESTRUCTIVE_SIZE;
    if (!valid_sequence_stride(sequence_stride)) return SY_EINVAL;
    int64_t slot_stride, slots_offset, bytes;
    int status = layout_for(c->capacity, c->slot_size, &slot_stride, &slots_offset, &bytes);
    if (status != SY_OK) return status;
    if (name && !valid_name(name)) return SY_EINVAL;
    void *region;
    if (!name) {
        region = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (region == MAP_FAILED) return errno == ENOMEM ? SY_ENOMEM : SY_EOS;
    } else {
        status = create_segment(name, bytes, &region);
        if (status != SY_OK) return status;
    }
    init_region(region, c, sequence_stride, slot_stride, slots_offset, bytes);
    status = wrap_region(region, (size_t)bytes, name != NULL, out);
    if (status != SY_OK) {
        munmap(region, (size_t)bytes);
        if (name) shm_unlink(name);
    }
    return status;
}

/* Only our own user's segments, closed to everyone else: another user's segment (even one opened
 * up with chmod 666) could feed us its items, or shrink under our mapping and kill us with SIGBUS. */
static bool segment_is_ours(const struct stat *st) {
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && (st->st_mode & 077) == 0;
}

int sy_ring_attach(const char *name, sy_ring **out) {
    if (!name || !out || !valid_name(name)) return SY_EINVAL;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return SY_EOS;
    struct stat st;
    sy_ring_identity id;
    int status = SY_OK;
    if (fstat(fd, &st) != 0) status = SY_EOS;
    else if (!segment_is_ours(&st)) status = fail_os(EPERM);
    /* The header first, read rather than mapped: the file must be exactly the region it describes
     * before any of it is mapped (a short file would SIGBUS on the first access past its end). */
    else if (pread(fd, &id, sizeof id, 0) != (ssize_t)sizeof id) status = SY_EINVAL;
    else if ((status = validate_identity(&id)) == SY_OK && id.region_bytes != (int64_t)st.st_size) status = SY_EINVAL;
    /* The shared lock that marks this process as a user of the segment (see create_segment). Only
     * a reclaim holds it exclusively, and then the segment is stale and about to go: no such ring. */
    if (status == SY_OK && flock(fd, LOCK_SH | LOCK_NB) != 0) status = fail_os(errno == EWOULDBLOCK ? ENOENT : errno);
    void *region = MAP_FAILED;
    if (status == SY_OK) {
        region = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (region == MAP_FAILED) status = SY_EOS;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    if (status != SY_OK) return status;
    status = sy_ring_validate(region, (int64_t)st.st_size);
    if (status == SY_OK) status = wrap_region(region, (size_t)st.st_size, 1, out);
    if (status != SY_OK) munmap(region, (size_t)st.st_size);
    return status;
}

static void ring_retain(sy_ring *r) { atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); }

void sy_ring_free(sy_ring *r) {
    if (!r) return;
    /* acq_rel: every use of the mapping by other holders happens before the unmap */
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
    munmap(r->header, r->region_bytes);
    free(r);
}

int sy_ring_unlink(const char *name) {
    if (!name || !valid_name(name)) return SY_EINVAL;
    return shm_unlink(name) == 0 ? SY_OK : SY_EOS;
}

/* The origin of the segment a name holds now, read from the file (not from anyone's mapping). */
static bool read_origin(int fd, sy_ring_origin *o) {
    return pread(fd, o, sizeof *o, offsetof(struct sy_ring_header, origin)) == (ssize_t)sizeof *o &&
           validate_origin(o) == SY_OK;
}

int sy_ring_unlink_own(const char *name, uint64_t nonce) {
    if (!name || !valid_name(name)) return SY_EINVAL;
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0) return errno == ENOENT ? 0 : SY_EOS;
    sy_ring_origin o;
    bool ours = read_origin(fd, &o) && o.nonce == nonce;
    close(fd);
    /* Between the check and the unlink only a cleanup() or a reclaim (of a segment nobody maps)
     * can replace the name; a plain create cannot while it exists. */
    if (!ours) return 0;
    if (shm_unlink(name) == 0) return 1;
    return errno == ENOENT ? 0 : SY_EOS;
}

/* A segment whose creation never got as far as the magic: its creator died mid-way (a live one
 * holds the lock from its first microseconds, and is given this long besides). */
#define UNFINISHED_AGE_S 2

int sy_ring_reclaim_stale(const char *name, int64_t *creator_pid) {
    if (!name || !creator_pid || !valid_name(name)) return SY_EINVAL;
    *creator_pid = 0;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return errno == ENOENT ? 1 : SY_EOS;
    struct stat st, now;
    sy_ring_identity id;
    bool stale = false;
    /* LOCK_EX succeeds only when no process maps it; held until close, so two processes reclaiming
     * at once cannot both remove (the second would remove the first one's new segment). */
    if (fstat(fd, &st) == 0 && segment_is_ours(&st) && flock(fd, LOCK_EX | LOCK_NB) == 0) {
        memset(&id, 0, sizeof id);
        ssize_t got = pread(fd, &id, sizeof id, 0);
        uint64_t magic = atomic_load_explicit(&id.magic, memory_order_relaxed);
        if (got == (ssize_t)sizeof id && magic == SY_RING_MAGIC && id.version == SY_RING_VERSION) {
            sy_ring_origin o;
            if (read_origin(fd, &o)) *creator_pid = o.creator_pid;
            stale = true;
        } else if (got >= 0 && magic == 0) {
            stale = time(NULL) - st.st_mtime >= UNFINISHED_AGE_S;
        }  /* anything else is not a ring of this version: not ours to remove */
    }
    /* Still the same file under the name (not one a cleanup() and a create put there meanwhile)? */
    if (stale) {
        int again = shm_open(name, O_RDONLY, 0);
        stale = again >= 0 && fstat(again, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino;
        if (again >= 0) close(again);
    }
    int status = stale ? (shm_unlink(name) == 0 || errno == ENOENT ? 1 : SY_EOS) : 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return status;
}

uint64_t sy_ring_nonce(const sy_ring *r) { return r->header->origin.nonce; }

int sy_ring_item_type(const sy_ring *r, char *out, int max_bytes) {
    const sy_ring_origin *o = &r->header->origin;
    int n = (int)o->item_type_bytes;
    if (!out || max_bytes <= n) return SY_EINVAL;
    memcpy(out, o->item_type, (size_t)n);
    out[n] = '\0';
    return n;
}

int sy_ring_get_info(const sy_ring *r, sy_ring_info *out) {
    const sy_ring_identity *id = &r->header->identity;
    out->capacity = id->capacity;
    out->slot_size = id->slot_size;
    out->producer_kind = id->producer_kind;
    out->wait = id->wait;
    out->shared = r->shared;
    out->closed = atomic_load_explicit(&r->header->registry.closed, memory_order_acquire);
    out->cursor = atomic_load_explicit(r->cursor, memory_order_acquire);
    out->region_bytes = id->region_bytes;
    out->header_bytes = (int64_t)sizeof(struct sy_ring_header);
    out->slots_offset = id->slots_offset;
    out->slot_stride = id->slot_stride;
    out->payload_offset = id->payload_offset;
    out->sequence_stride = id->sequence_stride;
    return SY_OK;
}

void *sy_ring_slots(const sy_ring *r) { return r->slots + SLOT_HEADER_BYTES; }

int sy_ring_close_stream(sy_ring *r) {
    atomic_store_explicit(&r->header->registry.closed, 1, memory_order_release);
    /* Every sleeper must re-check, whatever the strategy flag says. */
    atomic_fetch_add_explicit(&r->header->wake.word, WAKE_EPOCH, memory_order_seq_cst); /* new value: no sleeper stays */
    futex_wake_all(&r->header->wake.word, r->futex_op_flags);
    return SY_OK;
}

int sy_ring_layout_offsets(const sy_ring *r, int64_t *out, int n) {
    const unsigned char *base = (const unsigned char *)r->header;
    const int64_t offsets[] = {
        (const unsigned char *)r->cursor - base, (const unsigned char *)r->gating_cache - base,
        (const unsigned char *)consumer_sequence(r, 0) - base, (const unsigned char *)consumer_sequence(r, 1) - base,
        offsetof(struct sy_ring_header, wake), offsetof(struct sy_ring_header, registry),
        offsetof(struct sy_ring_header, consumers), offsetof(struct sy_ring_header, producers),
        sizeof(sy_consumer_record), sizeof(sy_producer_record), sizeof(struct sy_ring_header),
        r->slots - base, r->slot_stride, SLOT_HEADER_BYTES,
        offsetof(struct sy_ring_producer, gating_cache), offsetof(struct sy_ring_consumer, available_cache),
    };
    int count = (int)(sizeof offsets / sizeof offsets[0]);
    for (int i = 0; i < n && i < count; i++) out[i] = offsets[i];
    return count;
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

static int registry_lock(sy_ring *r) {
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

static void registry_unlock(sy_ring *r) {
    atomic_store_explicit(&r->header->registry.lock_pid, 0, memory_order_release);
}

/* ---- producers ------------------------------------------------------------------------------------ */

int sy_ring_producer_open(sy_ring *r, sy_ring_producer **out) {
    sy_ring_registry *reg = &r->header->registry;
    if (atomic_load_explicit(&reg->closed, memory_order_acquire)) return SY_ECLOSED;
    sy_ring_producer *p = aligned_alloc(SY_DESTRUCTIVE_SIZE, align_up(sizeof *p, SY_DESTRUCTIVE_SIZE));
    if (!p) return SY_ENOMEM;
    int status = registry_lock(r);
    if (status != SY_OK) {
        free(p);
        return status;
    }
    int record = -1;
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER && atomic_load_explicit(&reg->producers, memory_order_relaxed) > 0) {
        status = SY_EINVAL;  /* a single-producer ring has exactly one producer */
    } else {
        for (int i = 0; i < SY_RING_MAX_PRODUCERS && record < 0; i++)
            if (atomic_load_explicit(&r->header->producers[i].pid, memory_order_relaxed) == 0) record = i;
        if (record < 0) status = SY_EINVAL;
    }
    if (status == SY_OK) {
        atomic_store_explicit(&r->header->producers[record].heartbeat_ns, (int64_t)sy_now_ns(), memory_order_relaxed);
        atomic_store_explicit(&r->header->producers[record].pid, (int64_t)getpid(), memory_order_release);
        atomic_fetch_add_explicit(&reg->producers, 1, memory_order_relaxed);
    }
    registry_unlock(r);
    if (status != SY_OK) {
        free(p);
        return status;
    }
    ring_retain(r);
    p->ring = r;
    p->record = record;
    p->next_claim = atomic_load_explicit(r->cursor, memory_order_acquire);
    p->gating_cache = NO_SEQUENCE;
    *out = p;
    return SY_OK;
}

void sy_ring_producer_close(sy_ring_producer *p) {
    if (!p) return;
    sy_ring *r = p->ring;
    if (registry_lock(r) == SY_OK) {
        atomic_store_explicit(&r->header->producers[p->record].pid, 0, memory_order_release);
        atomic_fetch_sub_explicit(&r->header->registry.producers, 1, memory_order_relaxed);
        registry_unlock(r);
    }
    free(p);
    sy_ring_free(r);
}

struct space_probe {
    sy_ring *ring;
    int64_t no_consumers_value;
};

/* "Ready" when the minimum gating sequence has reached the wrap point we need. */
static int64_t probe_space(void *ctx, int64_t wrap_point) {
    (void)wrap_point;  /* the wait compares the minimum with it */
    struct space_probe *s = ctx;
    return minimum_gating(s->ring, s->no_consumers_value);
}

static int wait_for_space(sy_ring_producer *p, int64_t wrap_point, int64_t claimed, int64_t timeout_ns,
                          int64_t *gating) {
    struct space_probe probe = {.ring = p->ring, .no_consumers_value = claimed};
    struct sy_wait w = {.ring = p->ring, .probe = probe_space, .ctx = &probe, .want = wrap_point,
                        .timeout_ns = timeout_ns, .side = WAITING_FOR_SPACE,
                        .heartbeat = &p->ring->header->producers[p->record].heartbeat_ns};
    return wait_for(&w, gating);
}

/* Single producer: nobody else moves the cursor, so the claim is private arithmetic; the shared
 * gating sequences are read only when the cached minimum says the ring might be full. */
static int claim_single(sy_ring_producer *p, int64_t n, int64_t timeout_ns, int64_t *hi) {
    int64_t next = p->next_claim + n;
    int64_t wrap_point = next - ring_capacity(p->ring);
    if (wrap_point > p->gating_cache) {
        int64_t gating;
        int status = wait_for_space(p, wrap_point, p->next_claim, timeout_ns, &gating);
        if (status != SY_OK) return status;
        p->gating_cache = gating;
    }
    p->next_claim = next;
    *hi = next;
    return SY_OK;
}

/* Multi producer, no deadline: fetch-add claims first and waits for space after (LMAX's next()).
 * One uncontended RMW, but a claim cannot be undone, so it is used only when the caller will wait
 * as long as the consumers live; a dead consumer or a closed stream still ends the wait. */
static int claim_multi_untimed(sy_ring_producer *p, int64_t n, int64_t *hi) {
    sy_ring *r = p->ring;
    int64_t current = atomic_fetch_add_explicit(r->cursor, n, memory_order_relaxed);
    int64_t next = current + n;
    int64_t wrap_point = next - ring_capacity(r);
    int64_t cached = atomic_load_explicit(r->gating_cache, memory_order_acquire);
    /* cached > current: the cache predates a consumer joining at the cursor; refresh it. */
    if (wrap_point > cached || cached > current) {
        int64_t gating;
        int status = wait_for_space(p, wrap_point, current, -1, &gating);
        if (status != SY_OK) return status;
        /* release: a producer trusting this cache inherits our acquire of the consumer sequences */
        atomic_store_explicit(r->gating_cache, gating, memory_order_release);
    }
    *hi = next;
    return SY_OK;
}

/* Multi producer with a deadline: claim by compare-and-swap only once the space is there (LMAX's
 * tryNext), so a timeout leaves no claimed-but-never-published hole behind. */
static int claim_multi_timed(sy_ring_producer *p, int64_t n, int64_t timeout_ns, int64_t *hi) {
    sy_ring *r = p->ring;
    int64_t deadline = deadline_from(timeout_ns);
    for (;;) {
        int64_t current = atomic_load_explicit(r->cursor, memory_order_relaxed);
        int64_t next = current + n;
        int64_t wrap_point = next - ring_capacity(r);
        int64_t cached = atomic_load_explicit(r->gating_cache, memory_order_acquire);
        if (wrap_point > cached || cached > current) {
            int64_t gating = minimum_gating(r, current);
            if (wrap_point > gating) {
                int64_t left = deadline - (int64_t)sy_now_ns();
                int status = wait_for_space(p, wrap_point, current, left > 0 ? left : 0, &gating);
                if (status != SY_OK) return status;
            }
            atomic_store_explicit(r->gating_cache, gating, memory_order_release);
            if (wrap_point > gating) continue;
        }
        if (atomic_compare_exchange_weak_explicit(r->cursor, &current, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *hi = next;
            return SY_OK;
        }
    }
}

int sy_ring_claim(sy_ring_producer *p, int64_t n, int64_t timeout_ns, int64_t *hi) {
    if (n < 1 || n > ring_capacity(p->ring)) return SY_EINVAL;
    if (atomic_load_explicit(&p->ring->header->registry.closed, memory_order_relaxed)) return SY_ECLOSED;
    if (p->ring->producer_kind == SY_RING_SINGLE_PRODUCER) return claim_single(p, n, timeout_ns, hi);
    return timeout_ns < 0 ? claim_multi_untimed(p, n, hi) : claim_multi_timed(p, n, timeout_ns, hi);
}

/* Each slot says for itself that it is in (release: its item, written before, is visible to a
 * consumer that acquires the header). One rule for both sequencers: under a multi producer a
 * consumer never reads a slot that a slower producer, holding an earlier claim, has not finished
 * (LMAX's availableBuffer, here in the slot's own line). */
static inline void mark_published(sy_ring *r, int64_t sequence) {
    atomic_store_explicit(&slot_header(r, sequence)->published_plus_one, sequence + 1, memory_order_release);
}

/* After the headers. Single producer: the cursor says "everything up to hi", so a consumer far
 * behind learns a whole batch from one line instead of scanning headers; nobody reads it on the
 * item-at-a-time path, so its line stays in our cache and the store costs no transfer there. */
static inline void finish_publish(sy_ring *r, int64_t hi) {
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER) atomic_store_explicit(r->cursor, hi, memory_order_release);
    wake_waiters(r);
}

void sy_ring_publish(sy_ring_producer *p, int64_t lo, int64_t hi) {
    for (int64_t s = lo; s <= hi; s++) mark_published(p->ring, s);
    finish_publish(p->ring, hi);
}

/* How many of the `left` items from `sequence` on sit before the ring's end: a copy walks the
 * slots in at most two runs, stepping a pointer by the slot stride instead of masking and
 * multiplying per item. */
static inline int64_t run_before_end(const sy_ring *r, int64_t sequence, int64_t left) {
    int64_t room = ring_capacity(r) - (sequence & r->mask);
    return left < room ? left : room;
}

/* Copy n items in, publishing each slot as its item lands: one pass over the slot lines, and a
 * consumer may start on the first items while the last are still being copied. 8-byte items
 * (int64, float64: the Python fast paths) get a fixed-size copy, which compiles to one move. */
static void copy_in_and_publish(sy_ring *r, int64_t lo, const unsigned char *src, int64_t n) {
    const size_t size = (size_t)r->slot_size, stride = (size_t)r->slot_stride;
    for (int64_t done = 0, run; done < n; done += run) {
        int64_t sequence = lo + done;
        run = run_before_end(r, sequence, n - done);
        unsigned char *slot = (unsigned char *)slot_header(r, sequence);
        for (int64_t i = 0; i < run; i++, slot += stride, src += size) {
            if (size == sizeof(int64_t)) memcpy(slot + SLOT_HEADER_BYTES, src, sizeof(int64_t));
            else memcpy(slot + SLOT_HEADER_BYTES, src, size);
            /* release: the item above before the header (as in mark_published) */
            atomic_store_explicit(&((sy_slot_header *)slot)->published_plus_one, sequence + i + 1,
                                  memory_order_release);
        }
    }
}

static void copy_out(const sy_ring *r, int64_t lo, unsigned char *dst, int64_t n) {
    const size_t size = (size_t)r->slot_size, stride = (size_t)r->slot_stride;
    for (int64_t done = 0, run; done < n; done += run) {
        run = run_before_end(r, lo + done, n - done);
        const unsigned char *item = item_at(r, lo + done);
        for (int64_t i = 0; i < run; i++, item += stride, dst += size) {
            if (size == sizeof(int64_t)) memcpy(dst, item, sizeof(int64_t));
            else memcpy(dst, item, size);
        }
    }
}

int sy_ring_write(sy_ring_producer *p, const void *items, int64_t n, int64_t timeout_ns, int64_t *written) {
    sy_ring *r = p->ring;
    const unsigned char *src = items;
    int64_t deadline = deadline_from(timeout_ns);
    *written = 0;
    if (n < 0) return SY_EINVAL;
    while (*written < n) {
        int64_t chunk = n - *written < ring_capacity(r) ? n - *written : ring_capacity(r);
        int64_t left = timeout_ns < 0 ? -1 : deadline - (int64_t)sy_now_ns();
        int64_t hi;
        int status = sy_ring_claim(p, chunk, timeout_ns < 0 ? -1 : (left > 0 ? left : 0), &hi);
        if (status != SY_OK) return status;
        copy_in_and_publish(r, hi - chunk + 1, src + *written * r->slot_size, chunk);
        finish_publish(r, hi);
        *written += chunk;
    }
    return SY_OK;
}

int sy_ring_write_one(sy_ring_producer *p, const void *item, int64_t timeout_ns) {
    int64_t hi;
    int status = sy_ring_claim(p, 1, timeout_ns, &hi);
    if (status != SY_OK) return status;
    memcpy(item_at(p->ring, hi), item, (size_t)p->ring->slot_size);
    mark_published(p->ring, hi);
    finish_publish(p->ring, hi);
    return SY_OK;
}

/* The Python per-item fast path for 8-byte items: an int64 crosses the FFI as a plain argument,
 * with no bytes object to build or parse. */
int sy_ring_write_i64(sy_ring_producer *p, int64_t value, int64_t timeout_ns) {
    if (p->ring->slot_size != (int64_t)sizeof value) return SY_EINVAL;
    return sy_ring_write_one(p, &value, timeout_ns);
}

/* ---- consumers ------------------------------------------------------------------------------------ */

static uint64_t leaves_of(const struct sy_ring_header *h, uint64_t active) {
    uint64_t upstream = 0;
    for (uint64_t a = active; a; a &= a - 1)
        upstream |= atomic_load_explicit(&h->consumers[__builtin_ctzll(a)].after_mask, memory_order_relaxed);
    return active & ~upstream;
}

int sy_ring_consumer_open(sy_ring *r, const int *after, int n_after, sy_ring_consumer **out) {
    struct sy_ring_header *h = r->header;
    if (n_after < 0 || n_after > SY_RING_MAX_CONSUMERS || (n_after > 0 && !after)) return SY_EINVAL;
    sy_ring_consumer *c = aligned_alloc(SY_DESTRUCTIVE_SIZE, align_up(sizeof *c, SY_DESTRUCTIVE_SIZE));
    if (!c) return SY_ENOMEM;
    int status = registry_lock(r);
    if (status != SY_OK) {
        free(c);
        return status;
    }
    uint64_t active = atomic_load_explicit(&h->registry.active_consumers, memory_order_relaxed);
    uint64_t after_mask = 0;
    for (int i = 0; i < n_after; i++) {
        if (after[i] < 0 || after[i] >= SY_RING_MAX_CONSUMERS || !(active >> after[i] & 1)) status = SY_EINVAL;
        else after_mask |= 1ull << after[i];
    }
    int record = active == UINT64_MAX ? -1 : __builtin_ctzll(~active);
    if (record < 0) status = SY_EINVAL;
    if (status != SY_OK) {
        registry_unlock(r);
        free(c);
        return status;
    }
    /* Start where the upstream stands: a late joiner sees what is published after it joins, and it
     * never gates the producers more loosely than what it replaces (its start <= theirs). */
    int64_t start = atomic_load_explicit(r->cursor, memory_order_acquire);
    for (uint64_t a = after_mask; a; a &= a - 1) {
        int64_t s = atomic_load_explicit(consumer_sequence(r, __builtin_ctzll(a)), memory_order_acquire);
        if (s < start) start = s;
    }
    sy_consumer_record *rec = &h->consumers[record];
    atomic_store_explicit(consumer_sequence(r, record), start, memory_order_release);
    atomic_store_explicit(&rec->after_mask, after_mask, memory_order_relaxed);
    atomic_store_explicit(&rec->heartbeat_ns, (int64_t)sy_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&rec->pid, (int64_t)getpid(), memory_order_relaxed);
    active |= 1ull << record;
    atomic_store_explicit(&h->registry.active_consumers, active, memory_order_release);
    /* release: a producer that sees the new gating set sees our start sequence */
    atomic_store_explicit(&h->registry.gating_consumers, leaves_of(h, active), memory_order_release);
    registry_unlock(r);

    ring_retain(r);
    c->ring = r;
    c->record = record;
    c->sequence = consumer_sequence(r, record);
    c->next = start + 1;
    c->available_cache = start;
    c->n_after = 0;
    for (uint64_t a = after_mask; a; a &= a - 1) c->after[c->n_after++] = __builtin_ctzll(a);
    *out = c;
    return SY_OK;
}

int sy_ring_consumer_close(sy_ring_consumer *c) {
    if (!c) return SY_OK;
    sy_ring *r = c->ring;
    struct sy_ring_header *h = r->header;
    int status = registry_lock(r);
    if (status != SY_OK) return status;
    uint64_t me = 1ull << c->record;
    uint64_t active = atomic_load_explicit(&h->registry.active_consumers, memory_order_relaxed);
    for (uint64_t a = active & ~me; a; a &= a - 1) {
        if (atomic_load_explicit(&h->consumers[__builtin_ctzll(a)].after_mask, memory_order_relaxed) & me) {
            registry_unlock(r);
            return SY_EINVAL;  /* someone runs after us: close downstream first */
        }
    }
    active &= ~me;
    /* Gating set first: once no producer reads our sequence, the record can be recycled. */
    atomic_store_explicit(&h->registry.gating_consumers, leaves_of(h, active), memory_order_release);
    atomic_store_explicit(&h->registry.active_consumers, active, memory_order_release);
    atomic_store_explicit(&h->consumers[c->record].pid, 0, memory_order_relaxed);
    atomic_store_explicit(&h->consumers[c->record].after_mask, 0, memory_order_relaxed);
    registry_unlock(r);
    wake_waiters(r);  /* a producer blocked on us may now proceed */
    free(c);
    sy_ring_free(r);
    return SY_OK;
}

void sy_ring_consumer_detach(sy_ring_consumer *c) {
    if (!c) return;
    /* pid 0: no liveness checks on it once we are gone; still active, its sequence frozen. */
    sy_ring *r = c->ring;
    atomic_store_explicit(&r->header->consumers[c->record].pid, 0, memory_order_release);
    free(c);
    sy_ring_free(r);
}

int sy_ring_consumer_index(const sy_ring_consumer *c) { return c->record; }

/* The shared sequence, not the private `next`: safe to read from any thread or process. */
int64_t sy_ring_consumer_sequence(const sy_ring_consumer *c) {
    return atomic_load_explicit(c->sequence, memory_order_acquire);
}

/* Slots a consumer checks one by one before a single-producer ring's cursor is asked instead. */
#define PUBLISHED_SCAN 8

/* The highest sequence from `want` on that the producers have published (want - 1: none yet).
 * The first probe is want's own header: on the item-at-a-time path that one line carries the
 * signal and the item together (the cursor would be a second, dependent transfer). A run of
 * published slots is followed header by header; a long one is read from the cursor (single
 * producer: it covers everything up to it) or followed to its end (multi: only the headers know).
 * The scan ends within a lap: slot want + capacity cannot be published before we release want. */
static int64_t highest_published(const sy_ring *r, int64_t want) {
    int64_t s = want, scan_end = want + PUBLISHED_SCAN;
    while (s < scan_end && slot_published(r, s)) s++;
    if (s < scan_end) return s - 1;
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER) {
        /* The cursor is stored after a batch's headers, so it may still lag the headers we saw. */
        int64_t cursor = atomic_load_explicit(r->cursor, memory_order_acquire);
        return cursor > s - 1 ? cursor : s - 1;
    }
    for (int64_t lap_end = want + ring_capacity(r); s < lap_end && slot_published(r, s);) s++;
    return s - 1;
}

/* Producers never overwrite a slot a gating consumer has not released, so no consumer ever finds
 * more than a lap readable: a barrier that says so was scribbled on (a garbage cursor), and reading
 * on would hand out unpublished slots. */
static inline bool beyond_a_lap(const sy_ring *r, int64_t want, int64_t got) {
    return got >= want && got - want >= ring_capacity(r);  /* got >= want first: no overflow */
}

/* The barrier: upstream consumers if this one runs after any, the producers otherwise. */
static int64_t probe_data(void *ctx, int64_t want) {
    sy_ring_consumer *c = ctx;
    const sy_ring *r = c->ring;
    if (c->n_after) {
        int64_t minimum = INT64_MAX;
        for (int i = 0; i < c->n_after; i++) {
            int64_t s = atomic_load_explicit(consumer_sequence(r, c->after[i]), memory_order_acquire);
            if (s < minimum) minimum = s;
        }
        return minimum;  /* upstream released only what the producers had published */
    }
    return highest_published(r, want);
}

static uint64_t upstream_mask(const sy_ring_consumer *c) {
    uint64_t mask = 0;
    for (int i = 0; i < c->n_after; i++) mask |= 1ull << c->after[i];
    return mask;
}

/* The item-at-a-time barrier: only the next slot's header (or, downstream, the upstream sequences).
 * Looking further would read the header of a slot the producer is about to write, and when that
 * header sits on the next line, the read costs a transfer on the handoff's critical path and hands
 * the line back to us just before the producer needs it (ping-pong: 1 read in 4 with int64 items). */
static int64_t probe_next(void *ctx, int64_t want) {
    sy_ring_consumer *c = ctx;
    if (c->n_after) return probe_data(c, want);
    return slot_published(c->ring, want) ? want : want - 1;
}

static int wait_with(sy_ring_consumer *c, int64_t (*probe)(void *, int64_t), int64_t timeout_ns, int64_t *hi) {
    int64_t want = c->next;
    if (c->available_cache >= want) {  /* still inside the last batch: no shared line touched */
        *hi = c->available_cache;
        return SY_OK;
    }
    int64_t got = probe(c, want);
    if (got < want) {
        struct sy_wait w = {.ring = c->ring, .probe = probe, .ctx = c, .want = want,
                            .timeout_ns = timeout_ns, .side = WAITING_FOR_DATA,
                            .heartbeat = &c->ring->header->consumers[c->record].heartbeat_ns,
                            .upstream = upstream_mask(c)};
        int status = wait_for(&w, &got);
        if (status != SY_OK) return status;
    }
    if (beyond_a_lap(c->ring, want, got)) return SY_ECORRUPT;
    c->available_cache = got;
    *hi = got;
    return SY_OK;
}

int sy_ring_wait_for(sy_ring_consumer *c, int64_t timeout_ns, int64_t *hi) {
    return wait_with(c, probe_data, timeout_ns, hi);
}

/* One store per batch, to a line only we write: producers read it only when their cached copy of
 * the gating minimum runs out (about once a lap), so on the per-item path it stays in our cache. */
void sy_ring_release(sy_ring_consumer *c, int64_t upto) {
    /* release: our reads of the slots happen before a producer, acquiring this, overwrites them */
    atomic_store_explicit(c->sequence, upto, memory_order_release);
    c->next = upto + 1;
    wake_waiters(c->ring);
}

int sy_ring_read(sy_ring_consumer *c, void *dst, int64_t max_n, int64_t timeout_ns, int64_t *n_out) {
    *n_out = 0;
    if (max_n < 1) return SY_EINVAL;
    int64_t hi;
    int status = sy_ring_wait_for(c, timeout_ns, &hi);
    if (status != SY_OK) return status;
    int64_t n = hi - c->next + 1 < max_n ? hi - c->next + 1 : max_n;
    copy_out(c->ring, c->next, dst, n);
    sy_ring_release(c, c->next + n - 1);
    *n_out = n;
    return SY_OK;
}

/* Whether another live consumer runs after this one: then it must release item by item, because
 * releasing means "processed" to whoever follows. */
static bool has_dependents(const sy_ring_consumer *c) {
    const struct sy_ring_header *h = c->ring->header;
    uint64_t active = atomic_load_explicit(&h->registry.active_consumers, memory_order_acquire);
    for (; active; active &= active - 1)
        if (atomic_load_explicit(&h->consumers[__builtin_ctzll(active)].after_mask, memory_order_relaxed) >> c->record & 1)
            return true;
    return false;
}

int sy_ring_read_ahead(sy_ring_consumer *c, void *dst, int64_t max_n, int64_t timeout_ns, int64_t *n_out) {
    return sy_ring_read(c, dst, has_dependents(c) ? 1 : max_n, timeout_ns, n_out);
}

int sy_ring_read_one(sy_ring_consumer *c, void *dst, int64_t timeout_ns) {
    int64_t hi;
    int status = wait_with(c, probe_next, timeout_ns, &hi);
    if (status != SY_OK) return status;
    memcpy(dst, item_at(c->ring, c->next), (size_t)c->ring->slot_size);
    sy_ring_release(c, c->next);
    return SY_OK;
}


/* ---- the event poller (LMAX EventPoller): a consumer that is polled, never waits ------------------ */

int sy_ring_poll_ready(sy_ring_consumer *c, int64_t *hi) {
    const sy_ring *r = c->ring;
    int64_t want = c->next;
    /* acquire, and read before the probe: the producers publish before closing, so a probe after
     * seeing "closed" cannot miss their last items */
    bool closed = atomic_load_explicit(&r->header->registry.closed, memory_order_acquire);
    int64_t got = c->available_cache >= want ? c->available_cache : probe_data(c, want);
    if (beyond_a_lap(r, want, got)) return SY_ECORRUPT;
    *hi = got >= want ? got : want - 1;
    if (got >= want) {
        c->available_cache = got;
        return SY_POLL_PROCESSING;
    }
    if (closed && stream_drained(r, want, upstream_mask(c))) return SY_ECLOSED;
    /* The cursor is past us (claimed by a producer still writing, or published but not yet
     * released by the consumers we run after): something is coming. */
    if (atomic_load_explicit(r->cursor, memory_order_acquire) >= want) return SY_POLL_GATING;
    return SY_POLL_IDLE;
}

int sy_ring_poll(sy_ring_consumer *c, sy_ring_event_handler handler, void *ctx) {
    int64_t hi;
    int state = sy_ring_poll_ready(c, &hi);
    if (state != SY_POLL_PROCESSING) return state;
    int64_t s = c->next;
    for (bool more = true; s <= hi && more; s++) more = handler(ctx, item_at(c->ring, s), s, s == hi) != 0;
    sy_ring_release(c, s - 1);  /* what the handler saw, up to where it asked to stop */
    return SY_POLL_PROCESSING;
}


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
static inline int64_t pool_skipped_mark(int64_t s) { return -(s + 1); }  /* ringlive's skipped slot */
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
    if (seen == s + 1 || seen == pool_skipped_mark(s) || is_taken_mark(seen, s)) return false;
    bool dead_owner = false;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        sy_pool_intent *intent = &pool->intents[i];
        int64_t lo = atomic_load_explicit(&intent->lo, memory_order_acquire);
        if (lo == NO_INTENT || lo > s || atomic_load_explicit(&intent->hi, memory_order_acquire) < s) continue;
        int64_t pid = atomic_load_explicit(&r->header->producers[i].pid, memory_order_acquire);
        if (pid != 0 && pid_alive(pid)) return false;  /* a live producer may still publish it */
        dead_owner = true;
    }
    if (!dead_owner || !atomic_compare_exchange_strong_explicit(header, &seen, pool_skipped_mark(s),
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
        if (seen == pool_skipped_mark(s)) {
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
