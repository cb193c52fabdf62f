/* ring_bench.c: the LMAX performance-test shapes in C, each raced against a mutex + condition-variable
 * bounded queue (Java's ArrayBlockingQueue of our world), and the false-sharing ablation of the ring
 * itself. Threads (created and pinned in C) and the mutex queue: ring_bench_harness.c; the latency
 * benchmarks: ring_bench_latency.c.
 *
 * Hardware fact exploited (and measured): a handoff that touches only padded sequences with cached
 * copies moves a cache line or two per *batch*; a mutex queue moves the lock line, the indices and
 * both condition variables per *item*, and sleeps in the kernel when a side runs dry.
 */
#include "ring_bench_internal.h"

/* Every shape: producers, then consumers; `upstream[c]` lists the consumers consumer c runs after. */
struct shape_plan {
    int producers;
    int consumers;
    int n_after[3];
    int after[3][2];
    int leaf[3];
};

static int plan_for(int shape, struct shape_plan *p) {
    memset(p, 0, sizeof *p);
    switch (shape) {
    case SY_SHAPE_UNICAST: *p = (struct shape_plan){1, 1, {0}, {{0}}, {1}}; return SY_OK;
    case SY_SHAPE_PIPELINE:
        *p = (struct shape_plan){1, 3, {0, 1, 1}, {{0}, {0}, {1}}, {0, 0, 1}};
        return SY_OK;
    case SY_SHAPE_MULTICAST: *p = (struct shape_plan){1, 3, {0}, {{0}}, {1, 1, 1}}; return SY_OK;
    case SY_SHAPE_DIAMOND:
        *p = (struct shape_plan){1, 3, {0, 0, 2}, {{0}, {0}, {0, 1}}, {0, 0, 1}};
        return SY_OK;
    case SY_SHAPE_THREE_TO_ONE: *p = (struct shape_plan){3, 1, {0}, {{0}}, {1}}; return SY_OK;
    default: return SY_EINVAL;
    }
}

static int64_t triangle(int64_t n) { return n * (n + 1) / 2; }

/* Items through the shape, leaf batches, and whether every consumer summed exactly 1..n of each
 * producer (threads: producers first, then consumers in plan order). */
static void summarize(const struct bench_thread *threads, const struct shape_plan *plan,
                      int64_t per_producer, sy_bench_result *out) {
    out->items = per_producer * plan->producers;
    out->batches = 0;
    out->checksum_ok = 1;
    for (int c = 0; c < plan->consumers; c++) {
        const struct bench_thread *t = &threads[plan->producers + c];
        if (t->sum != plan->producers * triangle(per_producer)) out->checksum_ok = 0;
        if (plan->leaf[c]) out->batches += t->batches;
    }
}

/* ---- the ring shapes ------------------------------------------------------------------------------ */

struct ring_shape {
    sy_ring *ring;
    sy_ring_producer *producers[3];
    sy_ring_consumer *consumers[3];
};

/* The int64 item of a sequence: items sit one slot stride apart (each behind its published header). */
struct item_view {
    unsigned char *first;
    int64_t stride;
    int64_t mask;
};

static struct item_view items_of(sy_ring *ring) {
    sy_ring_info info;
    sy_ring_get_info(ring, &info);
    return (struct item_view){sy_ring_slots(ring), info.slot_stride, info.capacity - 1};
}

static inline int64_t *item_ptr(struct item_view v, int64_t sequence) {
    return (int64_t *)(v.first + (sequence & v.mask) * v.stride);
}

/* Values 1..items, so that every consumer's sum is known in advance. */
static void ring_producer_body(struct bench_thread *t) {
    struct ring_shape *s = t->shared;
    sy_ring_producer *p = s->producers[t->role];
    struct item_view items = items_of(s->ring);
    for (int64_t done = 0; done < t->items;) {
        int64_t n = t->items - done < t->batch ? t->items - done : t->batch;
        int64_t hi;
        if ((t->status = sy_ring_claim(p, n, -1, &hi)) != SY_OK) return;
        for (int64_t s = hi - n + 1, v = done + 1; s <= hi; s++, v++) *item_ptr(items, s) = v;
        sy_ring_publish(p, hi - n + 1, hi);
        done += n;
    }
}

static void ring_consumer_body(struct bench_thread *t) {
    struct ring_shape *s = t->shared;
    sy_ring_consumer *c = s->consumers[t->role];
    struct item_view items = items_of(s->ring);
    int64_t next = sy_ring_consumer_sequence(c) + 1;
    for (int64_t seen = 0; seen < t->items;) {
        int64_t hi;
        if ((t->status = sy_ring_wait_for(c, -1, &hi)) != SY_OK) return;
        for (int64_t s = next; s <= hi; s++) t->sum += *item_ptr(items, s);
        seen += hi - next + 1;
        t->batches++;
        sy_ring_release(c, hi);
        next = hi + 1;
    }
}

int sy_bench_ring(int shape, int wait, int64_t items, int64_t batch, int64_t capacity, const int *cpus,
                  int n_cpus, sy_bench_result *out) {
    struct shape_plan plan;
    if (plan_for(shape, &plan) != SY_OK || items < 1 || batch < 1 || batch > capacity) return SY_EINVAL;
    sy_ring_config config = {.capacity = capacity, .slot_size = sizeof(int64_t), .wait = wait,
                             .producer_kind = plan.producers > 1 ? SY_RING_MULTI_PRODUCER : SY_RING_SINGLE_PRODUCER};
    struct ring_shape s = {0};
    int status = sy_ring_create(&config, NULL, &s.ring);
    if (status != SY_OK) return status;
    struct bench_thread threads[MAX_BENCH_THREADS] = {0};
    int n = 0;
    for (int c = 0; c < plan.consumers && status == SY_OK; c++) {
        int after[2];
        for (int i = 0; i < plan.n_after[c]; i++) after[i] = sy_ring_consumer_index(s.consumers[plan.after[c][i]]);
        status = sy_ring_consumer_open(s.ring, after, plan.n_after[c], &s.consumers[c]);
    }
    for (int p = 0; p < plan.producers && status == SY_OK; p++) {
        status = sy_ring_producer_open(s.ring, &s.producers[p]);
        threads[n++] = (struct bench_thread){.body = ring_producer_body, .shared = &s, .role = p,
                                             .items = items / plan.producers, .batch = batch};
    }
    int64_t per_producer = items / plan.producers;
    for (int c = 0; c < plan.consumers && status == SY_OK; c++)
        threads[n++] = (struct bench_thread){.body = ring_consumer_body, .shared = &s, .role = c,
                                             .items = per_producer * plan.producers};
    for (int i = 0; i < n; i++) threads[i].cpu = cpu_for(cpus, n_cpus, i);
    if (status == SY_OK) status = run_threads(threads, n, &out->seconds);
    if (status == SY_OK) summarize(threads, &plan, per_producer, out);
    for (int c = plan.consumers - 1; c >= 0; c--) sy_ring_consumer_close(s.consumers[c]);
    for (int p = 0; p < plan.producers; p++) sy_ring_producer_close(s.producers[p]);
    sy_ring_free(s.ring);
    return status;
}

/* ---- the mutex queue's shapes (the queue: ring_bench_internal.h, ring_bench_harness.c) --------------- */

/* Queue wiring per shape: producers put into `out` queues; consumer c takes from its `in` queues
 * (round-robin when it has two, the diamond's join) and forwards to its `out` queues. */
struct queue_shape {
    struct mutex_queue queues[4];
    int producer_out[3];
    int n_producer_out;
    int consumer_in[3][2];
    int n_consumer_in[3];
    int consumer_out[3];   /* -1: a leaf */
};

static void queue_producer_body(struct bench_thread *t) {
    struct queue_shape *s = t->shared;
    for (int64_t v = 1; v <= t->items; v++)
        for (int i = 0; i < s->n_producer_out; i++) mutex_queue_put(&s->queues[s->producer_out[i]], v);
}

static void queue_consumer_body(struct bench_thread *t) {
    struct queue_shape *s = t->shared;
    int c = t->role, n_in = s->n_consumer_in[c], out = s->consumer_out[c];
    for (int64_t seen = 0; seen < t->items; seen++) {
        int64_t v = mutex_queue_take(&s->queues[s->consumer_in[c][0]]);
        if (n_in == 2) v = mutex_queue_take(&s->queues[s->consumer_in[c][1]]);  /* both branches done */
        t->sum += v;
        t->batches++;
        if (out >= 0) mutex_queue_put(&s->queues[out], v);
    }
}

static void queue_wiring(int shape, struct queue_shape *s) {
    memset(s, 0, sizeof *s);
    for (int c = 0; c < 3; c++) s->consumer_out[c] = -1;
    switch (shape) {
    case SY_SHAPE_PIPELINE:  /* P -q0-> C1 -q1-> C2 -q2-> C3 */
        s->producer_out[0] = 0, s->n_producer_out = 1;
        for (int c = 0; c < 3; c++) s->consumer_in[c][0] = c, s->n_consumer_in[c] = 1;
        s->consumer_out[0] = 1, s->consumer_out[1] = 2;
        break;
    case SY_SHAPE_MULTICAST:  /* P -q0,q1,q2-> C1, C2, C3 */
        s->n_producer_out = 3;
        for (int c = 0; c < 3; c++) s->producer_out[c] = c, s->consumer_in[c][0] = c, s->n_consumer_in[c] = 1;
        break;
    case SY_SHAPE_DIAMOND:  /* P -q0-> C1 -q2-> C3, P -q1-> C2 -q3-> C3 */
        s->producer_out[0] = 0, s->producer_out[1] = 1, s->n_producer_out = 2;
        s->consumer_in[0][0] = 0, s->consumer_in[1][0] = 1, s->n_consumer_in[0] = s->n_consumer_in[1] = 1;
        s->consumer_out[0] = 2, s->consumer_out[1] = 3;
        s->consumer_in[2][0] = 2, s->consumer_in[2][1] = 3, s->n_consumer_in[2] = 2;
        break;
    default:  /* unicast and 3P-1C: everyone shares q0 */
        s->n_producer_out = 1;
        s->n_consumer_in[0] = 1;
        break;
    }
}

int sy_bench_mutex_queue(int shape, int64_t items, int64_t capacity, const int *cpus, int n_cpus,
                         sy_bench_result *out) {
    struct shape_plan plan;
    if (plan_for(shape, &plan) != SY_OK || items < 1 || capacity < 1) return SY_EINVAL;
    struct queue_shape s;
    queue_wiring(shape, &s);
    int status = SY_OK, ready = 0;
    for (; ready < 4 && status == SY_OK; ready++) status = mutex_queue_init(&s.queues[ready], capacity);
    struct bench_thread threads[MAX_BENCH_THREADS] = {0};
    int n = 0;
    int64_t per_producer = items / plan.producers;
    for (int p = 0; p < plan.producers; p++)
        threads[n++] = (struct bench_thread){.body = queue_producer_body, .shared = &s, .role = p,
                                             .items = per_producer};
    for (int c = 0; c < plan.consumers; c++)
        threads[n++] = (struct bench_thread){.body = queue_consumer_body, .shared = &s, .role = c,
                                             .items = per_producer * plan.producers};
    for (int i = 0; i < n; i++) threads[i].cpu = cpu_for(cpus, n_cpus, i);
    if (status == SY_OK) status = run_threads(threads, n, &out->seconds);
    if (status == SY_OK) summarize(threads, &plan, per_producer, out);
    for (int i = 0; i < ready; i++) mutex_queue_destroy(&s.queues[i]);
    return status;
}

/* ---- false-sharing ablation --------------------------------------------------------------------------
 * THE ring (c_src/ring_*.c, unchanged code), one producer and one consumer passing one int64 at a time,
 * created with its hot sequences 128 B apart (its normal layout), 64 B apart (adjacent lines, which
 * the L2 spatial prefetcher pairs), or packed 8 B apart in one line. The producer stores the cursor
 * on every publish and the consumer its sequence on every read: packed, each store has to take the
 * line back from the other core, although neither side ever reads the other's field there. */

struct false_sharing {
    sy_ring_producer *producer;
    sy_ring_consumer *consumer;
};

static void false_sharing_produce(struct bench_thread *t) {
    struct false_sharing *fs = t->shared;
    for (int64_t v = 1; v <= t->items; v++)
        if ((t->status = sy_ring_write_one(fs->producer, &v, -1)) != SY_OK) return;
}

static void false_sharing_consume(struct bench_thread *t) {
    struct false_sharing *fs = t->shared;
    for (int64_t seen = 0, v; seen < t->items; seen++) {
        if ((t->status = sy_ring_read_one(fs->consumer, &v, -1)) != SY_OK) return;
        t->sum += v;
    }
}

int sy_bench_false_sharing(int padding, int64_t items, const int *cpus, int n_cpus, sy_bench_result *out) {
    if (padding == 0) padding = sizeof(int64_t);  /* packed: one int64 after the other */
    if ((padding != sizeof(int64_t) && padding != SY_CACHE_LINE && padding != SY_DESTRUCTIVE_SIZE) || items < 1)
        return SY_EINVAL;
    sy_ring_config config = {.capacity = 1024, .slot_size = sizeof(int64_t), .wait = SY_WAIT_BUSY_SPIN,
                             .producer_kind = SY_RING_SINGLE_PRODUCER, .sequence_stride = padding};
    sy_ring *ring;
    int status = sy_ring_create(&config, NULL, &ring);
    if (status != SY_OK) return status;
    struct false_sharing fs = {0};
    status = sy_ring_consumer_open(ring, NULL, 0, &fs.consumer);
    if (status == SY_OK) status = sy_ring_producer_open(ring, &fs.producer);
    if (status == SY_OK) {
        struct bench_thread threads[2] = {
            {.body = false_sharing_produce, .shared = &fs, .items = items, .cpu = cpu_for(cpus, n_cpus, 0)},
            {.body = false_sharing_consume, .shared = &fs, .items = items, .cpu = cpu_for(cpus, n_cpus, 1)},
        };
        status = run_threads(threads, 2, &out->seconds);
        out->items = items;
        out->batches = items;
        out->checksum_ok = threads[1].sum == triangle(items);
    }
    if (fs.producer) sy_ring_producer_close(fs.producer);
    if (fs.consumer) sy_ring_consumer_close(fs.consumer);
    sy_ring_free(ring);
    return status;
}
