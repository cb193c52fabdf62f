/* lab.c: the cache-line lab. Small kernels, each showing one hardware fact, each timed in C.
 *
 *   false sharing      the coherence protocol moves whole lines, not variables
 *   counter kinds      a lock-prefixed RMW or a StoreLoad fence drains the store buffer (tens of
 *                      cycles); volatile is a load and a store per increment; a register, one add
 *   visibility         without an atomic (or volatile) load the compiler may read a flag only once
 *   pointer chase      a dependent load costs the latency of the level the working set fits in
 *   STREAM             bandwidth is a property of the memory system, shared by the cores
 *   strides            memory moves in lines: touching one int per line moves as much as all 16
 *
 * Threads come from one helper (run_team) that pins each worker, then releases all of them at once,
 * so every figure is measured from a common start.
 */
#include "lab.h"

#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* ================================================================================================
 * A team of pinned threads released together
 * ================================================================================================ */
enum team_signal { TEAM_WAIT = 0, TEAM_GO = 1, TEAM_ABORT = 2 };

struct team {
    int threads;
    bool oversubscribed;    /* more threads than CPUs: waiting must yield, not spin */
    _Atomic int ready;      /* workers pinned and at the start line */
    _Atomic int signal;     /* enum team_signal, set once by the last worker to arrive */
    _Atomic int pin_errno;  /* the first pinning failure, 0 when every pin took */
    uint64_t start_ns;      /* written before the GO release, read after the join */
    void (*work)(void *job, int index);
    void *job;
};

/* Each worker on its own line pair: a worker writes end_ns while its neighbours may still be
 * measuring, and a false-sharing lab's harness must not share lines itself. */
struct SY_ALIGNED(SY_DESTRUCTIVE_SIZE) worker {
    struct team *team;
    int index;
    int cpu;                /* < 0: unpinned */
    uint64_t end_ns;        /* when this worker's share of the work was done */
};
_Static_assert(sizeof(struct worker) == SY_DESTRUCTIVE_SIZE, "one worker per line pair");

static void wait_a_moment(const struct team *t) {
    if (t->oversubscribed)
        sched_yield();
    else
        sy_cpu_relax();
}

/* The last worker to arrive starts the clock and releases everyone, so no thread that has to be
 * scheduled first (a leader) stands between "all ready" and "go". */
static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct team *t = w->team;
    int err = sy_pin_self(w->cpu);
    if (err) {
        int none = 0;
        atomic_compare_exchange_strong_explicit(&t->pin_errno, &none, err, memory_order_relaxed,
                                                memory_order_relaxed);
    }
    /* acq_rel: the last arriver acquires every earlier arriver's pin_errno. */
    int arrived = atomic_fetch_add_explicit(&t->ready, 1, memory_order_acq_rel) + 1;
    int signal;
    if (arrived == t->threads) {
        signal = atomic_load_explicit(&t->pin_errno, memory_order_relaxed) ? TEAM_ABORT : TEAM_GO;
        t->start_ns = sy_now_ns();
        atomic_store_explicit(&t->signal, signal, memory_order_release);
    } else {
        while ((signal = atomic_load_explicit(&t->signal, memory_order_acquire)) == TEAM_WAIT)
            wait_a_moment(t);
    }
    if (signal == TEAM_GO)
        t->work(t->job, w->index);
    w->end_ns = sy_now_ns();
    return NULL;
}

static int usable_cpus(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

/* Run work(job, i) on `threads` threads (thread i pinned to cpus[i] when cpus is given) from one
 * common start; elapsed_ns runs from the start to the last worker's end, finished_ns[i] (when not
 * NULL) from the start to worker i's end. */
static int run_team(int threads, const int *cpus, void (*work)(void *, int), void *job,
                    uint64_t *elapsed_ns, uint64_t *finished_ns) {
    struct team team = {.threads = threads, .oversubscribed = threads > usable_cpus(), .work = work,
                        .job = job};
    atomic_init(&team.ready, 0);
    atomic_init(&team.signal, TEAM_WAIT);
    atomic_init(&team.pin_errno, 0);
    pthread_t ids[SY_LAB_MAX_THREADS];
    struct worker workers[SY_LAB_MAX_THREADS];
    int started = 0, create_errno = 0;
    for (; started < threads; started++) {
        workers[started] = (struct worker){&team, started, cpus ? cpus[started] : -1, 0};
        create_errno = pthread_create(&ids[started], NULL, worker_main, &workers[started]);
        if (create_errno)
            break;
    }
    if (create_errno) /* the team can never fill up: release the ones that are waiting */
        atomic_store_explicit(&team.signal, TEAM_ABORT, memory_order_release);
    uint64_t end_ns = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(ids[i], NULL); /* join orders each worker's end_ns (and start_ns) before us */
        end_ns = workers[i].end_ns > end_ns ? workers[i].end_ns : end_ns;
    }
    int failure = create_errno ? create_errno : atomic_load_explicit(&team.pin_errno, memory_order_relaxed);
    if (failure) {
        errno = failure;
        return SY_EOS;
    }
    *elapsed_ns = end_ns - team.start_ns;
    for (int i = 0; finished_ns && i < threads; i++)
        finished_ns[i] = workers[i].end_ns - team.start_ns;
    return SY_OK;
}

static bool valid_team(int threads) {
    return threads >= 1 && threads <= SY_LAB_MAX_THREADS;
}

/* ================================================================================================
 * False sharing
 * ================================================================================================ */
struct false_sharing_job {
    unsigned char *block;   /* SY_DESTRUCTIVE_SIZE-aligned: spacing 8 really is "one line" */
    size_t spacing;
    uint64_t iterations;
    uint64_t *on_cpu_ns;    /* per thread: CPU time spent in the loop (NULL: not asked for) */
};

/* CPU time of the calling thread: unlike the wall clock it stops while the thread is preempted,
 * so comparing the two tells whether the threads really ran at the same time. */
static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void record_on_cpu(const struct false_sharing_job *job, int index, uint64_t since) {
    if (job->on_cpu_ns)
        job->on_cpu_ns[index] = thread_cpu_ns() - since;
}

static _Atomic uint64_t *counter_of(const struct false_sharing_job *job, int index) {
    return (_Atomic uint64_t *)(job->block + (size_t)index * job->spacing);
}

/* SY_LAB_INCREMENT_STORE. Each counter has one writer, so a relaxed load plus a relaxed store is an
 * exact increment. Atomics rather than a plain variable: they force a store to memory on every
 * iteration (a plain counter would stay in a register and share nothing); rather than volatile:
 * they are defined while other threads touch the same line. The store buffer hides most of the
 * sharing: the reload is forwarded from it, stores queue while the line is away and drain in a
 * burst when it comes back (measured: ~1.1x, against ~7x for the locked RMW below). */
static void store_own_counter(void *arg, int index) {
    const struct false_sharing_job *job = arg;
    _Atomic uint64_t *counter = counter_of(job, index);
    uint64_t since = thread_cpu_ns();
    for (uint64_t i = 0; i < job->iterations; i++) {
        uint64_t value = atomic_load_explicit(counter, memory_order_relaxed);
        atomic_store_explicit(counter, value + 1, memory_order_relaxed);
    }
    record_on_cpu(job, index, since);
}

/* SY_LAB_INCREMENT_RMW. fetch_add is a locked RMW on x86: the core must own the line for the whole
 * operation, so every increment on a shared line waits for the line to come back (no store buffer
 * to hide behind). This is the counter an array of per-thread atomic statistics would use. */
static void fetch_add_own_counter(void *arg, int index) {
    const struct false_sharing_job *job = arg;
    _Atomic uint64_t *counter = counter_of(job, index);
    uint64_t since = thread_cpu_ns();
    for (uint64_t i = 0; i < job->iterations; i++)
        atomic_fetch_add_explicit(counter, 1, memory_order_relaxed);
    record_on_cpu(job, index, since);
}

int sy_lab_false_sharing(int threads, size_t spacing, int increment, uint64_t iterations, const int *cpus,
                         uint64_t *counts, uint64_t *on_cpu_ns, uint64_t *finished_ns, uint64_t *elapsed_ns) {
    if (!valid_team(threads) || spacing < sizeof(uint64_t) || spacing % sizeof(uint64_t) != 0 ||
        spacing > (1u << 20) || iterations == 0 || !counts || !elapsed_ns ||
        (increment != SY_LAB_INCREMENT_STORE && increment != SY_LAB_INCREMENT_RMW))
        return SY_EINVAL;
    size_t bytes = (size_t)threads * spacing;
    bytes = (bytes + SY_DESTRUCTIVE_SIZE - 1) / SY_DESTRUCTIVE_SIZE * SY_DESTRUCTIVE_SIZE;
    struct false_sharing_job job = {aligned_alloc(SY_DESTRUCTIVE_SIZE, bytes), spacing, iterations, on_cpu_ns};
    if (!job.block)
        return SY_ENOMEM;
    for (int i = 0; i < threads; i++)
        atomic_init(counter_of(&job, i), 0);
    int status = run_team(threads, cpus,
                          increment == SY_LAB_INCREMENT_RMW ? fetch_add_own_counter : store_own_counter, &job,
                          elapsed_ns, finished_ns);
    for (int i = 0; i < threads; i++)
        counts[i] = atomic_load_explicit(counter_of(&job, i), memory_order_relaxed);
    free(job.block);
    return status;
}

/* ================================================================================================
 * The counter loop, six ways (the article's "volatile" example)
 * ================================================================================================ */
/* Use when: nothing else needs to see the count until the end. One add per iteration. */
static uint64_t count_in_register(uint64_t iterations) {
    uint64_t counter = 0;
    for (uint64_t i = 0; i < iterations; i++) {
        counter++;
        /* An empty asm that reads and writes counter: the compiler must do each add (no closed
         * form `counter = iterations`) yet may keep counter in a register, which is the point. */
        __asm__ volatile("" : "+r"(counter));
    }
    return counter;
}

/* Use when: memory-mapped I/O or a signal handler. A load and a store per iteration, chained
 * through store-to-load forwarding (~4-5 cycles; recent Intel and AMD cores can "rename" a reload
 * of a just-stored stack slot and come close to the register loop); no ordering, no atomicity. */
static uint64_t count_volatile(uint64_t iterations) {
    volatile uint64_t counter = 0;
    for (uint64_t i = 0; i < iterations; i++)
        counter++;
    return counter;
}

/* Use when: several writers, no ordering needed (statistics). On x86 every atomic RMW is
 * lock-prefixed whatever the order asked for, so this costs what seq_cst costs there. */
static uint64_t count_atomic_relaxed(uint64_t iterations) {
    _Atomic uint64_t counter;
    atomic_init(&counter, 0);
    for (uint64_t i = 0; i < iterations; i++)
        atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
    return atomic_load_explicit(&counter, memory_order_relaxed);
}

/* Use when: several writers and the increment must order other memory too. lock xadd: a full
 * fence that drains the store buffer every iteration. */
static uint64_t count_atomic_seq_cst(uint64_t iterations) {
    _Atomic uint64_t counter;
    atomic_init(&counter, 0);
    for (uint64_t i = 0; i < iterations; i++)
        atomic_fetch_add_explicit(&counter, 1, memory_order_seq_cst);
    return atomic_load_explicit(&counter, memory_order_seq_cst);
}

/* Use when: one writer publishes a sequence (the Disruptor's cursor). x86 stores already have
 * release semantics (TSO), so this is the volatile loop's plain mov, with a defined meaning. */
static uint64_t count_store_release(uint64_t iterations) {
    _Atomic uint64_t counter;
    atomic_init(&counter, 0);
    for (uint64_t i = 0; i < iterations; i++) {
        uint64_t value = atomic_load_explicit(&counter, memory_order_relaxed);
        atomic_store_explicit(&counter, value + 1, memory_order_release);
    }
    return atomic_load_explicit(&counter, memory_order_acquire);
}

/* Use when: a single writer still needs StoreLoad order (Java's volatile write, Dekker). The
 * seq_cst store is mov + mfence or xchg: the store buffer drains on every iteration. */
static uint64_t count_store_seq_cst(uint64_t iterations) {
    _Atomic uint64_t counter;
    atomic_init(&counter, 0);
    for (uint64_t i = 0; i < iterations; i++) {
        uint64_t value = atomic_load_explicit(&counter, memory_order_relaxed);
        atomic_store_explicit(&counter, value + 1, memory_order_seq_cst);
    }
    return atomic_load_explicit(&counter, memory_order_seq_cst);
}

int sy_lab_counter(int kind, uint64_t iterations, uint64_t *final_value, uint64_t *elapsed_ns) {
    static uint64_t (*const count[SY_LAB_COUNTER_KINDS])(uint64_t) = {
        [SY_LAB_COUNTER_REGISTER] = count_in_register,
        [SY_LAB_COUNTER_VOLATILE] = count_volatile,
        [SY_LAB_COUNTER_ATOMIC_RELAXED] = count_atomic_relaxed,
        [SY_LAB_COUNTER_ATOMIC_SEQ_CST] = count_atomic_seq_cst,
        [SY_LAB_COUNTER_STORE_RELEASE] = count_store_release,
        [SY_LAB_COUNTER_STORE_SEQ_CST] = count_store_seq_cst,
    };
    if (kind < 0 || kind >= SY_LAB_COUNTER_KINDS || iterations == 0 || !final_value || !elapsed_ns)
        return SY_EINVAL;
    uint64_t start = sy_now_ns();
    *final_value = count[kind](iterations);
    *elapsed_ns = sy_now_ns() - start;
    return SY_OK;
}

/* ================================================================================================
 * Visibility: a reader spinning on a flag
 * ================================================================================================ */
struct visibility_job {
    int reader;                     /* enum sy_lab_reader: which flag the writer sets */
    uint64_t delay_ns;
    int plain_flag;                 /* the broken pair: plain store, plain load */
    _Atomic int atomic_flag;        /* the correct pair: store-release, load-acquire */
    _Atomic uint64_t stored_at_ns;
};

static void sleep_ns(uint64_t ns) {
    struct timespec left = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

static void *delayed_writer(void *arg) {
    struct visibility_job *job = arg;
    sleep_ns(job->delay_ns);
    atomic_store_explicit(&job->stored_at_ns, sy_now_ns(), memory_order_relaxed);
    if (job->reader == SY_LAB_READER_PLAIN)
        job->plain_flag = 1; /* a data race on purpose: the other half of the broken pair */
    else
        atomic_store_explicit(&job->atomic_flag, 1, memory_order_release);
    return NULL;
}

/* Undefined behaviour on purpose (a data race): nothing tells the compiler another thread writes
 * *flag, so it may load it once and, if it was 0, spin forever on the register copy — GCC -O2
 * and up emit `test; je` into a `jmp` to itself. noinline: the loop that runs is the one shown. */
__attribute__((noinline)) void sy_lab_spin_plain(const int *flag) {
    while (!*flag) {
    }
}

/* The correct reader: an acquire load is re-executed every iteration and, once it sees 1, also
 * sees everything the writer did before its release store. The clock is read only every 4096
 * spins so the deadline costs next to nothing. */
__attribute__((noinline)) int sy_lab_spin_acquire(_Atomic int *flag, uint64_t deadline_ns) {
    for (uint32_t spins = 1; !atomic_load_explicit(flag, memory_order_acquire); spins++) {
        sy_cpu_relax();
        if (spins % 4096 == 0 && sy_now_ns() > deadline_ns)
            return SY_ETIMEDOUT;
    }
    return SY_OK;
}

int sy_lab_visibility(int reader, uint64_t delay_ns, uint64_t timeout_ns, int64_t *store_to_seen_ns) {
    if ((reader != SY_LAB_READER_PLAIN && reader != SY_LAB_READER_ACQUIRE) || !store_to_seen_ns)
        return SY_EINVAL;
    struct visibility_job job = {.reader = reader, .delay_ns = delay_ns, .plain_flag = 0};
    atomic_init(&job.atomic_flag, 0);
    atomic_init(&job.stored_at_ns, 0);
    pthread_t writer;
    int err = pthread_create(&writer, NULL, delayed_writer, &job);
    if (err) {
        errno = err;
        return SY_EOS;
    }
    int status = SY_OK;
    if (reader == SY_LAB_READER_PLAIN)
        sy_lab_spin_plain(&job.plain_flag);
    else
        status = sy_lab_spin_acquire(&job.atomic_flag, sy_now_ns() + delay_ns + timeout_ns);
    uint64_t seen = sy_now_ns();
    pthread_join(writer, NULL); /* join orders stored_at_ns before our read of it */
    *store_to_seen_ns = (int64_t)(seen - atomic_load_explicit(&job.stored_at_ns, memory_order_relaxed));
    return status;
}

/* ================================================================================================
 * Latency against working-set size: the pointer chase (lmbench lat_mem_rd, Drepper §3.3)
 * ================================================================================================ */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, bound) by multiply-shift (Lemire); the bias, bound / 2^64, is far below anything
 * a latency curve can show. */
static size_t random_below(uint64_t *state, size_t bound) {
    return (size_t)(((unsigned __int128)splitmix64(state) * bound) >> 64);
}

static uintptr_t *link_of(unsigned char *base, size_t node_bytes, size_t node) {
    return (uintptr_t *)(base + node * node_bytes);
}

/* Sattolo's shuffle of the identity gives a uniformly random *cyclic* permutation: following
 * next[i] from any node visits every node once before coming back, so no node is left out and the
 * walk never settles into a short cycle that fits in a smaller cache. */
static void link_random_cycle(unsigned char *base, size_t nodes, size_t node_bytes, uint64_t seed) {
    for (size_t i = 0; i < nodes; i++)
        *link_of(base, node_bytes, i) = i;
    uint64_t state = seed;
    for (size_t i = nodes - 1; i > 0; i--) {
        size_t j = random_below(&state, i); /* j < i, never i itself: that is what makes one cycle */
        uintptr_t swap = *link_of(base, node_bytes, i);
        *link_of(base, node_bytes, i) = *link_of(base, node_bytes, j);
        *link_of(base, node_bytes, j) = swap;
    }
}

static void link_sequential(unsigned char *base, size_t nodes, size_t node_bytes) {
    for (size_t i = 0; i < nodes; i++)
        *link_of(base, node_bytes, i) = (i + 1) % nodes;
}

int sy_lab_chase_build(void *buffer, size_t nodes, size_t node_bytes, int pattern, uint64_t seed) {
    if (!buffer || nodes == 0 || node_bytes < sizeof(uintptr_t) || node_bytes % sizeof(uintptr_t) != 0 ||
        (uintptr_t)buffer % alignof(uintptr_t) != 0 || nodes > SIZE_MAX / node_bytes ||
        (pattern != SY_LAB_CHASE_RANDOM && pattern != SY_LAB_CHASE_SEQUENTIAL))
        return SY_EINVAL;
    unsigned char *base = buffer;
    if (pattern == SY_LAB_CHASE_RANDOM)
        link_random_cycle(base, nodes, node_bytes, seed);
    else
        link_sequential(base, nodes, node_bytes);
    /* Indices become addresses, so the walk is one load per step with nothing to compute. */
    for (size_t i = 0; i < nodes; i++) {
        uintptr_t *link = link_of(base, node_bytes, i);
        *link = (uintptr_t)link_of(base, node_bytes, *link);
    }
    return SY_OK;
}

/* Each load's address is the previous load's value: the core cannot overlap them, so time per
 * step is the latency of wherever the line lives. */
int sy_lab_chase_walk(const void *buffer, uint64_t loads, uint64_t *elapsed_ns, size_t *end_offset) {
    if (!buffer || loads == 0 || !elapsed_ns || !end_offset)
        return SY_EINVAL;
    const uintptr_t *node = buffer;
    uint64_t start = sy_now_ns();
    for (uint64_t i = 0; i < loads; i++)
        node = (const uintptr_t *)*node;
    *elapsed_ns = sy_now_ns() - start;
    *end_offset = (size_t)((const unsigned char *)node - (const unsigned char *)buffer);
    return SY_OK;
}

size_t sy_lab_chase_cycle_length(const void *buffer, size_t nodes, size_t node_bytes) {
    if (!buffer || nodes == 0 || node_bytes == 0 || nodes > SIZE_MAX / node_bytes)
        return 0;
    const uintptr_t first = (uintptr_t)buffer, end = first + nodes * node_bytes;
    uintptr_t node = first;
    for (size_t steps = 1; steps <= nodes; steps++) {
        node = *(const uintptr_t *)node;
        if (node < first || node >= end || (node - first) % node_bytes != 0)
            return 0;
        if (node == first)
            return steps;
    }
    return 0;
}

/* ================================================================================================
 * Bandwidth: STREAM (McCalpin), the four kernels and their byte counts
 * ================================================================================================ */
struct stream_job {
    int kernel;
    double *a, *b, *c;
    size_t n;
    double scalar;
    int threads;
};

static void stream_copy(double *restrict c, const double *restrict a, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        c[i] = a[i];
}

static void stream_scale(double *restrict b, const double *restrict c, double q, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        b[i] = q * c[i];
}

static void stream_add(double *restrict c, const double *restrict a, const double *restrict b, size_t lo,
                       size_t hi) {
    for (size_t i = lo; i < hi; i++)
        c[i] = a[i] + b[i];
}

static void stream_triad(double *restrict a, const double *restrict b, const double *restrict c, double q,
                         size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        a[i] = b[i] + q * c[i];
}

/* Contiguous chunks, rounded to whole lines so no two threads write the same line at a seam. */
static void stream_chunk(void *arg, int index) {
    const struct stream_job *job = arg;
    const size_t per_line = SY_CACHE_LINE / sizeof(double);
    size_t chunk = (job->n + (size_t)job->threads - 1) / (size_t)job->threads;
    chunk = (chunk + per_line - 1) / per_line * per_line;
    size_t lo = (size_t)index * chunk < job->n ? (size_t)index * chunk : job->n;
    size_t hi = job->n - lo > chunk ? lo + chunk : job->n;
    switch (job->kernel) {
    case SY_LAB_STREAM_COPY: stream_copy(job->c, job->a, lo, hi); break;
    case SY_LAB_STREAM_SCALE: stream_scale(job->b, job->c, job->scalar, lo, hi); break;
    case SY_LAB_STREAM_ADD: stream_add(job->c, job->a, job->b, lo, hi); break;
    case SY_LAB_STREAM_TRIAD: stream_triad(job->a, job->b, job->c, job->scalar, lo, hi); break;
    }
}

static bool overlaps(const double *x, const double *y, size_t n) {
    return x < y + n && y < x + n;
}

int sy_lab_stream(int kernel, double *a, double *b, double *c, size_t n, double scalar, int threads,
                  const int *cpus, uint64_t *elapsed_ns) {
    if (kernel < 0 || kernel >= SY_LAB_STREAM_KERNELS || !a || !b || !c || n == 0 || !valid_team(threads) ||
        !elapsed_ns || overlaps(a, b, n) || overlaps(a, c, n) || overlaps(b, c, n))
        return SY_EINVAL;
    struct stream_job job = {kernel, a, b, c, n, scalar, threads};
    return run_team(threads, cpus, stream_chunk, &job, elapsed_ns, NULL);
}

/* ================================================================================================
 * Cache lines and strides
 * ================================================================================================ */
/* One scalar loop for every stride: GCC would otherwise version the loop for stride == 1 and
 * vectorise that copy, and the experiment would compare two different loops instead of two
 * amounts of memory traffic. */
#if defined(__clang__)
#define SY_LAB_SCALAR_LOOP _Pragma("clang loop vectorize(disable) interleave(disable)")
#define SY_LAB_NO_VECTORIZE
#elif defined(__GNUC__)
#define SY_LAB_SCALAR_LOOP
#define SY_LAB_NO_VECTORIZE __attribute__((optimize("no-tree-vectorize")))
#else
#define SY_LAB_SCALAR_LOOP
#define SY_LAB_NO_VECTORIZE
#endif

/* Memory moves in 64-byte lines: up to a stride of 16 uint32 every line is fetched anyway, so the
 * traffic stays put while the work shrinks; past one line each doubling halves the lines fetched.
 * (Where one core's loop costs as much per line as the memory does, the time still falls a little
 * below stride 16: that part is instructions, not traffic.) */
SY_LAB_NO_VECTORIZE int sy_lab_touch_stride(uint32_t *array, size_t n, size_t stride, uint64_t *elapsed_ns) {
    if (!array || n == 0 || stride == 0 || !elapsed_ns)
        return SY_EINVAL;
    uint64_t start = sy_now_ns();
    SY_LAB_SCALAR_LOOP
    for (size_t i = 0; i < n; i += stride)
        array[i] += 1;
    *elapsed_ns = sy_now_ns() - start;
    return SY_OK;
}
