/* platform.h: the hardware facts every sympathy C module shares.
 *
 * One place for the cache-line size, padding, pinning, the monotonic clock and the spin-wait hint,
 * so each subject file states only what it exploits. Header-only (static inline): each cffi module
 * compiles it into its own extension and no symbol is shared between them.
 */
#ifndef SYMPATHY_PLATFORM_H
#define SYMPATHY_PLATFORM_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET */
#endif

#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* x86-64 and most Arm cores move memory in 64-byte lines. */
#define SY_CACHE_LINE 64
/* Intel's L2 "spatial prefetcher" pulls lines in adjacent pairs, so two hot fields 64 B apart still
 * interfere; 128 B is the distance at which they stop (C++17's hardware_destructive_interference_size
 * on x86 GCC is 64, which is why rigtorp and folly pad to 128 by hand). */
#define SY_DESTRUCTIVE_SIZE 128

#define SY_ALIGNED(n) __attribute__((aligned(n)))
#define SY_LIKELY(x) __builtin_expect(!!(x), 1)
#define SY_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Status codes every module returns; sympathy/_errors.py maps them to Python exceptions. */
enum sy_status {
    SY_OK = 0,
    SY_EINVAL = -1,   /* an argument the Python layer should have rejected */
    SY_ENOMEM = -2,   /* allocation failed */
    SY_ETIMEDOUT = -3,/* a wait with a deadline ran out */
    SY_EOS = -4,      /* an OS call failed: errno holds why */
    SY_EUNSUPPORTED = -5, /* this machine or build cannot do it */
    SY_ECLOSED = -6,  /* the other side is gone or the object was closed */
    SY_ECORRUPT = -8, /* shared state breaks an invariant (scribbled on): refuse rather than misread */
};

/* Monotonic nanoseconds: CLOCK_MONOTONIC never jumps with NTP, so intervals are honest. */
static inline uint64_t sy_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spin-wait hint: x86 PAUSE stops the core from speculating ahead on a spinning load (and the
 * memory-order machine clear when the line finally changes); on an SMT sibling it yields issue
 * slots. Arm's YIELD plays the same role. */
static inline void sy_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* Pin the calling thread to one CPU; cpu < 0 leaves the affinity alone. Returns 0 or an errno. */
static inline int sy_pin_self(int cpu) {
    if (cpu < 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Pin a thread to one CPU (a thread we created); cpu < 0 leaves it alone. Returns 0 or an errno. */
static inline int sy_pin_thread(pthread_t thread, int cpu) {
    if (cpu < 0) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(thread, sizeof set, &set);
}

/* Callgrind client requests: when sympathy runs under `valgrind --tool=callgrind --instr-atstart=no`
 * (sy.cachegrind), the kernel region alone is simulated, not the Python interpreter around it.
 * Outside valgrind each macro is a few no-op instructions. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define SY_MEASURE_BEGIN() do { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; } while (0)
#define SY_MEASURE_END() do { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; } while (0)
#define SY_HAVE_CALLGRIND 1
#endif
#endif
#ifndef SY_HAVE_CALLGRIND
#define SY_MEASURE_BEGIN() do { } while (0)
#define SY_MEASURE_END() do { } while (0)
#define SY_HAVE_CALLGRIND 0
#endif

#endif /* SYMPATHY_PLATFORM_H */
