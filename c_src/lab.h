/* lab.h: the cache-line lab — false sharing, the price of memory ordering, visibility, latency
 * against working-set size, memory bandwidth (STREAM) and strides.
 *
 * Every entry point validates its arguments (SY_EINVAL), times its own kernel with sy_now_ns() so
 * no Python glue sits inside a measurement, and returns an sy_status code.
 */
#ifndef SYMPATHY_LAB_H
#define SYMPATHY_LAB_H

#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* CDEF BEGIN */
enum sy_lab_limits {
    SY_LAB_MAX_THREADS = 256,    /* a team is a stack array of this many workers */
};

/* ---- false sharing ---------------------------------------------------------------------------- */
enum sy_lab_increment {
    SY_LAB_INCREMENT_STORE = 0,  /* relaxed load + relaxed store (one writer per counter) */
    SY_LAB_INCREMENT_RMW = 1,    /* relaxed fetch_add: a locked RMW on x86 */
};
/* `threads` threads each add 1 to their own 8-byte counter `iterations` times, the way `increment`
 * says; counter i lives at byte i * spacing of one 128-byte-aligned block (spacing 8: neighbours in
 * one line; 64: adjacent lines; 128: adjacent line pairs). cpus[i] pins thread i (NULL: unpinned).
 * counts[i] receives counter i's final value; when not NULL, on_cpu_ns[i] thread i's CPU time in
 * its loop and finished_ns[i] the wall time from the common start to thread i's end; elapsed_ns
 * the wall time from the common start to the last thread's end. */
int sy_lab_false_sharing(int threads, size_t spacing, int increment, uint64_t iterations, const int *cpus,
                         uint64_t *counts, uint64_t *on_cpu_ns, uint64_t *finished_ns, uint64_t *elapsed_ns);

/* ---- the counter loop: what each kind of "volatile" costs ---------------------------------------- */
enum sy_lab_counter_kind {
    SY_LAB_COUNTER_REGISTER = 0,       /* plain local: lives in a register */
    SY_LAB_COUNTER_VOLATILE = 1,       /* C volatile: a load and a store every time, no fence */
    SY_LAB_COUNTER_ATOMIC_RELAXED = 2, /* fetch_add relaxed: still a locked RMW on x86 */
    SY_LAB_COUNTER_ATOMIC_SEQ_CST = 3, /* fetch_add seq_cst: lock xadd, a full fence */
    SY_LAB_COUNTER_STORE_RELEASE = 4,  /* load + store-release: a plain mov on x86 (TSO) */
    SY_LAB_COUNTER_STORE_SEQ_CST = 5,  /* load + store seq_cst: Java's volatile write (xchg/mfence) */
    SY_LAB_COUNTER_KINDS = 6,
};
/* Increment one counter `iterations` times the way `kind` says; final_value is what it reached. */
int sy_lab_counter(int kind, uint64_t iterations, uint64_t *final_value, uint64_t *elapsed_ns);

/* ---- visibility: does a spinning reader ever see the writer's store? ------------------------------ */
enum sy_lab_reader {
    SY_LAB_READER_PLAIN = 0,    /* spins on a plain int: the compiler may hoist the load (never returns) */
    SY_LAB_READER_ACQUIRE = 1,  /* spins with an atomic acquire load: sees the store */
};
/* A writer thread sleeps delay_ns, then sets the flag; the calling thread spins until it sees it.
 * store_to_seen_ns: from the writer's store to the reader's exit (negative: the reader left before
 * the store, i.e. the compiler deleted the loop). The acquire reader gives up after timeout_ns
 * (SY_ETIMEDOUT); the plain one cannot look at a clock without defeating the demonstration, so run
 * it in a child process that can be killed. */
int sy_lab_visibility(int reader, uint64_t delay_ns, uint64_t timeout_ns, int64_t *store_to_seen_ns);

/* ---- latency against working-set size: the pointer chase ---------------------------------------- */
enum sy_lab_chase_pattern {
    SY_LAB_CHASE_RANDOM = 0,      /* one random cycle through every node (Sattolo): defeats prefetchers */
    SY_LAB_CHASE_SEQUENTIAL = 1,  /* node i -> i + 1: the prefetcher sees the stream */
};
/* Link `nodes` nodes of node_bytes each (the first 8 bytes of a node point at the next) in buffer
 * into one cycle through all of them. buffer must hold nodes * node_bytes bytes, 8-byte aligned. */
int sy_lab_chase_build(void *buffer, size_t nodes, size_t node_bytes, int pattern, uint64_t seed);
/* Follow the links `loads` times from buffer's first node; end_offset is where the walk stopped
 * (byte offset from buffer), which also keeps the walk from being optimised away. */
int sy_lab_chase_walk(const void *buffer, uint64_t loads, uint64_t *elapsed_ns, size_t *end_offset);
/* Steps from the first node back to it (nodes for a full cycle); 0 when a link leaves the buffer or
 * the walk does not come back within `nodes` steps. */
size_t sy_lab_chase_cycle_length(const void *buffer, size_t nodes, size_t node_bytes);

/* ---- bandwidth: STREAM ------------------------------------------------------------------------ */
enum sy_lab_stream_kernel {
    SY_LAB_STREAM_COPY = 0,   /* c = a           16 bytes per element */
    SY_LAB_STREAM_SCALE = 1,  /* b = q * c       16 */
    SY_LAB_STREAM_ADD = 2,    /* c = a + b       24 */
    SY_LAB_STREAM_TRIAD = 3,  /* a = b + q * c   24 */
    SY_LAB_STREAM_KERNELS = 4,
};
/* One pass of `kernel` over n doubles, split in contiguous chunks over `threads` threads (cpus as
 * in sy_lab_false_sharing). The arrays must not overlap. */
int sy_lab_stream(int kernel, double *a, double *b, double *c, size_t n, double scalar, int threads,
                  const int *cpus, uint64_t *elapsed_ns);

/* ---- cache lines and strides ---------------------------------------------------------------- */
/* array[i] += 1 for i = 0, stride, 2 * stride, ... < n: one pass, timed. */
int sy_lab_touch_stride(uint32_t *array, size_t n, size_t stride, uint64_t *elapsed_ns);
/* CDEF END */

/* The two spin loops, exported (not static) so they are never cloned or inlined away and
 * `objdump --disassemble=sy_lab_spin_plain` shows exactly the loop that ran. */
void sy_lab_spin_plain(const int *flag);
int sy_lab_spin_acquire(_Atomic int *flag, uint64_t deadline_ns);

#endif /* SYMPATHY_LAB_H */
