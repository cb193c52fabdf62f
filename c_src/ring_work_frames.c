/* ring_work_frames.c: zero-copy frames for sympathy.Queue (Queue.put_array / Queue.get_array).
 *
 * Hardware fact served: a large array crosses between processes at memory bandwidth only if it is
 * written once, in place, where the reader reads it: each frame is a contiguous buffer in shared
 * memory (a ring's slot of frame_bytes, the data 64-byte aligned), the producer writes its pixels
 * there and only a small record naming the buffer travels through the queue. Copying a 6 MB frame
 * in and out would move it through the caches three times; this moves it once.
 *
 * The frame store is a second ring segment (its own name, so creation, 0600, reservation, attach
 * checks and cleanup are the ring's); slot i is buffer i, and its header word is the buffer's state:
 *
 *   FREE(gen) --acquire--> STAGED(gen+1, producer pid) --record put--> QUEUED(gen)
 *       ^                      |  (a consumer may take it STAGED: the record can arrive first)
 *       |                      v
 *       +----release------ HELD(gen, consumer pid)
 *
 * The record carries (index, gen); a consumer takes the buffer by compare-and-swap on the exact
 * generation, so a record whose buffer was reclaimed meanwhile (its producer died) is recognised as
 * stale instead of read. A second word, the pin, names the producer process while it still holds
 * a view of the buffer it wrote: the buffer is not handed out again before that view is gone.
 * Dead owners (a STAGED producer, a HELD consumer, a pin) are reclaimed by whoever waits for a free
 * buffer, every LIVENESS_PERIOD_NS of waiting.
 */
#include "ring_work_internal.h"

#include <pthread.h>
#include <unistd.h>

#define FRAME_KIND_SHIFT 62
#define FRAME_GEN_SHIFT 32
#define FRAME_GEN_MASK ((int64_t)0x3FFFFFFF)  /* 30 bits: a record older than 2^30 reuses is not kept */
enum frame_kind { FRAME_FREE = 0, FRAME_STAGED = 1, FRAME_QUEUED = 2, FRAME_HELD = 3 };

/* The pin, then padding so that the data starts 64 bytes after the slot's header (a cache line). */
typedef struct sy_frame_meta {
    _Atomic int64_t pin;  /* pid of the producer still holding a view of what it wrote; 0 none */
    unsigned char pad[SY_FRAME_DATA_OFFSET - 8 - 8];
} sy_frame_meta;
_Static_assert(SLOT_HEADER_BYTES + sizeof(sy_frame_meta) == SY_FRAME_DATA_OFFSET, "data one line after the state word");

static inline int64_t frame_state(int kind, int64_t gen, int64_t pid) {
    return (int64_t)((uint64_t)kind << FRAME_KIND_SHIFT | (uint64_t)(gen & FRAME_GEN_MASK) << FRAME_GEN_SHIFT |
                     (uint64_t)(pid & 0xFFFFFFFF));
}
static inline int state_kind(int64_t s) { return (int)((uint64_t)s >> FRAME_KIND_SHIFT); }
static inline int64_t state_gen(int64_t s) { return (s >> FRAME_GEN_SHIFT) & FRAME_GEN_MASK; }
static inline int64_t state_pid(int64_t s) { return s & 0xFFFFFFFF; }

/* This process's pid, for the owner fields. getpid() is a system call (glibc stopped caching it in
 * 2.25): four of them a frame cost ~1 us on the 2-core VM, 5-8 % of a small frame's whole
 * handover. Cached here; a fork's child forgets the parent's (pthread_atfork). relaxed: each
 * thread of a process computes the same value, nothing is published through it. */
static _Atomic int64_t cached_pid;
static pthread_once_t forget_registered = PTHREAD_ONCE_INIT;
static void forget_pid(void) { atomic_store_explicit(&cached_pid, 0, memory_order_relaxed); }
static void register_forget(void) { pthread_atfork(NULL, NULL, forget_pid); }
static int64_t my_pid(void) {
    int64_t pid = atomic_load_explicit(&cached_pid, memory_order_relaxed);
    if (pid) return pid;
    pthread_once(&forget_registered, register_forget);
    pid = getpid();
    atomic_store_explicit(&cached_pid, pid, memory_order_relaxed);
    return pid;
}

static inline _Atomic int64_t *state_word(const sy_ring *f, int64_t i) { return &slot_header(f, i)->published_plus_one; }
static inline sy_frame_meta *frame_meta(const sy_ring *f, int64_t i) { return item_at(f, i); }

int64_t sy_frames_slot_size(int64_t frame_bytes) {
    if (frame_bytes < 1 || frame_bytes > ((int64_t)1 << 30) - SY_FRAME_DATA_OFFSET) return -1;
    return align_up((int64_t)sizeof(sy_frame_meta) + frame_bytes, SY_CACHE_LINE);
}

int64_t sy_frames_capacity(const sy_ring *f) { return ring_capacity(f); }
int64_t sy_frames_bytes(const sy_ring *f) { return f->slot_size - (int64_t)sizeof(sy_frame_meta); }
void *sy_frames_data(const sy_ring *f, int64_t index) {
    return (unsigned char *)frame_meta(f, index & f->mask) + sizeof(sy_frame_meta);
}

/* Dead owners' buffers back to FREE (the generation kept: a record naming it goes stale when the
 * next acquire moves it on); a dead producer's pin dropped. */
static void reclaim_dead(sy_ring *f) {
    for (int64_t i = 0; i < ring_capacity(f); i++) {
        _Atomic int64_t *word = state_word(f, i);
        int64_t s = atomic_load_explicit(word, memory_order_acquire);
        int kind = state_kind(s);
        if ((kind == FRAME_STAGED || kind == FRAME_HELD) && !pid_alive(state_pid(s)))
            atomic_compare_exchange_strong_explicit(word, &s, frame_state(FRAME_FREE, state_gen(s), 0),
                                                    memory_order_acq_rel, memory_order_relaxed);
        int64_t pin = atomic_load_explicit(&frame_meta(f, i)->pin, memory_order_acquire);
        if (pin && !pid_alive(pin))
            atomic_compare_exchange_strong_explicit(&frame_meta(f, i)->pin, &pin, 0, memory_order_acq_rel,
                                                    memory_order_relaxed);
    }
    wake_waiters(f);
}

/* The lowest-numbered free, unpinned buffer, taken for this process; -1 if none. Lowest first, not
 * round robin: a buffer given back a moment ago is still in the last-level cache, so a producer and
 * consumer trading few frames keep writing into the same cached lines instead of streaming through
 * frame_count x frame_bytes of DRAM (1080p, 4 buffers, one thread: 0.55 ms a frame lowest-first,
 * 1.1-1.4 ms round robin, on a 32 MiB-L3 EPYC). */
static int64_t try_acquire(sy_ring *f, int64_t pid, int64_t *gen) {
    for (int64_t i = 0; i < ring_capacity(f); i++) {
        _Atomic int64_t *word = state_word(f, i);
        int64_t s = atomic_load_explicit(word, memory_order_acquire);
        if (state_kind(s) != FRAME_FREE || atomic_load_explicit(&frame_meta(f, i)->pin, memory_order_acquire))
            continue;
        int64_t g = (state_gen(s) + 1) & FRAME_GEN_MASK;
        /* acq_rel: the consumers' reads of the old frame are done before we write the new one */
        if (atomic_compare_exchange_strong_explicit(word, &s, frame_state(FRAME_STAGED, g, pid), memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&frame_meta(f, i)->pin, pid, memory_order_release);
            *gen = g;
            return i;
        }
    }
    return -1;
}

struct frame_wanted { sy_ring *frames; };

static bool frame_ready(void *ctx) {
    sy_ring *f = ((struct frame_wanted *)ctx)->frames;
    for (int64_t i = 0; i < ring_capacity(f); i++) {
        int64_t s = atomic_load_explicit(state_word(f, i), memory_order_acquire);
        if (state_kind(s) == FRAME_FREE && !atomic_load_explicit(&frame_meta(f, i)->pin, memory_order_acquire))
            return true;
    }
    return false;
}

int sy_frames_acquire(sy_ring *f, int64_t timeout_ns, int64_t *index, int64_t *gen) {
    int64_t pid = my_pid();
    struct pool_wait pw;
    pool_wait_start(&pw, f, timeout_ns);
    struct frame_wanted fw = {.frames = f};
    for (;;) {
        int64_t i = try_acquire(f, pid, gen);
        if (i >= 0) {
            *index = i;
            return SY_OK;
        }
        bool liveness_due;
        int status = pool_nap(&pw, frame_ready, &fw, &liveness_due);
        if (status != SY_OK) return status;
        if (liveness_due) reclaim_dead(f);
    }
}

/* sy_frames_acquire's first look, which never waits: called with the GIL kept (a release and
 * re-take of the GIL costs about as much as the look itself). Returns gen << 32 | index, or -1 when
 * none is free now: one return value, so two Python threads of one handle need no out-parameters
 * of their own (an allocation a call). */
int64_t sy_frames_acquire_now(sy_ring *f) {
    int64_t gen;
    int64_t i = try_acquire(f, my_pid(), &gen);
    return i < 0 ? -1 : gen << 32 | i;
}

/* The record is in the queue: the buffer no longer depends on its producer living. A consumer may
 * already hold it (the CAS then fails, as it should). */
void sy_frames_queued(sy_ring *f, int64_t index, int64_t gen) {
    _Atomic int64_t *word = state_word(f, index & f->mask);
    int64_t s = atomic_load_explicit(word, memory_order_relaxed);
    if (state_kind(s) == FRAME_STAGED && state_gen(s) == gen)
        atomic_compare_exchange_strong_explicit(word, &s, frame_state(FRAME_QUEUED, gen, 0), memory_order_release,
                                                memory_order_relaxed);
}

/* SY_OK: this process holds the buffer; SY_EINVAL: the record is stale (the buffer was reclaimed
 * from a dead producer, and maybe reused). acquire: the producer's writes of the frame are seen. */
int sy_frames_take(sy_ring *f, int64_t index, int64_t gen) {
    if (index < 0 || index > f->mask) return SY_EINVAL;
    _Atomic int64_t *word = state_word(f, index);
    int64_t held = frame_state(FRAME_HELD, gen, my_pid());
    int64_t s = atomic_load_explicit(word, memory_order_acquire);
    while ((state_kind(s) == FRAME_STAGED || state_kind(s) == FRAME_QUEUED) && state_gen(s) == gen) {
        if (atomic_compare_exchange_weak_explicit(word, &s, held, memory_order_acq_rel, memory_order_acquire))
            return SY_OK;
    }
    return SY_EINVAL;
}

/* HELD or STAGED (a put that raised) by this process -> FREE. release: our reads (or writes) of the
 * buffer come before the next producer's writes. */
int sy_frames_release(sy_ring *f, int64_t index, int64_t gen) {
    _Atomic int64_t *word = state_word(f, index & f->mask);
    int64_t pid = my_pid();
    int64_t s = atomic_load_explicit(word, memory_order_relaxed);
    if ((state_kind(s) != FRAME_HELD && state_kind(s) != FRAME_STAGED) || state_gen(s) != gen ||
        state_pid(s) != (pid & 0xFFFFFFFF))
        return SY_EINVAL;
    if (!atomic_compare_exchange_strong_explicit(word, &s, frame_state(FRAME_FREE, gen, 0), memory_order_release,
                                                 memory_order_relaxed))
        return SY_EINVAL;
    wake_waiters(f);
    return SY_OK;
}

/* The producer's last view of the buffer is gone. */
void sy_frames_unpin(sy_ring *f, int64_t index) {
    int64_t pid = my_pid();
    atomic_compare_exchange_strong_explicit(&frame_meta(f, index & f->mask)->pin, &pid, 0, memory_order_release,
                                            memory_order_relaxed);
    wake_waiters(f);
}

/* For tests and the docs: the state of buffer i (kind, generation, owner pid, pin). */
int sy_frames_state(const sy_ring *f, int64_t index, int64_t *out) {
    if (index < 0 || index > f->mask) return SY_EINVAL;
    int64_t s = atomic_load_explicit(state_word(f, index), memory_order_acquire);
    out[0] = state_kind(s);
    out[1] = state_gen(s);
    out[2] = state_pid(s);
    out[3] = atomic_load_explicit(&frame_meta(f, index)->pin, memory_order_acquire);
    return SY_OK;
}
