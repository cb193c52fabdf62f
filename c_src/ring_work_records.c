/* ring_work_records.c: records of any size put into the work pool and taken out of it, what
 * sympathy.Queue's put and get are made of (the pool itself: ring_work_pool.c).
 *
 * Hardware fact served: a record of any size is a run of consecutive slots whose first header,
 * published last (release), hands the whole record over in the line the worker reads first anyway;
 * the common small record is one 128-byte slot, header and bytes in one transfer (the adjacent-line
 * prefetcher pairs the two 64-byte lines).
 */
#include "ring_work_internal.h"

#include <stdlib.h>
#include <string.h>

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

/* One count of items (bounded by maxsize) and of unfinished tasks. The caller adds it to its
 * intent's `reserved` at once: a producer that dies holding counts gives them back (pool_reap,
 * finish_skip). */
static int take_count(sy_queue_producer *qp, struct pool_wait *pw) {
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
        if (liveness_due) {
            atomic_store_explicit(&r->header->producers[qp->record].heartbeat_ns, (int64_t)sy_now_ns(),
                                  memory_order_relaxed);
            pool_reap(r, false);
        }
        items = atomic_load_explicit(&pool->count.items, memory_order_relaxed);
    }
    if (pool->joinable) atomic_fetch_add_explicit(&pool->count.unfinished, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->intents[qp->record].reserved, 1, memory_order_release);
    return SY_OK;
}

int sy_queue_reserve(sy_queue_producer *qp, int64_t timeout_ns) {
    struct pool_wait pw;
    pool_wait_start(&pw, qp->ring, timeout_ns);
    return take_count(qp, &pw);
}

int sy_queue_wait_space(sy_queue_producer *qp, int64_t bytes, int64_t timeout_ns) {
    sy_ring *r = qp->ring;
    if (bytes < 0 || bytes > sy_queue_max_record(r)) return SY_EINVAL;
    struct pool_wait pw;
    pool_wait_start(&pw, r, timeout_ns);
    for (;;) {
        /* No field of qp is written here: another thread may be claiming through it. */
        int64_t wrap_point = atomic_load_explicit(r->cursor, memory_order_relaxed) + record_slots(r, bytes) -
                             ring_capacity(r);
        struct space_wanted sw = {.ring = r, .qp = qp, .wrap_point = wrap_point};
        if (space_ready(&sw)) return SY_OK;
        bool liveness_due;
        int status = pool_nap(&pw, space_ready, &sw, &liveness_due);
        if (status != SY_OK) return status;
        if (liveness_due) {
            atomic_store_explicit(&r->header->producers[qp->record].heartbeat_ns, (int64_t)sy_now_ns(),
                                  memory_order_relaxed);
            pool_reap(r, false);
        }
    }
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
                 int mode) {
    sy_ring *r = qp->ring;
    sy_work_pool *pool = work_pool(r);
    int64_t bytes = 0;
    if (n < 0 || (n > 0 && (!pieces || !sizes)) || (mode != SY_QUEUE_TRY && mode != SY_QUEUE_RESERVED))
        return SY_EINVAL;
    for (int i = 0; i < n; i++) {
        if (sizes[i] < 0 || sizes[i] > sy_queue_max_record(r) - bytes) return SY_EINVAL;
        bytes += sizes[i];
    }
    struct pool_wait pw;
    pool_wait_start(&pw, r, 0);  /* one look: neither the count nor the space is waited for here */
    if (mode == SY_QUEUE_TRY) {
        int status = take_count(qp, &pw);
        if (status != SY_OK) return status;  /* maxsize reached: nothing held */
    }
    int64_t lo;
    int status = claim_slots(qp, record_slots(r, bytes), &pw, &lo);
    sy_pool_intent *intent = &pool->intents[qp->record];
    if (status != SY_OK) {
        atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_relaxed);
        /* the count stays in `reserved`: the caller keeps the record spilled, or gives it back */
        return status == SY_ETIMEDOUT ? SY_QUEUE_SPILLED : status;
    }
    sy_record_prefix prefix = {.bytes = bytes, .tag = tag};
    scatter_record(r, lo, &prefix, pieces, sizes, n);
    /* release: every byte of the record before the header that says it is there */
    atomic_store_explicit(&slot_header(r, lo)->published_plus_one, lo + 1, memory_order_release);
    atomic_fetch_sub_explicit(&intent->reserved, 1, memory_order_relaxed);  /* the record holds the count now */
    atomic_store_explicit(&intent->claimed, 0, memory_order_relaxed);
    atomic_store_explicit(&intent->lo, NO_INTENT, memory_order_release);
    wake_waiters(r);
    return SY_OK;
}

int sy_queue_put1(sy_queue_producer *qp, const void *data, int64_t size, int64_t tag, int mode) {
    return sy_queue_put(qp, &data, &size, 1, tag, mode);
}

void sy_queue_unreserve(sy_queue_producer *qp, int64_t n) {
    sy_work_pool *pool = work_pool(qp->ring);
    if (n <= 0) return;
    atomic_fetch_sub_explicit(&pool->intents[qp->record].reserved, n, memory_order_relaxed);
    release_reservation(qp->ring, pool, n);
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

