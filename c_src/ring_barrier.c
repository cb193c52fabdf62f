/* ring_barrier.c: sequence barriers and consumers: what a consumer may read, reading it, the event poller.
 *
 * Hardware fact served: a consumer's readiness test on the item-at-a-time path touches only the
 * next slot's header, which shares its line with the item: one transfer hands over both. A batch
 * is learned from the cursor (one line for many items) and released with one store to a line only
 * this consumer writes.
 */
#include "ring_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int64_t upstream_minimum(const sy_ring_consumer *c) {
    int64_t minimum = INT64_MAX;
    for (int i = 0; i < c->n_after; i++) {
        int64_t s = atomic_load_explicit(consumer_sequence(c->ring, c->after[i]), memory_order_acquire);
        if (s < minimum) minimum = s;
    }
    return minimum;
}

/* A sequence whose producer died is released unread and counted in `lost`; a consumer that runs
 * after others skips it only once they have (the slot is not reused before every leaf passed it). */
bool skip_lost(sy_ring_consumer *c, int64_t want) {
    const sy_ring *r = c->ring;
    if (r->producer_kind != SY_RING_MULTI_PRODUCER) return false;
    if (atomic_load_explicit(&slot_header(r, want)->published_plus_one, memory_order_acquire) != skipped_mark(want))
        return false;
    if (c->n_after && upstream_minimum(c) < want) return false;
    c->lost++;
    sy_ring_release(c, want);
    return true;
}

/* Skips, from c->next on, every sequence that a dead producer left: those already marked, and, when
 * look_for_dead (a consumer that runs after none: only the first stage decides who owns a hole),
 * each hole that abandon_dead_claim marks. One dead claim is up to its size of sequences, so this
 * abandons them one after another until a sequence is published, claimed by a live producer, or
 * not claimed at all. Abandoning only the first (as before) left the rest a hole: once the stream
 * was closed the reader found "nothing published at next" there and ended with ClosedError before
 * a live producer's items that lay after the dead claim (interleaving: producer B dies inside a
 * claim of k > 1 sequences; live producer A publishes its last items after them and exits; the
 * stream is closed; a reader at the claim's first sequence abandons it, and stream_drained at the
 * second says drained: A's tail silently lost; at the liveness period, without a close, the same gap
 * cost one period per sequence). No memory order changes: each step re-acquires the cursor and
 * compares-and-swaps from the header it saw (abandon_dead_claim), so marking k sequences in one go
 * is as safe as marking one: a live producer's claim met in the loop shows its open count (its
 * claim's release RMW of the cursor carries it), and a publish landing meanwhile fails the CAS.
 * Returns whether anything was skipped. */
bool skip_dead_claims(sy_ring_consumer *c, bool look_for_dead) {
    sy_ring *r = c->ring;
    if (r->producer_kind != SY_RING_MULTI_PRODUCER) return false;
    bool skipped = false;
    for (;;) {
        while (skip_lost(c, c->next)) skipped = true;
        if (!look_for_dead || c->n_after || !abandon_dead_claim(r, c->next)) return skipped;
    }
}

/* ---- consumers ------------------------------------------------------------------------------------ */

uint64_t leaves_of(const struct sy_ring_header *h, uint64_t active) {
    uint64_t upstream = 0;
    for (uint64_t a = active; a; a &= a - 1)
        upstream |= atomic_load_explicit(&h->consumers[__builtin_ctzll(a)].after_mask, memory_order_relaxed);
    return active & ~upstream;
}

static int consumer_handle(sy_ring *r, sy_ring_consumer *c, int record, uint64_t after_mask, int64_t start,
                           sy_ring_consumer **out) {
    ring_retain(r);
    c->ring = r;
    c->record = record;
    c->sequence = consumer_sequence(r, record);
    c->next = start + 1;
    c->available_cache = start;
    c->lost = 0;
    c->ahead_pending = 0;
    c->next_liveness_ns = 0;
    c->n_after = 0;
    for (uint64_t a = after_mask; a; a &= a - 1) c->after[c->n_after++] = __builtin_ctzll(a);
    *out = c;
    return SY_OK;
}

/* Records for n consumers that will attach later, gating the producers from sequence -1 until they
 * do (pid 0: no process to reap yet). For the creator, before anything is published. */
int sy_ring_declare_consumers(sy_ring *r, int n) {
    struct sy_ring_header *h = r->header;
    if (n < 0 || n > SY_RING_MAX_CONSUMERS) return SY_EINVAL;
    int status = registry_lock(r);
    if (status != SY_OK) return status;
    uint64_t active = atomic_load_explicit(&h->registry.active_consumers, memory_order_relaxed);
    uint64_t declared = atomic_load_explicit(&h->registry.declared_consumers, memory_order_relaxed);
    if (__builtin_popcountll(~active) < n) status = SY_EINVAL;
    for (int k = 0; k < n && status == SY_OK; k++) {
        int record = __builtin_ctzll(~active);
        atomic_store_explicit(consumer_sequence(r, record), NO_SEQUENCE, memory_order_relaxed);
        atomic_store_explicit(&h->consumers[record].after_mask, 0, memory_order_relaxed);
        atomic_store_explicit(&h->consumers[record].pid, 0, memory_order_relaxed);
        active |= 1ull << record;
        declared |= 1ull << record;
    }
    if (status == SY_OK) {
        atomic_store_explicit(&h->registry.declared_consumers, declared, memory_order_relaxed);
        atomic_store_explicit(&h->registry.active_consumers, active, memory_order_release);
        /* release: a producer that sees the new gating set sees the declared records' -1 */
        atomic_store_explicit(&h->registry.gating_consumers, leaves_of(h, active), memory_order_release);
    }
    registry_unlock(r);
    return status;
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
    /* A plain consumer takes a record declared at creation first: it starts at -1, behind
     * nothing that was published (no late-consumer loss); any other takes a free record. */
    uint64_t declared = atomic_load_explicit(&h->registry.declared_consumers, memory_order_relaxed) & active;
    int record = n_after == 0 && declared ? __builtin_ctzll(declared)
                                          : active == UINT64_MAX ? -1 : __builtin_ctzll(~active);
    if (record < 0) status = SY_EINVAL;
    if (status != SY_OK) {
        registry_unlock(r);
        free(c);
        return status;
    }
    if (active >> record & 1) {  /* a declared record: gating since creation, from its sequence */
        atomic_store_explicit(&h->registry.declared_consumers, declared & ~(1ull << record), memory_order_relaxed);
        sy_consumer_record *rec = &h->consumers[record];
        atomic_store_explicit(&rec->heartbeat_ns, (int64_t)sy_now_ns(), memory_order_relaxed);
        atomic_store_explicit(&rec->pid, (int64_t)getpid(), memory_order_release);
        registry_unlock(r);
        return consumer_handle(r, c, record, 0, atomic_load_explicit(consumer_sequence(r, record),
                                                                     memory_order_acquire), out);
    }
    /* Start where the upstream stands: a late joiner sees what is published after it joins (the
     * Python layer tells it how many it missed), and it never gates the producers more loosely
     * than what it replaces (its start <= theirs). */
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
    return consumer_handle(r, c, record, after_mask, start, out);
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

int64_t sy_ring_consumer_lost(const sy_ring_consumer *c) { return c->lost; }

void sy_ring_consumer_leave(sy_ring_consumer *c) {
    if (c && sy_ring_consumer_close(c) != SY_OK) sy_ring_consumer_detach(c);
}

/* Slots a consumer checks one by one before a single-producer ring's cursor is asked instead. */
#define PUBLISHED_SCAN 8

/* The highest sequence from `want` on that the producers have published (want - 1: none yet).
 * The first probe is want's own header: on the item-at-a-time path that one line carries the
 * signal and the item together (the cursor would be a second, dependent transfer). A run of
 * published slots is followed header by header; a long one is read from the cursor (single
 * producer: it covers everything up to it) or followed to its end (multi: only the headers know).
 * The scan ends within a lap: slot want + capacity cannot be published before we release want. */
int64_t highest_published(const sy_ring *r, int64_t want) {
    /* CONTIGUOUS single producer: no header is written, the cursor is stored (release) after the items */
    if (r->cursor_publishes) return atomic_load_explicit(r->cursor, memory_order_acquire);
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
        int64_t minimum = upstream_minimum(c);  /* upstream released only what the producers published */
        if (r->producer_kind == SY_RING_SINGLE_PRODUCER) return minimum;
        /* ... or what a dead producer left: a skipped slot holds no item, so a batch stops before it */
        int64_t s = want;
        while (s <= minimum && slot_published(r, s)) s++;
        return s - 1;
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
    if (c->n_after || c->ring->cursor_publishes) return probe_data(c, want);
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
                            .upstream = upstream_mask(c), .consumer = c};
        int status = wait_for(&w, &got);
        if (status != SY_OK) return status;  /* c->next moved on past any sequence it skipped */
    }
    if (beyond_a_lap(c->ring, c->next, got)) return SY_ECORRUPT;  /* from c->next: skips moved it */
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

/* Copy n items out in at most two runs (see run_before_end). */
static void copy_out(const sy_ring *r, int64_t lo, unsigned char *dst, int64_t n) {
    const size_t size = (size_t)r->slot_size, stride = (size_t)r->slot_stride;
    for (int64_t done = 0, run; done < n; done += run) {
        run = run_before_end(r, lo + done, n - done);
        const unsigned char *item = item_at(r, lo + done);
        if (items_contiguous(r)) {  /* CONTIGUOUS: the run is one memcpy */
            memcpy(dst, item, (size_t)run * size);
            dst += (size_t)run * size;
            continue;
        }
        for (int64_t i = 0; i < run; i++, item += stride, dst += size) {
            if (size == sizeof(int64_t)) memcpy(dst, item, sizeof(int64_t));
            else memcpy(dst, item, size);
        }
    }
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

/* sy_ring_read of what is readable now, never waiting (the Python layer keeps the GIL across it:
 * see sy_ring_write_now); returns how many items it read. Nothing readable, or too large a copy:
 * SY_RING_NOT_NOW, nothing taken, and the waiting call (which also skips a dead producer's claims and
 * sees the end of the stream) does it. */
int64_t sy_ring_read_now(sy_ring_consumer *c, void *dst, int64_t at, int64_t max_n) {
    const sy_ring *r = c->ring;
    if (max_n < 1 || max_n > SY_RING_NOW_BYTES / r->slot_size || at < 0 || c->ahead_pending) return SY_RING_NOT_NOW;
    int64_t want = c->next;
    int64_t got = c->available_cache >= want ? c->available_cache : probe_data(c, want);
    if (got < want) return SY_RING_NOT_NOW;
    if (beyond_a_lap(r, want, got)) return SY_ECORRUPT;
    c->available_cache = got;
    int64_t n = got - want + 1 < max_n ? got - want + 1 : max_n;
    copy_out(r, want, (unsigned char *)dst + at * r->slot_size, n);
    sy_ring_release(c, want + n - 1);
    return n;  /* the count itself: no out-parameter to read back through the FFI */
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
    c->ahead_pending = 1;  /* before the read: whatever it takes, read_now waits for the caller's word */
    return sy_ring_read(c, dst, has_dependents(c) ? 1 : max_n, timeout_ns, n_out);
}

void sy_ring_ahead_taken(sy_ring_consumer *c) { c->ahead_pending = 0; }

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
    sy_ring *r = c->ring;
    int64_t want = c->next;
    /* acquire, and read before the probe: the producers publish before closing, so a probe after
     * seeing "closed" cannot miss their last items */
    bool closed = atomic_load_explicit(&r->header->registry.closed, memory_order_acquire);
    int64_t got = c->available_cache >= want ? c->available_cache : probe_data(c, want);
    if (got < want && r->producer_kind == SY_RING_MULTI_PRODUCER) {
        /* what a dead producer left: looked for at the liveness period, or at once when closed */
        int64_t now = closed ? c->next_liveness_ns : (int64_t)sy_now_ns();
        bool look_for_dead = !c->n_after && now >= c->next_liveness_ns;
        if (look_for_dead) c->next_liveness_ns = now + LIVENESS_PERIOD_NS;
        if (skip_dead_claims(c, look_for_dead)) {  /* the whole dead claim, not its first sequence */
            want = c->next;
            got = probe_data(c, want);
        }
    }
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
