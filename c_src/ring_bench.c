/* ring_bench.c: the LMAX performance-test shapes in C, threads created and pinned here, each raced
 * against a mutex + condition-variable bounded queue (Java's ArrayBlockingQueue of our world).
 *
 * Hardware fact exploited (and measured): a handoff that touches only padded sequences with cached
 * copies moves a cache line or two per *batch*; a mutex queue moves the lock line, the indices and
 * both condition variables per *item*, and sleeps in the kernel when a side runs dry.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

/* ---- thread plumbing shared by every shape ----------------------------------------------------- */

#define MAX_BENCH_THREADS 8

struct bench_thread;
typedef void (*bench_body)(struct bench_thread *t);

/* The start gate: threads wait for GATE_GO so that all start together and the clock starts with
 * them; GATE_ABORT sends them home when a later thread could not be created. */
enum { GATE_WAIT = 0, GATE_GO = 1, GATE_ABORT = -1 };

struct bench_thread {
    pthread_t thread;
    bench_body body;
    _Atomic int *gate;
    int cpu;
    void *shared;          /* the shape's state */
    int role;              /* producer index or consumer index within the shape */
    int64_t items;         /* to produce, or to consume */
    int64_t batch;         /* producer claim size */
    int64_t sum;           /* consumers: sum of every value seen (the checksum) */
    int64_t batches;       /* consumers: reads that returned data */
    int status;
};

static void *bench_trampoline(void *arg) {
    struct bench_thread *t = arg;
    sy_pin_self(t->cpu);
    int gate;
    while ((gate = atomic_load_explicit(t->gate, memory_order_acquire)) == GATE_WAIT) sched_yield();
    if (gate == GATE_GO) t->body(t);
    return NULL;
}

/* Start the threads, release them together, time until the last one is done. */
static int run_threads(struct bench_thread *threads, int n, double *seconds) {
    _Atomic int gate = GATE_WAIT;
    int started = 0;
    for (; started < n; started++) {
        threads[started].gate = &gate;
        if (pthread_create(&threads[started].thread, NULL, bench_trampoline, &threads[started]) != 0) break;
    }
    uint64_t t0 = sy_now_ns();
    /* release: everything set up before (rings, consumers) is visible to the threads */
    atomic_store_explicit(&gate, started == n ? GATE_GO : GATE_ABORT, memory_order_release);
    for (int i = 0; i < started; i++) pthread_join(threads[i].thread, NULL);
    *seconds = (double)(sy_now_ns() - t0) * 1e-9;
    if (started < n) return SY_EOS;
    for (int i = 0; i < n; i++)
        if (threads[i].status != SY_OK) return threads[i].status;
    return SY_OK;
}

static int cpu_for(const int *cpus, int n_cpus, int i) { return cpus && n_cpus > 0 ? cpus[i % n_cpus] : -1; }

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

/* Values 1..items, so that every consumer's sum is known in advance. */
static void ring_producer_body(struct bench_thread *t) {
    struct ring_shape *s = t->shared;
    sy_ring_producer *p = s->producers[t->role];
    int64_t *slots = sy_ring_slots(s->ring);
    sy_ring_info info;
    sy_ring_get_info(s->ring, &info);
    int64_t mask = info.capacity - 1;
    for (int64_t done = 0; done < t->items;) {
        int64_t n = t->items - done < t->batch ? t->items - done : t->batch;
        int64_t hi;
        if ((t->status = sy_ring_claim(p, n, -1, &hi)) != SY_OK) return;
        for (int64_t s = hi - n + 1, v = done + 1; s <= hi; s++, v++) slots[s & mask] = v;
        sy_ring_publish(p, hi - n + 1, hi);
        done += n;
    }
}

static void ring_consumer_body(struct bench_thread *t) {
    struct ring_shape *s = t->shared;
    sy_ring_consumer *c = s->consumers[t->role];
    const int64_t *slots = sy_ring_slots(s->ring);
    sy_ring_info info;
    sy_ring_get_info(s->ring, &info);
    int64_t mask = info.capacity - 1;
    int64_t next = sy_ring_consumer_sequence(c) + 1;
    for (int64_t seen = 0; seen < t->items;) {
        int64_t hi;
        if ((t->status = sy_ring_wait_for(c, -1, &hi)) != SY_OK) return;
        for (int64_t s = next; s <= hi; s++) t->sum += slots[s & mask];
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

/* ---- the mutex + condition-variable bounded queue ------------------------------------------------- */

struct mutex_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    int64_t *items;
    int64_t capacity;
    int64_t head;          /* next to take */
    int64_t count;
};

static int mutex_queue_init(struct mutex_queue *q, int64_t capacity) {
    q->items = malloc((size_t)capacity * sizeof *q->items);
    if (!q->items) return SY_ENOMEM;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->capacity = capacity;
    q->head = q->count = 0;
    return SY_OK;
}

static void mutex_queue_destroy(struct mutex_queue *q) {
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->items);
}

static void mutex_queue_put(struct mutex_queue *q, int64_t v) {
    pthread_mutex_lock(&q->lock);
    while (q->count == q->capacity) pthread_cond_wait(&q->not_full, &q->lock);
    q->items[(q->head + q->count) % q->capacity] = v;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

static int64_t mutex_queue_take(struct mutex_queue *q) {
    pthread_mutex_lock(&q->lock);
    while (q->count == 0) pthread_cond_wait(&q->not_empty, &q->lock);
    int64_t v = q->items[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->lock);
    return v;
}

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

/* ---- ping-pong latency -------------------------------------------------------------------------- */

struct pingpong {
    sy_ring *there, *back;
    sy_ring_producer *send, *reply;
    sy_ring_consumer *receive, *echo;
    int64_t *rtt_ns;
};

static void ping_body(struct bench_thread *t) {
    struct pingpong *pp = t->shared;
    int64_t got;
    for (int64_t i = 0; i < t->items; i++) {
        uint64_t t0 = sy_now_ns();
        if ((t->status = sy_ring_write_one(pp->send, &i, -1)) != SY_OK) return;
        if ((t->status = sy_ring_read_one(pp->echo, &got, -1)) != SY_OK) return;
        pp->rtt_ns[i] = (int64_t)(sy_now_ns() - t0);
        if (got != i) t->status = SY_EINVAL;
    }
}

static void pong_body(struct bench_thread *t) {
    struct pingpong *pp = t->shared;
    int64_t v;
    for (int64_t i = 0; i < t->items; i++) {
        if ((t->status = sy_ring_read_one(pp->receive, &v, -1)) != SY_OK) return;
        if ((t->status = sy_ring_write_one(pp->reply, &v, -1)) != SY_OK) return;
    }
}

int sy_bench_pingpong(int wait, int64_t rounds, const int *cpus, int n_cpus, int64_t *rtt_ns) {
    if (rounds < 1 || !rtt_ns) return SY_EINVAL;
    sy_ring_config config = {.capacity = 64, .slot_size = sizeof(int64_t), .wait = wait,
                             .producer_kind = SY_RING_SINGLE_PRODUCER};
    struct pingpong pp = {.rtt_ns = rtt_ns};
    int status = sy_ring_create(&config, NULL, &pp.there);
    if (status == SY_OK) status = sy_ring_create(&config, NULL, &pp.back);
    if (status == SY_OK) status = sy_ring_consumer_open(pp.there, NULL, 0, &pp.receive);
    if (status == SY_OK) status = sy_ring_consumer_open(pp.back, NULL, 0, &pp.echo);
    if (status == SY_OK) status = sy_ring_producer_open(pp.there, &pp.send);
    if (status == SY_OK) status = sy_ring_producer_open(pp.back, &pp.reply);
    if (status == SY_OK) {
        struct bench_thread threads[2] = {
            {.body = ping_body, .shared = &pp, .items = rounds, .cpu = cpu_for(cpus, n_cpus, 0)},
            {.body = pong_body, .shared = &pp, .items = rounds, .cpu = cpu_for(cpus, n_cpus, 1)},
        };
        double seconds;
        status = run_threads(threads, 2, &seconds);
    }
    if (pp.reply) sy_ring_producer_close(pp.reply);
    if (pp.send) sy_ring_producer_close(pp.send);
    if (pp.echo) sy_ring_consumer_close(pp.echo);
    if (pp.receive) sy_ring_consumer_close(pp.receive);
    if (pp.back) sy_ring_free(pp.back);
    if (pp.there) sy_ring_free(pp.there);
    return status;
}

/* ---- false-sharing ablation --------------------------------------------------------------------------
 * The same single-producer single-consumer algorithm in three layouts. The producer writes
 * `write_idx` and its cached copy of `read_idx`; the consumer writes `read_idx` and its cached copy
 * of `write_idx`. Packed: all four share one 64-byte line, so every write by either side steals the
 * line from the other. Line: the two sides 64 B apart, adjacent lines that the L2 spatial prefetcher
 * still pairs. Block: 128 B apart, fully independent (the layout the real ring uses). */

struct spsc_packed {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t write_idx;
    int64_t read_idx_cache;
    _Atomic int64_t read_idx;
    int64_t write_idx_cache;
};
_Static_assert(offsetof(struct spsc_packed, read_idx) == 16, "packed: both sides in one line");

struct spsc_line {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t write_idx;
    int64_t read_idx_cache;
    _Alignas(SY_CACHE_LINE) _Atomic int64_t read_idx;  /* next line: apart, but prefetch-paired */
    int64_t write_idx_cache;
};
_Static_assert(offsetof(struct spsc_line, read_idx) == SY_CACHE_LINE, "line: sides 64 B apart");

struct spsc_block {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t write_idx;
    int64_t read_idx_cache;
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t read_idx;  /* own 128-byte block */
    int64_t write_idx_cache;
};
_Static_assert(offsetof(struct spsc_block, read_idx) == SY_DESTRUCTIVE_SIZE, "block: sides 128 B apart");

#define SPSC_CAPACITY 1024

struct spsc_bench {
    void *indices;         /* one of the three layouts */
    int64_t *slots;
};

/* One producer and one consumer body per layout, generated: the algorithm is identical, only the
 * field offsets differ, which is the point of the ablation. */
#define DEFINE_SPSC_BODIES(layout)                                                                   \
    static void layout##_produce(struct bench_thread *t) {                                           \
        struct spsc_bench *b = t->shared;                                                            \
        struct layout *q = b->indices;                                                               \
        for (int64_t v = 1; v <= t->items; v++) {                                                    \
            int64_t w = atomic_load_explicit(&q->write_idx, memory_order_relaxed); /* ours */        \
            while (w - q->read_idx_cache == SPSC_CAPACITY) {                                         \
                q->read_idx_cache = atomic_load_explicit(&q->read_idx, memory_order_acquire);        \
                sy_cpu_relax();                                                                      \
            }                                                                                        \
            b->slots[w & (SPSC_CAPACITY - 1)] = v;                                                   \
            atomic_store_explicit(&q->write_idx, w + 1, memory_order_release);                       \
        }                                                                                            \
    }                                                                                                \
    static void layout##_consume(struct bench_thread *t) {                                           \
        struct spsc_bench *b = t->shared;                                                            \
        struct layout *q = b->indices;                                                               \
        for (int64_t seen = 0; seen < t->items; seen++) {                                            \
            int64_t r = atomic_load_explicit(&q->read_idx, memory_order_relaxed); /* ours */         \
            while (r == q->write_idx_cache) {                                                        \
                q->write_idx_cache = atomic_load_explicit(&q->write_idx, memory_order_acquire);      \
                sy_cpu_relax();                                                                      \
            }                                                                                        \
            t->sum += b->slots[r & (SPSC_CAPACITY - 1)];                                             \
            atomic_store_explicit(&q->read_idx, r + 1, memory_order_release);                        \
        }                                                                                            \
    }

DEFINE_SPSC_BODIES(spsc_packed)
DEFINE_SPSC_BODIES(spsc_line)
DEFINE_SPSC_BODIES(spsc_block)

int sy_bench_false_sharing(int padding, int64_t items, const int *cpus, int n_cpus, sy_bench_result *out) {
    bench_body produce, consume;
    switch (padding) {
    case 0: produce = spsc_packed_produce, consume = spsc_packed_consume; break;
    case SY_CACHE_LINE: produce = spsc_line_produce, consume = spsc_line_consume; break;
    case SY_DESTRUCTIVE_SIZE: produce = spsc_block_produce, consume = spsc_block_consume; break;
    default: return SY_EINVAL;
    }
    if (items < 1) return SY_EINVAL;
    struct spsc_bench b = {
        .indices = aligned_alloc(SY_DESTRUCTIVE_SIZE, 2 * SY_DESTRUCTIVE_SIZE),
        .slots = aligned_alloc(SY_DESTRUCTIVE_SIZE, SPSC_CAPACITY * sizeof(int64_t)),
    };
    int status = b.indices && b.slots ? SY_OK : SY_ENOMEM;
    if (status == SY_OK) {
        memset(b.indices, 0, 2 * SY_DESTRUCTIVE_SIZE);
        struct bench_thread threads[2] = {
            {.body = produce, .shared = &b, .items = items, .cpu = cpu_for(cpus, n_cpus, 0)},
            {.body = consume, .shared = &b, .items = items, .cpu = cpu_for(cpus, n_cpus, 1)},
        };
        status = run_threads(threads, 2, &out->seconds);
        out->items = items;
        out->batches = items;
        out->checksum_ok = threads[1].sum == triangle(items);
    }
    free(b.indices);
    free(b.slots);
    return status;
}
