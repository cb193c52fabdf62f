/* ring_sequencer.c: sequences and sequencers: how producers claim slots and publish them.
 *
 * Hardware fact served: the cursor is the one line every producer of a multi-producer ring writes,
 * so a claim is a single fetch-add (or compare-and-swap) on it, and a single producer needs no
 * atomic read-modify-write at all: its claim is private arithmetic on its own block, and it reads
 * the consumers' sequences only when its cached minimum says the ring may be full (about once a
 * lap). Each slot says itself that it is published, in the line that carries the item.
 */
#include "ring_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- producers ------------------------------------------------------------------------------------ */

/* Under the registration lock: frees the records of dead producers. A single producer's record
 * always goes (the new producer takes over at the cursor); a multi producer's with a claim open
 * only once every consumer has passed the cursor as it stood after the death (mark_dead_cursor):
 * until then a consumer may still have to learn from it that the hole it waits on is a dead
 * producer's. Returns how many were freed. */
static int reclaim_dead_producers(sy_ring *r) {
    int freed = 0;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++) {
        sy_producer_record *rec = &r->header->producers[i];
        int64_t pid = atomic_load_explicit(&rec->pid, memory_order_acquire);
        if (!pid || pid_alive(pid)) continue;
        if (r->producer_kind == SY_RING_MULTI_PRODUCER &&
            (atomic_load_explicit(&rec->open_claims, memory_order_acquire) ||
             atomic_load_explicit(&rec->owner_floor, memory_order_acquire) != INT64_MAX)) {
            int64_t last = mark_dead_cursor(r, rec);
            if (minimum_gating(r, INT64_MAX) < last) continue;  /* a consumer is still at or before it */
        }
        atomic_store_explicit(&rec->pid, 0, memory_order_release);
        atomic_fetch_sub_explicit(&r->header->registry.producers, 1, memory_order_relaxed);
        freed++;
    }
    return freed;
}

/* Multi producer: what a consumer needs to skip a dead producer's claim is, per record, which
 * holes it may own (abandon_dead_claim). Writing that is on every claim's path, so it costs plain
 * stores to this record's own block, a line no other core writes, where it can: a locked
 * read-modify-write drains the store buffer (every slot header just published waits for its line
 * to come back from the consumer's cache first) and costs ~20 cycles even then, two of them per
 * claim (count up, count down) ran 3P-1C with claims of one item 10-15 % slower. Plain stores need
 * one writer, so the first thread that claims through the handle owns the owner lane
 * (owner_floor) for the handle's life; any other thread sharing the handle (a Python object any
 * thread may publish through) counts its claims in the shared lane with read-modify-writes, as
 * every claim did before. A fork()ed child opens its own producer (RingBuffer.attach does): one
 * inherited through fork would share the parent's record, its pid and, here, its owner thread id. */
static bool owner_claims(sy_ring_producer *p) {
    uintptr_t me = (uintptr_t)pthread_self();
    /* relaxed: the lane's own fields are written by that one thread; the CAS only picks it */
    uintptr_t owner = atomic_load_explicit(&p->owner_thread, memory_order_relaxed);
    if (owner == me) return true;
    return owner == 0 && atomic_compare_exchange_strong_explicit(&p->owner_thread, &owner, me, memory_order_relaxed,
                                                                 memory_order_relaxed);
}

/* Before the claim's cursor RMW, which is a release: a consumer that acquires the cursor and
 * finds the claim there sees this floor too (or a later one). `floor` is at most the claim's
 * first sequence: a reader then takes this producer for the possible owner of more holes, never
 * of fewer. The floor is never read from the cursor line first: a load of the line every producer
 * RMWs, then the RMW, is two transfers of the hottest line per claim instead of one (3P-1C ran
 * 8-21 % slower that way). */
static void owner_open(sy_ring_producer *p, int64_t floor) {
    /* release, though the RMW after it carries it to readers already: a reader that finds this
     * floor must also see the record's reclaim before this handle took it (abandon_dead_claim);
     * on x86 a release store is the same plain store */
    atomic_store_explicit(&p->ring->header->producers[p->record].owner_floor, floor, memory_order_release);
}

/* release: a consumer that sees no claim open sees the slots published before */
static void owner_close(sy_ring_producer *p) {
    atomic_store_explicit(&p->ring->header->producers[p->record].owner_floor, INT64_MAX, memory_order_release);
}

/* The shared lane, before a claim: count it open (acq_rel RMW; the claim's cursor RMW is a release
 * after it). Returns whether it is the lane's only open claim; then, once the claim exists,
 * shared_raise_floor records its first sequence. Until then the floor holds an older, lower
 * claim's start: as above, more holes, never fewer. */
static bool shared_open(sy_ring_producer *p) {
    sy_producer_record *rec = &p->ring->header->producers[p->record];
    return atomic_fetch_add_explicit(&rec->open_claims, 1, memory_order_acq_rel) == 0;
}

static void shared_raise_floor(sy_ring_producer *p, int64_t first) {
    /* release: as owner_open */
    atomic_store_explicit(&p->ring->header->producers[p->record].claim_floor, first, memory_order_release);
}

/* release: as owner_close */
static void shared_close(sy_ring_producer *p) {
    atomic_fetch_sub_explicit(&p->ring->header->producers[p->record].open_claims, 1, memory_order_release);
}

/* After publishing (or giving up): the calling thread's lane. The owner never changes once picked,
 * so the thread that claimed finds the same lane here. */
static void close_claim(sy_ring_producer *p) {
    if (owner_claims(p)) owner_close(p);
    else shared_close(p);
}

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
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER) reclaim_dead_producers(r);
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER && atomic_load_explicit(&reg->producers, memory_order_relaxed) > 0) {
        status = SY_EINVAL;  /* a single-producer ring has exactly one producer */
    } else {
        for (int i = 0; i < SY_RING_MAX_PRODUCERS && record < 0; i++)
            if (atomic_load_explicit(&r->header->producers[i].pid, memory_order_relaxed) == 0) record = i;
        if (record < 0 && reclaim_dead_producers(r) > 0) {
            for (int i = 0; i < SY_RING_MAX_PRODUCERS && record < 0; i++)
                if (atomic_load_explicit(&r->header->producers[i].pid, memory_order_relaxed) == 0) record = i;
        }
        if (record < 0) status = SY_EINVAL;
    }
    if (status == SY_OK) {
        /* release: a reader that sees these sees the reclaim before them (abandon_dead_claim) */
        sy_producer_record *rec = &r->header->producers[record];
        atomic_store_explicit(&rec->dead_cursor_plus_one, 0, memory_order_relaxed);
        atomic_store_explicit(&rec->open_claims, 0, memory_order_release);
        atomic_store_explicit(&rec->owner_floor, INT64_MAX, memory_order_release);
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
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER) {
        /* Taking over from a producer that died after publishing slots but before storing the
         * cursor: those items were (or will be) delivered, so claiming starts after them. */
        int64_t start = p->next_claim;
        for (int64_t lap_end = start + ring_capacity(r); start < lap_end && slot_published(r, start + 1);) start++;
        if (start != p->next_claim) atomic_store_explicit(r->cursor, start, memory_order_release);
        p->next_claim = start;
    }
    p->gating_cache = NO_SEQUENCE;
    atomic_init(&p->busy, 0);
    atomic_init(&p->owner_thread, 0);
    p->owner_seen = p->next_claim;  /* every later claim starts after the cursor read above */
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

/* Two threads claiming through one single-producer handle would take the same sequences: the
 * second is refused while a claim is open (claim to publish). Every claim takes the flag with a
 * locked exchange (acquire: it sees the previous claimer's next_claim). A cheaper re-entry for the
 * last claimer (a plain load and store) was tried and lost items: its store could still sit in the
 * store buffer when another thread's exchange read the flag, so both claimed the same sequences
 * (test_two_threads_on_one_single_producer_never_duplicate_or_lose, 1 item in 200 000 under load).
 * The exchange costs about 20 cycles and a store-buffer drain per claim; per-item Python calls
 * cost a microsecond each. Asked for by the Python layer, whose one object any thread may call; a
 * C caller keeps the handle to one thread and does not pay it. */
static bool enter_single_claim(sy_ring_producer *p) {
    return !atomic_exchange_explicit(&p->busy, 1, memory_order_acquire);
}

/* Single producer: nobody else moves the cursor, so the claim is private arithmetic; the shared
 * gating sequences are read only when the cached minimum says the ring might be full. */
static int claim_single(sy_ring_producer *p, int64_t n, int64_t timeout_ns, int64_t *hi) {
    if (p->ring->refuse_concurrent_claims && !enter_single_claim(p)) return SY_RING_EBUSY;
    int64_t next = p->next_claim + n;
    int64_t wrap_point = next - ring_capacity(p->ring);
    if (wrap_point > p->gating_cache) {
        int64_t gating;
        int status = wait_for_space(p, wrap_point, p->next_claim, timeout_ns, &gating);
        if (status != SY_OK) {
            atomic_store_explicit(&p->busy, 0, memory_order_release);
            return status;
        }
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
    bool owner = owner_claims(p);
    /* The owner's last claim ended at owner_seen or later: the cursor only grows, so this claim
     * starts after it. Raised to the exact start right after the RMW, before any wait for space:
     * a low floor held through that wait could make a consumer keep waiting on a dead producer's
     * hole for the space only skipping it frees. */
    bool first = false;
    if (owner) owner_open(p, p->owner_seen + 1);
    else first = shared_open(p);
    int64_t current = atomic_fetch_add_explicit(r->cursor, n, memory_order_release);  /* see owner_open */
    if (owner) {
        owner_open(p, current + 1);
        p->owner_seen = current + n;
    } else if (first) {
        shared_raise_floor(p, current + 1);
    }
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
    bool owner = owner_claims(p);
    bool counted = false, first = false;  /* shared lane: this attempt counted open; as its only claim */
    for (;;) {
        int64_t current = atomic_load_explicit(r->cursor, memory_order_relaxed);
        int64_t next = current + n;
        int64_t wrap_point = next - ring_capacity(r);
        int64_t cached = atomic_load_explicit(r->gating_cache, memory_order_acquire);
        if (wrap_point > cached || cached > current) {
            int64_t gating = minimum_gating(r, current);
            if (wrap_point > gating) {
                /* Nothing of ours looks open while we wait (a failed CAS below leaves it so): a
                 * floor below a dead producer's hole would keep the consumers from skipping it,
                 * and only that skip frees the space we wait for. The shared lane used to count
                 * the claim open from the start, through this wait: two threads on one handle,
                 * one of them waiting here with its floor below a dead claim, stalled the ring
                 * until the wait timed out (ad hoc stress, 2 runs in 10 under yield). */
                if (owner) owner_close(p);
                else if (counted) shared_close(p);
                counted = false;
                int64_t left = deadline - (int64_t)sy_now_ns();
                int status = wait_for_space(p, wrap_point, current, left > 0 ? left : 0, &gating);
                if (status != SY_OK) return status;  /* nothing was claimed, nothing is open */
            }
            atomic_store_explicit(r->gating_cache, gating, memory_order_release);
            if (wrap_point > gating) continue;
        }
        /* The owner's floor is exact here: the claim, if the CAS succeeds, starts at current + 1
         * (a failed CAS leaves it naming sequences another producer took: more holes, never fewer,
         * and only until the next attempt stores the new one). Either lane opens only now, after
         * the wait for space (see there). */
        if (owner) {
            owner_open(p, current + 1);
        } else if (!counted) {
            first = shared_open(p);
            counted = true;
        }
        if (atomic_compare_exchange_weak_explicit(r->cursor, &current, next, memory_order_release,
                                                  memory_order_relaxed)) {  /* release: see owner_open */
            if (owner) p->owner_seen = next;
            else if (first) shared_raise_floor(p, current + 1);
            *hi = next;
            return SY_OK;
        }
    }
}

int sy_ring_claim(sy_ring_producer *p, int64_t n, int64_t timeout_ns, int64_t *hi) {
    if (n < 1 || n > ring_capacity(p->ring)) return SY_EINVAL;
    if (atomic_load_explicit(&p->ring->header->registry.closed, memory_order_relaxed)) return SY_ECLOSED;
    if (p->ring->producer_kind == SY_RING_SINGLE_PRODUCER) return claim_single(p, n, timeout_ns, hi);
    /* A sliced wait returns before its claim exists only in the compare-and-swap form. */
    bool untimed = timeout_ns < 0 && p->ring->wait_slice_ns == 0;
    return untimed ? claim_multi_untimed(p, n, hi) : claim_multi_timed(p, n, timeout_ns, hi);
}

/* Each slot says for itself that it is in (release: its item, written before, is visible to a
 * consumer that acquires the header). One rule for both sequencers: under a multi producer a
 * consumer never reads a slot that a slower producer, holding an earlier claim, has not finished
 * (LMAX's availableBuffer, here in the slot's own line). */
static inline void mark_published(sy_ring *r, int64_t sequence) {
    if (r->cursor_publishes) return;  /* the cursor alone says it (finish_publish) */
    atomic_store_explicit(&slot_header(r, sequence)->published_plus_one, sequence + 1, memory_order_release);
}

/* After the headers. Single producer: the cursor says "everything up to hi", so a consumer far
 * behind learns a whole batch from one line instead of scanning headers; nobody reads it on the
 * item-at-a-time path, so its line stays in our cache and the store costs no transfer there. */
static inline void finish_publish(sy_ring_producer *p, int64_t hi) {
    sy_ring *r = p->ring;
    if (r->producer_kind == SY_RING_SINGLE_PRODUCER) {
        atomic_store_explicit(r->cursor, hi, memory_order_release);
        if (r->refuse_concurrent_claims) atomic_store_explicit(&p->busy, 0, memory_order_release);  /* claim closed */
    } else {
        close_claim(p);
    }
    wake_waiters(r);
}

void sy_ring_publish(sy_ring_producer *p, int64_t lo, int64_t hi) {
    for (int64_t s = lo; s <= hi; s++) mark_published(p->ring, s);
    finish_publish(p, hi);
}


/* Copy n items in, publishing each slot as its item lands: one pass over the slot lines, and a
 * consumer may start on the first items while the last are still being copied. 8-byte items
 * (int64, float64: the Python fast paths) get a fixed-size copy, which compiles to one move. */
static void copy_in_and_publish(sy_ring *r, int64_t lo, const unsigned char *src, int64_t n) {
    const size_t size = (size_t)r->slot_size, stride = (size_t)r->slot_stride;
    if (items_contiguous(r)) {
        /* CONTIGUOUS: each run is one memcpy (wide stores, no header between the items), then the
         * headers, each a release store after the whole run: a consumer that sees a header sees its
         * item. A single producer writes none: finish_publish's cursor store says it all. */
        for (int64_t done = 0, run; done < n; done += run) {
            run = run_before_end(r, lo + done, n - done);
            memcpy(item_at(r, lo + done), src + done * size, (size_t)run * size);
            if (!r->cursor_publishes)
                for (int64_t s = lo + done; s < lo + done + run; s++) mark_published(r, s);
        }
        return;
    }
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
        finish_publish(p, hi);
        *written += chunk;
    }
    return SY_OK;
}

/* sy_ring_claim's first try for a single producer, which never waits (SY_RING_NOT_NOW when the
 * ring is full now, or for a multi-producer ring): the Python `claim` calls it with the GIL kept,
 * as sy_ring_write_now, and the waiting claim only when it answers "not now". The claim stays
 * open until sy_ring_publish, as sy_ring_claim's. */
int sy_ring_claim_now(sy_ring_producer *p, int64_t n, int64_t *hi) {
    sy_ring *r = p->ring;
    if (r->producer_kind != SY_RING_SINGLE_PRODUCER || n < 1 || n > ring_capacity(r)) return SY_RING_NOT_NOW;
    if (atomic_load_explicit(&r->header->registry.closed, memory_order_relaxed)) return SY_ECLOSED;  /* as claim */
    if (r->refuse_concurrent_claims && !enter_single_claim(p)) return SY_RING_EBUSY;
    int64_t next = p->next_claim + n;
    int64_t wrap_point = next - ring_capacity(r);
    if (wrap_point > p->gating_cache) {
        int64_t gating = minimum_gating(r, p->next_claim);  /* acquire loads: see claim_single's wait */
        if (wrap_point > gating) {
            atomic_store_explicit(&p->busy, 0, memory_order_release);  /* no claim made */
            return SY_RING_NOT_NOW;
        }
        p->gating_cache = gating;
    }
    p->next_claim = next;
    *hi = next;
    return SY_OK;
}

/* What sy_ring_write does for a batch it can take at once, with no wait at all: the Python layer
 * calls it with the GIL kept (a C call that released and re-took it cost a GIL handoff to every
 * other Python thread, per batch), and only a wait needs the GIL released. sy_ring_claim_now's claim
 * (a single producer's own arithmetic; the gating sequences read once when the cached minimum runs
 * out), then the copy and the publish. */
int sy_ring_write_now(sy_ring_producer *p, const void *items, int64_t n) {
    if (n > SY_RING_NOW_BYTES / p->ring->slot_size) return SY_RING_NOT_NOW;
    int64_t hi;
    int status = sy_ring_claim_now(p, n, &hi);
    if (status != SY_OK) return status;
    copy_in_and_publish(p->ring, hi - n + 1, items, n);
    finish_publish(p, hi);
    return SY_OK;
}

int sy_ring_write_args_now(const sy_ring_write_args *a) { return sy_ring_write_now(a->producer, a->items, a->n); }

int sy_ring_write_one(sy_ring_producer *p, const void *item, int64_t timeout_ns) {
    int64_t hi;
    int status = sy_ring_claim(p, 1, timeout_ns, &hi);
    if (status != SY_OK) return status;
    memcpy(item_at(p->ring, hi), item, (size_t)p->ring->slot_size);
    mark_published(p->ring, hi);
    finish_publish(p, hi);
    return SY_OK;
}

/* The Python per-item fast path for 8-byte items: an int64 crosses the FFI as a plain argument,
 * with no bytes object to build or parse. */
int sy_ring_write_i64(sy_ring_producer *p, int64_t value, int64_t timeout_ns) {
    if (p->ring->slot_size != (int64_t)sizeof value) return SY_EINVAL;
    return sy_ring_write_one(p, &value, timeout_ns);
}
