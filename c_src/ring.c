/* ring.c: the Disruptor core: padded sequences, sequencers, barriers, wait strategies.
 *
 * Hardware fact exploited: a cache line written by one core and read by another moves between
 * their caches on every write, so each sequence that one side writes and the other reads sits
 * alone on its own 128-byte block, and each side keeps a private cached copy of the other side's
 * sequence so that it touches the shared line only when the cached copy says it must.
 *
 * Memory layout of a ring region (all offsets fixed by struct sy_ring_header; see the asserts):
 *
 *   header   : identity block, cursor, gating cache, wake word, registry, consumer and producer
 *              records: one 128-byte block per independently written field
 *   available: capacity x uint32, multi-producer only: the lap number of the last published
 *              sequence of each slot (LMAX's availableBuffer)
 *   slots    : capacity x slot_size bytes, contiguous so a batch is one NumPy array
 *
 * Memory-ordering contract: a producer writes a slot's bytes, then publishes with a release store
 * (the cursor, or the slot's availability flag); a consumer acquire-loads that same word before
 * reading the bytes. A consumer releases slots with a release store of its sequence; a producer
 * acquire-loads the gating sequences before overwriting. Dependent consumers acquire-load their
 * upstream consumers' sequences, which transitively carries the producer's release.
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
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SY_RING_MAGIC 0x474E495259504D59ull  /* "YMPYRING" little-endian: identifies our segments */
#define SY_RING_VERSION 1u
#define NO_SEQUENCE (-1)

/* ---- the shared layout ------------------------------------------------------------------------ */

/* A sequence alone on a 128-byte block: the L2 adjacent-line prefetcher pulls 64-byte lines in
 * pairs, so two hot sequences 64 B apart would still ping-pong (SY_DESTRUCTIVE_SIZE). */
typedef struct sy_padded_sequence {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t value;
} sy_padded_sequence;
_Static_assert(sizeof(sy_padded_sequence) == SY_DESTRUCTIVE_SIZE, "a sequence owns its block");

/* Immutable after creation: read by everyone, written once, so sharing it costs nothing. */
typedef struct sy_ring_identity {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint64_t magic;  /* stored last (release): see init_region */
    uint32_t version;
    uint32_t header_bytes;      /* sizeof(struct sy_ring_header): catches layout drift */
    int64_t capacity;
    int64_t slot_size;
    int32_t producer_kind;
    int32_t wait;
    int32_t max_consumers;
    int32_t max_producers;
    int64_t available_offset;
    int64_t slots_offset;
    int64_t region_bytes;
    uint64_t checksum;          /* of the fields above: a torn or scribbled header fails attach */
} sy_ring_identity;

/* The futex word and its waiter count: written only by sleepers and (rarely) by wakers. The count
 * lets a publisher skip the wake syscall when nobody sleeps, which is the common case. */
typedef struct sy_ring_wake {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint32_t word;  /* bumped on every wake */
    _Atomic uint32_t waiters;
} sy_ring_wake;

/* Registration state: written only when consumers join or leave, or the stream closes. */
typedef struct sy_ring_registry {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic uint64_t active_consumers;  /* bit i: record i in use */
    _Atomic uint64_t gating_consumers;  /* bit i: record i is a leaf and gates the producers */
    _Atomic int32_t lock_pid;           /* registration lock: owner pid, 0 when free */
    _Atomic int32_t closed;             /* end of stream */
    _Atomic int32_t producers;          /* live producer handles, for the single-producer check */
} sy_ring_registry;

/* A consumer's release sequence gets its own block (read by the producers' gating scan and by
 * downstream consumers); its identity and heartbeat sit in a second block so that liveness
 * updates never disturb the hot sequence line. */
typedef struct sy_consumer_record {
    sy_padded_sequence sequence;
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t pid;
    _Atomic int64_t heartbeat_ns;
    _Atomic uint64_t after_mask;        /* consumers this one runs after */
} sy_consumer_record;

typedef struct sy_producer_record {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t pid;
    _Atomic int64_t heartbeat_ns;
} sy_producer_record;

struct sy_ring_header {
    sy_ring_identity identity;
    sy_padded_sequence cursor;        /* single: last published; multi: last claimed */
    sy_padded_sequence gating_cache;  /* multi: min of the gating sequences, shared by producers */
    sy_ring_wake wake;
    sy_ring_registry registry;
    sy_consumer_record consumers[SY_RING_MAX_CONSUMERS];
    sy_producer_record producers[SY_RING_MAX_PRODUCERS];
};

#define BLOCK SY_DESTRUCTIVE_SIZE
_Static_assert(offsetof(struct sy_ring_header, identity) == 0, "identity first: attach reads it");
_Static_assert(sizeof(sy_ring_identity) == BLOCK, "identity fits one block");
_Static_assert(offsetof(struct sy_ring_header, cursor) == 1 * BLOCK, "cursor alone on block 1");
_Static_assert(offsetof(struct sy_ring_header, gating_cache) == 2 * BLOCK, "gating cache on block 2");
_Static_assert(offsetof(struct sy_ring_header, wake) == 3 * BLOCK, "wake word on block 3");
_Static_assert(offsetof(struct sy_ring_header, registry) == 4 * BLOCK, "registry on block 4");
_Static_assert(offsetof(struct sy_ring_header, consumers) == 5 * BLOCK, "consumers from block 5");
_Static_assert(sizeof(sy_consumer_record) == 2 * BLOCK, "sequence block + identity block");
_Static_assert(offsetof(sy_consumer_record, pid) == BLOCK, "identity apart from the sequence");
_Static_assert(sizeof(sy_producer_record) == BLOCK, "one block per producer record");
_Static_assert(sizeof(struct sy_ring_header) % BLOCK == 0, "available[] starts on a block");
_Static_assert(SY_RING_MAX_CONSUMERS <= 64, "consumer sets are 64-bit masks");

/* ---- per-process handles ------------------------------------------------------------------------ */

struct sy_ring {
    struct sy_ring_header *header;
    _Atomic uint32_t *available;      /* NULL for a single-producer ring */
    unsigned char *slots;
    int64_t mask;                     /* capacity - 1 */
    int index_shift;                  /* log2(capacity): sequence >> shift is its lap */
    int64_t slot_size;
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
    sy_ring *ring;
    int record;
    int n_after;
    int after[SY_RING_MAX_CONSUMERS];
};

/* ---- small helpers ----------------------------------------------------------------------------- */

static inline int64_t ring_capacity(const sy_ring *r) { return r->mask + 1; }

static inline void *slot_at(const sy_ring *r, int64_t sequence) {
    return r->slots + (size_t)(sequence & r->mask) * (size_t)r->slot_size;
}

static inline uint32_t lap_of(const sy_ring *r, int64_t sequence) {
    return (uint32_t)((uint64_t)sequence >> r->index_shift);  /* wraps mod 2^32: equality suffices */
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
        int64_t s = atomic_load_explicit(&r->header->consumers[i].sequence.value, memory_order_acquire);
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
        /* The producers publish before closing: a last probe cannot miss their final items. */
        if (w->side == WAITING_FOR_SPACE || w->probe(w->ctx, w->want) < w->want) return SY_ECLOSED;
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
 * on its way never pays for the kernel round trip. The waiter count is incremented before the
 * re-check (seq_cst RMW) and the publisher stores, fences and then reads the count: at least one of
 * them sees the other (Dekker), so a wake is never lost. */
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
        atomic_fetch_add_explicit(&wake->waiters, 1, memory_order_seq_cst);
        uint32_t seen = atomic_load_explicit(&wake->word, memory_order_seq_cst);
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) {
            atomic_fetch_sub_explicit(&wake->waiters, 1, memory_order_relaxed);
            return SY_OK;
        }
        /* Sleep at most until the deadline or the next liveness check, whichever comes first. */
        int64_t now = (int64_t)sy_now_ns();
        int64_t nap = LIVENESS_PERIOD_NS;
        if (w->deadline_ns - now < nap) nap = w->deadline_ns - now > 0 ? w->deadline_ns - now : 0;
        futex_wait(&wake->word, seen, nap, w->ring->futex_op_flags);
        atomic_fetch_sub_explicit(&wake->waiters, 1, memory_order_relaxed);
    }
}

static int wait_for(struct sy_wait *w, int64_t *got) {
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
    atomic_thread_fence(memory_order_seq_cst); /* StoreLoad: our publish before the waiter count */
    sy_ring_wake *wake = &r->header->wake;
    if (atomic_load_explicit(&wake->waiters, memory_order_relaxed) == 0) return;
    atomic_fetch_add_explicit(&wake->word, 1, memory_order_release);
    futex_wake_all(&wake->word, r->futex_op_flags);
}

/* ---- region creation, attach, validation --------------------------------------------------------- */

static uint64_t identity_checksum(const sy_ring_identity *id) {
    /* FNV-1a over the fields between `magic` (written last) and `checksum`. */
    const unsigned char *p = (const unsigned char *)id;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = offsetof(sy_ring_identity, version); i < offsetof(sy_ring_identity, checksum); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int64_t align_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

static int layout_for(int64_t capacity, int64_t slot_size, int producer_kind,
                      int64_t *available_offset, int64_t *slots_offset, int64_t *region_bytes) {
    if (capacity < 2 || (capacity & (capacity - 1)) || capacity > ((int64_t)1 << 40)) return SY_EINVAL;
    if (slot_size < 1 || slot_size > ((int64_t)1 << 30)) return SY_EINVAL;
    if (capacity > (INT64_MAX / 4) / slot_size) return SY_EINVAL;
    int64_t available_bytes = producer_kind == SY_RING_MULTI_PRODUCER ? capacity * (int64_t)sizeof(uint32_t) : 0;
    *available_offset = (int64_t)sizeof(struct sy_ring_header);
    *slots_offset = align_up(*available_offset + available_bytes, BLOCK);
    *region_bytes = align_up(*slots_offset + capacity * slot_size, 4096);
    return SY_OK;
}

int sy_ring_validate(const void *region, int64_t region_bytes) {
    if (region_bytes < (int64_t)sizeof(struct sy_ring_header)) return SY_EINVAL;
    const sy_ring_identity *id = &((const struct sy_ring_header *)region)->identity;
    /* acquire: pairs with the creator's release of the magic, so the fields below are complete */
    if (atomic_load_explicit(&id->magic, memory_order_acquire) != SY_RING_MAGIC) return SY_EINVAL;
    if (id->version != SY_RING_VERSION) return SY_EINVAL;
    if (id->header_bytes != sizeof(struct sy_ring_header)) return SY_EINVAL;
    if (id->checksum != identity_checksum(id)) return SY_EINVAL;
    if (id->producer_kind != SY_RING_SINGLE_PRODUCER && id->producer_kind != SY_RING_MULTI_PRODUCER) return SY_EINVAL;
    if (id->wait < SY_WAIT_BUSY_SPIN || id->wait > SY_WAIT_BLOCKING) return SY_EINVAL;
    if (id->max_consumers != SY_RING_MAX_CONSUMERS || id->max_producers != SY_RING_MAX_PRODUCERS) return SY_EINVAL;
    int64_t available_offset, slots_offset, bytes;
    if (layout_for(id->capacity, id->slot_size, id->producer_kind, &available_offset, &slots_offset, &bytes) != SY_OK)
        return SY_EINVAL;
    if (available_offset != id->available_offset || slots_offset != id->slots_offset) return SY_EINVAL;
    if (bytes != id->region_bytes || bytes > region_bytes) return SY_EINVAL;
    return SY_OK;
}

static void init_region(struct sy_ring_header *h, const sy_ring_config *c, int64_t available_offset,
                        int64_t slots_offset, int64_t region_bytes) {
    /* The region comes zeroed from mmap/ftruncate; only the non-zero fields are set. */
    sy_ring_identity *id = &h->identity;
    id->version = SY_RING_VERSION;
    id->header_bytes = sizeof(struct sy_ring_header);
    id->capacity = c->capacity;
    id->slot_size = c->slot_size;
    id->producer_kind = c->producer_kind;
    id->wait = c->wait;
    id->max_consumers = SY_RING_MAX_CONSUMERS;
    id->max_producers = SY_RING_MAX_PRODUCERS;
    id->available_offset = available_offset;
    id->slots_offset = slots_offset;
    id->region_bytes = region_bytes;
    atomic_init(&h->cursor.value, NO_SEQUENCE);
    atomic_init(&h->gating_cache.value, NO_SEQUENCE);
    for (int i = 0; i < SY_RING_MAX_CONSUMERS; i++) atomic_init(&h->consumers[i].sequence.value, NO_SEQUENCE);
    if (c->producer_kind == SY_RING_MULTI_PRODUCER) {
        /* Lap 0xFFFFFFFF is "the lap before 0": no slot reads as published before it is. */
        _Atomic uint32_t *available = (_Atomic uint32_t *)((unsigned char *)h + available_offset);
        for (int64_t i = 0; i < c->capacity; i++) atomic_init(&available[i], UINT32_MAX);
    }
    id->checksum = identity_checksum(id);
    /* The magic goes last, with release: an attacher that sees it sees the rest. */
    atomic_store_explicit(&id->magic, SY_RING_MAGIC, memory_order_release);
}

static int wrap_region(void *region, size_t bytes, int shared, sy_ring **out) {
    sy_ring *r = calloc(1, sizeof *r);
    if (!r) return SY_ENOMEM;
    struct sy_ring_header *h = region;
    r->header = h;
    r->mask = h->identity.capacity - 1;
    r->index_shift = __builtin_ctzll((unsigned long long)h->identity.capacity);
    r->slot_size = h->identity.slot_size;
    r->wait = h->identity.wait;
    r->producer_kind = h->identity.producer_kind;
    r->available = h->identity.producer_kind == SY_RING_MULTI_PRODUCER
                       ? (_Atomic uint32_t *)((unsigned char *)region + h->identity.available_offset) : NULL;
    r->slots = (unsigned char *)region + h->identity.slots_offset;
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

int sy_ring_create(const sy_ring_config *c, const char *name, sy_ring **out) {
    if (!c || !out) return SY_EINVAL;
    if (c->producer_kind != SY_RING_SINGLE_PRODUCER && c->producer_kind != SY_RING_MULTI_PRODUCER) return SY_EINVAL;
    if (c->wait < SY_WAIT_BUSY_SPIN || c->wait > SY_WAIT_BLOCKING) return SY_EINVAL;
    int64_t available_offset, slots_offset, bytes;
    int status = layout_for(c->capacity, c->slot_size, c->producer_kind, &available_offset, &slots_offset, &bytes);
    if (status != SY_OK) return status;
    if (name && !valid_name(name)) return SY_EINVAL;
    void *region;
    if (!name) {
        region = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (region == MAP_FAILED) return errno == ENOMEM ? SY_ENOMEM : SY_EOS;
    } else {
        /* O_EXCL: never adopt someone else's segment; 0600: only this user may map it. */
        int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        if (fd < 0) return SY_EOS;
        if (ftruncate(fd, (off_t)bytes) != 0) {
            int saved = errno;
            close(fd);
            shm_unlink(name);
            errno = saved;
            return SY_EOS;
        }
        region = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        int saved = errno;
        close(fd);
        if (region == MAP_FAILED) {
            shm_unlink(name);
            errno = saved;
            return SY_EOS;
        }
    }
    init_region(region, c, available_offset, slots_offset, bytes);
    status = wrap_region(region, (size_t)bytes, name != NULL, out);
    if (status != SY_OK) {
        munmap(region, (size_t)bytes);
        if (name) shm_unlink(name);
    }
    return status;
}

int sy_ring_attach(const char *name, sy_ring **out) {
    if (!name || !out || !valid_name(name)) return SY_EINVAL;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return SY_EOS;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return SY_EOS;
    }
    if (st.st_size < (off_t)sizeof(struct sy_ring_header)) {
        close(fd);
        return SY_EINVAL;
    }
    void *region = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int saved = errno;
    close(fd);
    if (region == MAP_FAILED) {
        errno = saved;
        return SY_EOS;
    }
    int status = sy_ring_validate(region, (int64_t)st.st_size);
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

int sy_ring_get_info(const sy_ring *r, sy_ring_info *out) {
    const sy_ring_identity *id = &r->header->identity;
    out->capacity = id->capacity;
    out->slot_size = id->slot_size;
    out->producer_kind = id->producer_kind;
    out->wait = id->wait;
    out->shared = r->shared;
    out->closed = atomic_load_explicit(&r->header->registry.closed, memory_order_acquire);
    out->cursor = atomic_load_explicit(&r->header->cursor.value, memory_order_acquire);
    out->region_bytes = id->region_bytes;
    out->header_bytes = (int64_t)sizeof(struct sy_ring_header);
    out->slots_offset = id->slots_offset;
    return SY_OK;
}

void *sy_ring_slots(const sy_ring *r) { return r->slots; }

int sy_ring_close_stream(sy_ring *r) {
    atomic_store_explicit(&r->header->registry.closed, 1, memory_order_release);
    /* Every sleeper must re-check, whatever the strategy flag says. */
    atomic_thread_fence(memory_order_seq_cst); /* StoreLoad: closed before the waiter count */
    atomic_fetch_add_explicit(&r->header->wake.word, 1, memory_order_release);
    futex_wake_all(&r->header->wake.word, r->futex_op_flags);
    return SY_OK;
}

int sy_ring_layout_offsets(int64_t *out, int n) {
    const int64_t offsets[] = {
        offsetof(struct sy_ring_header, cursor), offsetof(struct sy_ring_header, gating_cache),
        offsetof(struct sy_ring_header, wake), offsetof(struct sy_ring_header, registry),
        offsetof(struct sy_ring_header, consumers), offsetof(struct sy_ring_header, producers),
        sizeof(sy_consumer_record), sizeof(sy_producer_record), sizeof(struct sy_ring_header),
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
                                  .sequence = atomic_load_explicit(&c->sequence.value, memory_order_acquire),
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
    p->next_claim = atomic_load_explicit(&r->header->cursor.value, memory_order_acquire);
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
    struct space_probe *s = ctx;
    return minimum_gating(s->ring, s->no_consumers_value);
}

static int wait_for_space(sy_ring_producer *p, int64_t wrap_point, int64_t claimed, int64_t timeout_ns,
                          int64_t *gating) {
    struct space_probe probe = {.ring = p->ring, .no_consumers_value = claimed};
    struct sy_wait w = {.ring = p->ring, .probe = probe_space, .ctx = &probe, .want = wrap_point,
                        .deadline_ns = deadline_from(timeout_ns), .side = WAITING_FOR_SPACE,
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
    struct sy_ring_header *h = p->ring->header;
    int64_t current = atomic_fetch_add_explicit(&h->cursor.value, n, memory_order_relaxed);
    int64_t next = current + n;
    int64_t wrap_point = next - ring_capacity(p->ring);
    int64_t cached = atomic_load_explicit(&h->gating_cache.value, memory_order_acquire);
    /* cached > current: the cache predates a consumer joining at the cursor; refresh it. */
    if (wrap_point > cached || cached > current) {
        int64_t gating;
        int status = wait_for_space(p, wrap_point, current, -1, &gating);
        if (status != SY_OK) return status;
        /* release: a producer trusting this cache inherits our acquire of the consumer sequences */
        atomic_store_explicit(&h->gating_cache.value, gating, memory_order_release);
    }
    *hi = next;
    return SY_OK;
}

/* Multi producer with a deadline: claim by compare-and-swap only once the space is there (LMAX's
 * tryNext), so a timeout leaves no claimed-but-never-published hole behind. */
static int claim_multi_timed(sy_ring_producer *p, int64_t n, int64_t timeout_ns, int64_t *hi) {
    struct sy_ring_header *h = p->ring->header;
    int64_t deadline = deadline_from(timeout_ns);
    for (;;) {
        int64_t current = atomic_load_explicit(&h->cursor.value, memory_order_relaxed);
        int64_t next = current + n;
        int64_t wrap_point = next - ring_capacity(p->ring);
        int64_t cached = atomic_load_explicit(&h->gating_cache.value, memory_order_acquire);
        if (wrap_point > cached || cached > current) {
            int64_t gating = minimum_gating(p->ring, current);
            if (wrap_point > gating) {
                int64_t left = deadline - (int64_t)sy_now_ns();
                int status = wait_for_space(p, wrap_point, current, left > 0 ? left : 0, &gating);
                if (status != SY_OK) return status;
            }
            atomic_store_explicit(&h->gating_cache.value, gating, memory_order_release);
            if (wrap_point > gating) continue;
        }
        if (atomic_compare_exchange_weak_explicit(&h->cursor.value, &current, next, memory_order_relaxed,
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

void sy_ring_publish(sy_ring_producer *p, int64_t lo, int64_t hi) {
    sy_ring *r = p->ring;
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER) {
        /* release: the slot bytes written before are visible to whoever acquires the cursor */
        atomic_store_explicit(&r->header->cursor.value, hi, memory_order_release);
    } else {
        /* Each slot says for itself that its lap is in: a consumer never reads a slot that a slower
         * producer, holding an earlier claim, has not finished. */
        for (int64_t s = lo; s <= hi; s++)
            atomic_store_explicit(&r->available[s & r->mask], lap_of(r, s), memory_order_release);
    }
    wake_waiters(r);
}

/* Copy n items into or out of the ring starting at `sequence`, in at most two pieces (wrap). */
static void copy_in(sy_ring *r, int64_t sequence, const unsigned char *src, int64_t n) {
    int64_t first = sequence & r->mask;
    int64_t head = n < ring_capacity(r) - first ? n : ring_capacity(r) - first;
    memcpy(slot_at(r, sequence), src, (size_t)(head * r->slot_size));
    if (head < n) memcpy(r->slots, src + head * r->slot_size, (size_t)((n - head) * r->slot_size));
}

static void copy_out(const sy_ring *r, int64_t sequence, unsigned char *dst, int64_t n) {
    int64_t first = sequence & r->mask;
    int64_t head = n < ring_capacity(r) - first ? n : ring_capacity(r) - first;
    memcpy(dst, slot_at(r, sequence), (size_t)(head * r->slot_size));
    if (head < n) memcpy(dst + head * r->slot_size, r->slots, (size_t)((n - head) * r->slot_size));
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
        copy_in(r, hi - chunk + 1, src + *written * r->slot_size, chunk);
        sy_ring_publish(p, hi - chunk + 1, hi);
        *written += chunk;
    }
    return SY_OK;
}

int sy_ring_write_one(sy_ring_producer *p, const void *item, int64_t timeout_ns) {
    int64_t hi;
    int status = sy_ring_claim(p, 1, timeout_ns, &hi);
    if (status != SY_OK) return status;
    memcpy(slot_at(p->ring, hi), item, (size_t)p->ring->slot_size);
    sy_ring_publish(p, hi, hi);
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
    int64_t start = atomic_load_explicit(&h->cursor.value, memory_order_acquire);
    for (uint64_t a = after_mask; a; a &= a - 1) {
        int64_t s = atomic_load_explicit(&h->consumers[__builtin_ctzll(a)].sequence.value, memory_order_acquire);
        if (s < start) start = s;
    }
    sy_consumer_record *rec = &h->consumers[record];
    atomic_store_explicit(&rec->sequence.value, start, memory_order_release);
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
    return atomic_load_explicit(&c->ring->header->consumers[c->record].sequence.value, memory_order_acquire);
}

/* Multi producer: the highest sequence from `want` on whose slot carries its own lap number. */
static int64_t highest_published(const sy_ring *r, int64_t want, int64_t claimed) {
    for (int64_t s = want; s <= claimed; s++)
        if (atomic_load_explicit(&r->available[s & r->mask], memory_order_acquire) != lap_of(r, s)) return s - 1;
    return claimed;
}

/* The barrier: upstream consumers if this one runs after any, the producers otherwise. */
static int64_t probe_data(void *ctx, int64_t want) {
    sy_ring_consumer *c = ctx;
    const sy_ring *r = c->ring;
    const struct sy_ring_header *h = r->header;
    if (c->n_after) {
        int64_t minimum = INT64_MAX;
        for (int i = 0; i < c->n_after; i++) {
            int64_t s = atomic_load_explicit(&h->consumers[c->after[i]].sequence.value, memory_order_acquire);
            if (s < minimum) minimum = s;
        }
        return minimum;  /* upstream released only what the producers had published */
    }
    int64_t cursor = atomic_load_explicit(&h->cursor.value, memory_order_acquire);
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER || cursor < want) return cursor;
    return highest_published(r, want, cursor);
}

static uint64_t upstream_mask(const sy_ring_consumer *c) {
    uint64_t mask = 0;
    for (int i = 0; i < c->n_after; i++) mask |= 1ull << c->after[i];
    return mask;
}

int sy_ring_wait_for(sy_ring_consumer *c, int64_t timeout_ns, int64_t *hi) {
    int64_t want = c->next;
    if (c->available_cache >= want) {  /* still inside the last batch: no shared line touched */
        *hi = c->available_cache;
        return SY_OK;
    }
    int64_t got = probe_data(c, want);
    if (got < want) {
        struct sy_wait w = {.ring = c->ring, .probe = probe_data, .ctx = c, .want = want,
                            .deadline_ns = deadline_from(timeout_ns), .side = WAITING_FOR_DATA,
                            .heartbeat = &c->ring->header->consumers[c->record].heartbeat_ns,
                            .upstream = upstream_mask(c)};
        int status = wait_for(&w, &got);
        if (status != SY_OK) return status;
    }
    c->available_cache = got;
    *hi = got;
    return SY_OK;
}

void sy_ring_release(sy_ring_consumer *c, int64_t upto) {
    /* release: our reads of the slots happen before a producer, acquiring this, overwrites them */
    atomic_store_explicit(&c->ring->header->consumers[c->record].sequence.value, upto, memory_order_release);
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
    int status = sy_ring_wait_for(c, timeout_ns, &hi);
    if (status != SY_OK) return status;
    memcpy(dst, slot_at(c->ring, c->next), (size_t)c->ring->slot_size);
    sy_ring_release(c, c->next);
    return SY_OK;
}

