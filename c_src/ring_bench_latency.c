/* ring_bench_latency.c: the ring's latency in C, each against its anchor in the same run: ping-pong
 * round trips (the ring, two bare atomic flags, the mutex + condvar queue) and one-way latency at a fixed
 * pace (the ring against the mutex queue). Threads and the mutex queue: ring_bench_harness.c.
 *
 * Hardware fact measured: a round trip through the ring is two cache-line handoffs each way at best, the
 * bare flags' floor; a lock handoff that finds its consumer asleep costs a futex wake-up and a reschedule.
 */
#include "ring_bench_internal.h"

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

/* The floor under any handoff: two flags, each alone on its block, each written by one thread and
 * spun on by the other. One round trip is two cache-line handoffs each way (the writer takes the
 * line back, the reader fetches it), exactly what one ring item costs at best. The anchor of the
 * ping-pong rows: the ring's round trip over this one, measured in the same run. */
struct bare_flags {
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t ping;
    _Alignas(SY_DESTRUCTIVE_SIZE) _Atomic int64_t pong;  /* own block: written by the other thread */
    int64_t *rtt_ns;
};

static void bare_ping_body(struct bench_thread *t) {
    struct bare_flags *f = t->shared;
    for (int64_t i = 1; i <= t->items; i++) {
        uint64_t t0 = sy_now_ns();
        atomic_store_explicit(&f->ping, i, memory_order_release);
        while (atomic_load_explicit(&f->pong, memory_order_acquire) != i) sy_cpu_relax();
        f->rtt_ns[i - 1] = (int64_t)(sy_now_ns() - t0);
    }
}

static void bare_pong_body(struct bench_thread *t) {
    struct bare_flags *f = t->shared;
    for (int64_t i = 1; i <= t->items; i++) {
        while (atomic_load_explicit(&f->ping, memory_order_acquire) != i) sy_cpu_relax();
        atomic_store_explicit(&f->pong, i, memory_order_release);
    }
}

int sy_bench_pingpong_flags(int64_t rounds, const int *cpus, int n_cpus, int64_t *rtt_ns) {
    if (rounds < 1 || !rtt_ns) return SY_EINVAL;
    struct bare_flags *f = aligned_alloc(SY_DESTRUCTIVE_SIZE, sizeof *f);
    if (!f) return SY_ENOMEM;
    atomic_init(&f->ping, 0);
    atomic_init(&f->pong, 0);
    f->rtt_ns = rtt_ns;
    struct bench_thread threads[2] = {
        {.body = bare_ping_body, .shared = f, .items = rounds, .cpu = cpu_for(cpus, n_cpus, 0)},
        {.body = bare_pong_body, .shared = f, .items = rounds, .cpu = cpu_for(cpus, n_cpus, 1)},
    };
    double seconds;
    int status = run_threads(threads, 2, &seconds);
    free(f);
    return status;
}

/* ---- latency: the ring and the mutex + condvar queue in the same run ---------------------------------
 * Ping-pong: the round trip of one item there and back (the mutex queue's version of the above).
 * One-way: the producer stamps each item with the monotonic clock when it sends it, at a fixed pace
 * (one item per interval, so the queue stays near empty and we measure latency, not a backlog), and
 * the consumer records arrival - stamp. CLOCK_MONOTONIC is one clock for every core of a machine, so
 * stamps compare across threads. A lock handoff that finds the consumer asleep in the kernel costs a
 * futex wake-up and a reschedule; a ring consumer spinning on a cached sequence sees the line move. */

struct mutex_pingpong {
    struct mutex_queue there, back;
    int64_t *rtt_ns;
};

static void mutex_ping_body(struct bench_thread *t) {
    struct mutex_pingpong *pp = t->shared;
    for (int64_t i = 0; i < t->items; i++) {
        uint64_t t0 = sy_now_ns();
        mutex_queue_put(&pp->there, i);
        int64_t got = mutex_queue_take(&pp->back);
        pp->rtt_ns[i] = (int64_t)(sy_now_ns() - t0);
        if (got != i) t->status = SY_EINVAL;
    }
}

static void mutex_pong_body(struct bench_thread *t) {
    struct mutex_pingpong *pp = t->shared;
    for (int64_t i = 0; i < t->items; i++) mutex_queue_put(&pp->back, mutex_queue_take(&pp->there));
}

int sy_bench_mutex_pingpong(int64_t rounds, const int *cpus, int n_cpus, int64_t *rtt_ns) {
    if (rounds < 1 || !rtt_ns) return SY_EINVAL;
    struct mutex_pingpong pp = {.rtt_ns = rtt_ns};
    int status = mutex_queue_init(&pp.there, 64);
    if (status != SY_OK) return status;
    if ((status = mutex_queue_init(&pp.back, 64)) != SY_OK) {
        mutex_queue_destroy(&pp.there);
        return status;
    }
    struct bench_thread threads[2] = {
        {.body = mutex_ping_body, .shared = &pp, .items = rounds, .cpu = cpu_for(cpus, n_cpus, 0)},
        {.body = mutex_pong_body, .shared = &pp, .items = rounds, .cpu = cpu_for(cpus, n_cpus, 1)},
    };
    double seconds;
    status = run_threads(threads, 2, &seconds);
    mutex_queue_destroy(&pp.back);
    mutex_queue_destroy(&pp.there);
    return status;
}

#define ONEWAY_SLEEP_NS 20000   /* paces at or above this sleep between items instead of spinning */

struct oneway {
    sy_ring_producer *producer;   /* NULL: the mutex queue carries the items */
    sy_ring_consumer *consumer;
    struct mutex_queue queue;
    int64_t interval_ns;
    int64_t *latency_ns;
};

static void oneway_produce(struct bench_thread *t) {
    struct oneway *ow = t->shared;
    uint64_t next = sy_now_ns();
    for (int64_t i = 0; i < t->items; i++) {
        if (ow->interval_ns >= ONEWAY_SLEEP_NS) {
            /* long gaps: sleep, leaving the producer's core to other work (a spinning pacer on a
             * shared machine would push the scheduler to preempt the consumer instead) */
            struct timespec gap = {.tv_sec = 0, .tv_nsec = (long)ow->interval_ns};
            nanosleep(&gap, NULL);
        } else {
            while (sy_now_ns() < next) sy_cpu_relax();   /* the pace: one item per interval */
        }
        int64_t stamp = (int64_t)sy_now_ns();
        if (ow->producer) {
            if ((t->status = sy_ring_write_one(ow->producer, &stamp, -1)) != SY_OK) return;
        } else {
            mutex_queue_put(&ow->queue, stamp);
        }
        next += (uint64_t)ow->interval_ns;
    }
}

static void oneway_consume(struct bench_thread *t) {
    struct oneway *ow = t->shared;
    for (int64_t i = 0; i < t->items; i++) {
        int64_t stamp;
        if (ow->consumer) {
            if ((t->status = sy_ring_read_one(ow->consumer, &stamp, -1)) != SY_OK) return;
        } else {
            stamp = mutex_queue_take(&ow->queue);
        }
        ow->latency_ns[i] = (int64_t)sy_now_ns() - stamp;
    }
}

int sy_bench_oneway(int use_ring, int wait, int64_t items, int64_t interval_ns, const int *cpus, int n_cpus,
                    int64_t *latency_ns) {
    if (items < 1 || interval_ns < 0 || !latency_ns) return SY_EINVAL;
    struct oneway ow = {.interval_ns = interval_ns, .latency_ns = latency_ns};
    sy_ring *ring = NULL;
    int status;
    if (use_ring) {
        sy_ring_config config = {.capacity = 1024, .slot_size = sizeof(int64_t), .wait = wait,
                                 .producer_kind = SY_RING_SINGLE_PRODUCER};
        status = sy_ring_create(&config, NULL, &ring);
        if (status == SY_OK) status = sy_ring_consumer_open(ring, NULL, 0, &ow.consumer);
        if (status == SY_OK) status = sy_ring_producer_open(ring, &ow.producer);
    } else {
        status = mutex_queue_init(&ow.queue, 1024);
    }
    if (status == SY_OK) {
        struct bench_thread threads[2] = {
            {.body = oneway_produce, .shared = &ow, .items = items, .cpu = cpu_for(cpus, n_cpus, 0)},
            {.body = oneway_consume, .shared = &ow, .items = items, .cpu = cpu_for(cpus, n_cpus, 1)},
        };
        double seconds;
        status = run_threads(threads, 2, &seconds);
    }
    if (use_ring) {
        if (ow.producer) sy_ring_producer_close(ow.producer);
        if (ow.consumer) sy_ring_consumer_close(ow.consumer);
        if (ring) sy_ring_free(ring);
    } else if (status != SY_ENOMEM) {
        mutex_queue_destroy(&ow.queue);
    }
    return status;
}

