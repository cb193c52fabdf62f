/* ring_bench_harness.c: the C benchmarks' shared harness (ring_bench_internal.h): threads created and
 * pinned here and released together through one start gate (an acquire spin on one word), so the clock
 * starts with all of them; and the mutex + condition-variable bounded queue the ring is raced against,
 * which moves the lock line, the indices and both condition variables per *item*.
 */
#include "ring_bench_internal.h"

/* The start gate: threads wait for GATE_GO so that all start together and the clock starts with
 * them; GATE_ABORT sends them home when a later thread could not be created. */
enum { GATE_WAIT = 0, GATE_GO = 1, GATE_ABORT = -1 };

static void *bench_trampoline(void *arg) {
    struct bench_thread *t = arg;
    sy_pin_self(t->cpu);
    int gate;
    while ((gate = atomic_load_explicit(t->gate, memory_order_acquire)) == GATE_WAIT) sched_yield();
    if (gate == GATE_GO) t->body(t);
    return NULL;
}

/* Start the threads, release them together, time until the last one is done. */
int run_threads(struct bench_thread *threads, int n, double *seconds) {
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

int cpu_for(const int *cpus, int n_cpus, int i) { return cpus && n_cpus > 0 ? cpus[i % n_cpus] : -1; }

/* ---- the mutex + condition-variable bounded queue ------------------------------------------------- */

int mutex_queue_init(struct mutex_queue *q, int64_t capacity) {
    q->items = malloc((size_t)capacity * sizeof *q->items);
    if (!q->items) return SY_ENOMEM;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->capacity = capacity;
    q->head = q->count = 0;
    return SY_OK;
}

void mutex_queue_destroy(struct mutex_queue *q) {
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    free(q->items);
}
