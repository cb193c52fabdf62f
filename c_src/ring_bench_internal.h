/* ring_bench_internal.h: what the C benchmarks of the ring (ring_bench.c: throughput shapes and false
 * sharing; ring_bench_latency.c: ping-pong and one-way latency) share, defined in ring_bench_harness.c:
 * pinned threads released together through one start gate, and the mutex + condition-variable bounded
 * queue every benchmark races the ring against. Internal: not exported from the extension.
 */
#ifndef SY_RING_BENCH_INTERNAL_H
#define SY_RING_BENCH_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ring.h"

#define SY_BENCH_INTERNAL __attribute__((visibility("hidden")))

/* ---- thread plumbing shared by every shape ----------------------------------------------------- */

#define MAX_BENCH_THREADS 8

struct bench_thread;
typedef void (*bench_body)(struct bench_thread *t);

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

/* Start the threads, release them together, time until the last one is done (ring_bench_harness.c). */
SY_BENCH_INTERNAL int run_threads(struct bench_thread *threads, int n, double *seconds);
/* cpus[i % n_cpus], or -1 (not pinned) without a list. */
SY_BENCH_INTERNAL int cpu_for(const int *cpus, int n_cpus, int i);

/* The mutex + condition-variable bounded queue (Java's ArrayBlockingQueue of our world). */
struct mutex_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty;
    pthread_cond_t not_full;
    int64_t *items;
    int64_t capacity;
    int64_t head;          /* next to take */
    int64_t count;
};

SY_BENCH_INTERNAL int mutex_queue_init(struct mutex_queue *q, int64_t capacity);
SY_BENCH_INTERNAL void mutex_queue_destroy(struct mutex_queue *q);

/* Put and take run on the timed path: inline here, as they were while the benchmarks were one file. */
static inline void mutex_queue_put(struct mutex_queue *q, int64_t v) {
    pthread_mutex_lock(&q->lock);
    while (q->count == q->capacity) pthread_cond_wait(&q->not_full, &q->lock);
    q->items[(q->head + q->count) % q->capacity] = v;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

static inline int64_t mutex_queue_take(struct mutex_queue *q) {
    pthread_mutex_lock(&q->lock);
    while (q->count == 0) pthread_cond_wait(&q->not_empty, &q->lock);
    int64_t v = q->items[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->count--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->lock);
    return v;
}

#endif  /* SY_RING_BENCH_INTERNAL_H */
