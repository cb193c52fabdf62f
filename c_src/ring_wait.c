/* ring_wait.c: wait strategies: what a consumer (for data) or a producer (for space) does while it waits.
 *
 * Hardware fact served: a handoff between two cores costs one cache-line transfer (~100 ns); a
 * futex sleep and wake cost tens of microseconds. Every strategy first spins on the line it waits
 * for (no clock read, no syscall: a reply already on its way never pays for them), then spends its
 * own trade of latency against CPU, and checks deadline, end of stream and peer liveness only every
 * few hundred spins.
 */
#include "ring_internal.h"

#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Whatever it returns (woken, EAGAIN: the word moved first, EINTR, ETIMEDOUT) the caller re-checks
 * its condition, so the result is not needed. */
void futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t wait_ns, int flags) {
    struct timespec ts = {.tv_sec = wait_ns / 1000000000, .tv_nsec = wait_ns % 1000000000};
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT | flags, expected, &ts, NULL, 0);
}

void futex_wake_all(_Atomic uint32_t *word, int flags) {
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE | flags, INT_MAX, NULL, NULL, 0);
}

/* A waiting consumer of a multi-producer ring: skip what a dead producer left claimed (checked at
 * the liveness period, or now when the stream is closed), and what other consumers marked so. */
static void skip_dead_claims_waiting(struct sy_wait *w, bool look_for_dead) {
    sy_ring_consumer *c = w->consumer;
    if (!c || w->ring->producer_kind != SY_RING_MULTI_PRODUCER) return;
    skip_dead_claims(c, look_for_dead);  /* the whole dead claim: see there */
    w->want = c->next;
}

/* Returns SY_OK to keep waiting, or why to stop. Called every few hundred spins, not every spin:
 * clock_gettime costs ~20 ns, far more than one PAUSE. */
static int wait_checkpoint(struct sy_wait *w) {
    int64_t now = (int64_t)sy_now_ns();
    sy_ring *r = w->ring;
    /* acquire: pairs with sy_ring_shutdown's release; another thread of ours closed the ring */
    if (atomic_load_explicit(&r->closing, memory_order_acquire)) return SY_ECLOSED;
    bool liveness_due = now >= w->next_liveness_ns;
    skip_dead_claims_waiting(w, liveness_due);
    if (atomic_load_explicit(&r->header->registry.closed, memory_order_acquire)) {
        if (w->side == WAITING_FOR_SPACE) return SY_ECLOSED;
        if (stream_drained(r, w->want, w->upstream)) {
            skip_dead_claims_waiting(w, true);  /* a dead producer's hole is not the end of the stream */
            if (stream_drained(r, w->want, w->upstream)) return SY_ECLOSED;
        }
    }
    if (liveness_due) {
        w->next_liveness_ns = now + LIVENESS_PERIOD_NS;
        if (w->heartbeat) atomic_store_explicit(w->heartbeat, now, memory_order_relaxed);
        /* Data comes through the consumers this one runs after: one that died stalls it for good.
         * A dead producer does not end a data wait (its claims are skipped, or a new single
         * producer takes over); a dead leaf consumer stops gating the space. */
        if (w->side == WAITING_FOR_DATA && any_consumer_dead(r, w->upstream)) return SY_ECLOSED;
        if (w->side == WAITING_FOR_SPACE) reap_dead_consumers(r);
    }
    if (now >= w->deadline_ns) return SY_ETIMEDOUT;
    if (now >= w->slice_end_ns) return SY_RING_WAIT_SLICE;
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

/* ---- The GIL handoff ----------------------------------------------------------------------------
 *
 * Two Python threads of one process on one ring (a producer thread, a consumer thread) take turns
 * holding the GIL: the producer fills the ring while holding it, then waits for space (the wait
 * releases the GIL); the consumer drains, then waits for data. A waiter whose condition comes true
 * while the other thread still runs Python (the consumer sees the first batch of the next lap,
 * the producer sees the space the consumer's read just freed) returned from C and blocked on the
 * GIL: its thread slept on the GIL's condition variable, and the holder's next release woke it, a
 * futex wake on a core that may have gone idle (1-2 sleeps per thread per lap on the 16-core host:
 * docs/pipeline.md). So such a waiter keeps waiting, in C with the GIL released, until another
 * thread of this process is inside a ring wait too (the process's waiter count, kept by every wait
 * through a handle with the handoff on), which is when that thread has released the GIL: taking
 * it then needs no sleep and no wake. The count is per process, not per ring, because the peer
 * thread may be waiting on another ring (two threads playing ping-pong over two rings). Only where
 * the peer is in this process (only it can hold our GIL) and is one thread: the single producer,
 * or the one gating consumer. Bounded by HANDOFF_NS: a peer that never waits in a ring (it sleeps
 * in time.sleep between publishes) costs at most that much latency. */
#define HANDOFF_NS 50000  /* 3x a GIL handoff's wake on the 2-core VM; a ring lap of 16 batches is ~8 us */
#define SPIN_PHASE_HANDOFF 64  /* as the blocking strategy's spin, before the clock and the yields */

/* Whether this wait's peer is one thread of this process (another process holds another GIL). */
static bool peer_in_this_process(const struct sy_wait *w) {
    sy_ring *r = w->ring;
    struct sy_ring_header *h = r->header;
    int64_t me = (int64_t)getpid();
    if (w->side == WAITING_FOR_DATA) {
        /* downstream consumers wait on consumers, several producers on none in particular */
        if (w->upstream || r->producer_kind != SY_RING_SINGLE_PRODUCER) return false;
        for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++)
            if (atomic_load_explicit(&h->producers[i].pid, memory_order_acquire) == me) return true;
        return false;
    }
    uint64_t leaves = atomic_load_explicit(&h->registry.gating_consumers, memory_order_acquire);
    if (!leaves || (leaves & (leaves - 1))) return false;  /* one gating consumer, or no handoff */
    return atomic_load_explicit(&h->consumers[__builtin_ctzll(leaves)].pid, memory_order_acquire) == me;
}

/* What was waited for is there (*got): wait on until another thread of the process waits too,
 * then look again (more may be ready by then: the whole lap, not its first batch). */
static void hand_over(struct sy_wait *w, int64_t *got) {
    _Atomic int64_t *waiters = w->ring->gil_waiters;
    if (!peer_in_this_process(w)) return;
    int64_t until = 0;
    /* relaxed: a hint (no data is published through it); what the peer published is read through
     * the probe below. 1: ourselves. */
    for (int spins = 0; atomic_load_explicit(waiters, memory_order_relaxed) <= 1; spins++) {
        if (spins < SPIN_PHASE_HANDOFF) {
            sy_cpu_relax();
            continue;
        }
        int64_t now = (int64_t)sy_now_ns();
        if (!until) until = now + HANDOFF_NS;
        if (now >= until || atomic_load_explicit(&w->ring->closing, memory_order_acquire)) break;
        sched_yield();  /* the peer may share this CPU: let it run to its wait */
    }
    int64_t again = w->probe(w->ctx, w->want);
    if (again > *got) *got = again;
}

/* Probes a waiter makes before it reads the clock: a handoff already on its way (the other side
 * is one cache-line transfer from done) never pays for two clock_gettime calls on its critical
 * path. Every strategy starts by spinning at least this long anyway. */
#define SPINS_BEFORE_CLOCK 32

static int wait_strategy(struct sy_wait *w, int64_t *got);

int wait_for(struct sy_wait *w, int64_t *got) {
    _Atomic int64_t *waiters = w->ring->gil_waiters;
    if (!waiters) return wait_strategy(w, got);
    /* relaxed: a count read as a hint by other threads' hand_over; no data is published through it */
    atomic_fetch_add_explicit(waiters, 1, memory_order_relaxed);
    int status = wait_strategy(w, got);
    if (status == SY_OK) hand_over(w, got);
    atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
    return status;
}

/* A close() of ours frees consumers after raising the flag (release): space or data that appears
 * because of it must not let the call through. acquire: pairs with it. Every way out of a wait that
 * found its condition passes here, the first spins too: a call re-entered after its wait slice (the
 * Python layer's) can find the space the departed consumers left on its very first probe. */
static int unless_closing(struct sy_wait *w, int status) {
    if (status == SY_OK && atomic_load_explicit(&w->ring->closing, memory_order_acquire)) return SY_ECLOSED;
    return status;
}

static int wait_strategy(struct sy_wait *w, int64_t *got) {
    for (int i = 0; i < SPINS_BEFORE_CLOCK; i++) {
        sy_cpu_relax();
        if ((*got = w->probe(w->ctx, w->want)) >= w->want) return unless_closing(w, SY_OK);
    }
    int64_t now = (int64_t)sy_now_ns();
    w->deadline_ns = deadline_from(w->timeout_ns);  /* late by the spins above: tens of ns */
    w->next_liveness_ns = now + LIVENESS_PERIOD_NS;
    /* A slice only when the deadline lies beyond it: the caller then knows a whole slice passed. */
    int64_t slice = w->ring->wait_slice_ns;
    w->slice_end_ns = slice > 0 && w->deadline_ns - now > slice ? now + slice : INT64_MAX;
    int status;
    switch (w->ring->wait) {
    case SY_WAIT_BUSY_SPIN: status = wait_busy_spin(w, got); break;
    case SY_WAIT_YIELD: status = wait_yield(w, got); break;
    case SY_WAIT_SLEEP: status = wait_sleep(w, got); break;
    default: status = wait_blocking(w, got); break;
    }
    return unless_closing(w, status);
}

int sy_ring_close_stream(sy_ring *r) {
    atomic_store_explicit(&r->header->registry.closed, 1, memory_order_release);
    /* Every sleeper must re-check, whatever the strategy flag says. */
    atomic_fetch_add_explicit(&r->header->wake.word, WAKE_EPOCH, memory_order_seq_cst); /* new value: no sleeper stays */
    futex_wake_all(&r->header->wake.word, r->futex_op_flags);
    return SY_OK;
}
