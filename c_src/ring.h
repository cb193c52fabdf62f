/* ring.h: a Disruptor-style lock-free ring buffer (c_src/ring_*.c, one file per concept) and its C-level benchmarks
 * (c_src/ring_bench.c).
 *
 * One ring is one memory region: a header of 128-byte blocks (sequences, registries, liveness
 * records), then `capacity` fixed-size slots, each an 8-byte "published" header and the item (or,
 * in the contiguous layout, an array of the headers and then the items back to back). The
 * region lives in private memory or in a named POSIX shared-memory segment, so producers and
 * consumers can be threads of one process or separate processes; the code path is the same.
 *
 * Sequences count items from 0; -1 means "nothing yet". A producer claims sequences, writes their
 * slots and publishes them; a consumer waits on a barrier (the producers' cursor or, for a
 * downstream stage, the sequences of the consumers it runs after), reads a batch and releases it
 * by storing its own sequence. Only leaf consumers (those nothing runs after) gate the producers.
 */
#ifndef SYMPATHY_RING_H
#define SYMPATHY_RING_H

#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* CDEF BEGIN */
#define SY_RING_MAX_CONSUMERS 64
#define SY_RING_MAX_PRODUCERS 64

enum sy_ring_limits {  /* an enum, not #defines, so that cffi hands them to Python */
    SY_RING_NAME_MAX = 200,        /* bytes of a segment name, the leading '/' included */
    SY_RING_ITEM_TYPE_MAX = 1920,  /* bytes of the stored item type, its terminating NUL included */
};

enum sy_ring_producer_kind {
    SY_RING_SINGLE_PRODUCER = 0,  /* one publishing thread: plain store of the cursor */
    SY_RING_MULTI_PRODUCER = 1,   /* any number: fetch-add claim + per-slot availability flags */
};

/* Where a slot's "published" header sits (docs/ring.md, "The contiguous layout"). */
enum sy_ring_layout {
    SY_RING_LAYOUT_SLOTS = 0,       /* header, then item, in each slot: one line hands a consumer both */
    SY_RING_LAYOUT_CONTIGUOUS = 1,  /* headers in an array of their own, items back to back: a batch is
                                       one memcpy each way; a single producer publishes by the cursor
                                       alone (no header written) */
};

/* Largest copy the *_now calls make (they keep the GIL: see sympathy/_build/ring_build.py). */
enum sy_ring_now { SY_RING_NOW_BYTES = 1048576 };

enum sy_ring_wait {
    SY_WAIT_BUSY_SPIN = 0,  /* PAUSE loop: lowest latency, burns a core */
    SY_WAIT_YIELD = 1,      /* spin a little, then sched_yield */
    SY_WAIT_SLEEP = 2,      /* spin, yield, then nanosleep with exponential backoff */
    SY_WAIT_BLOCKING = 3,   /* futex: sleeps in the kernel, woken by the other side */
};

/* Statuses of the ring beyond enum sy_status (c_src/platform.h). */
enum sy_ring_status {
    SY_RING_WAIT_SLICE = -20, /* a wait slice ran out before the deadline: nothing done, call again */
    SY_RING_EBUSY = -21,      /* a second thread claimed through one single-producer handle */
    SY_RING_NOT_NOW = -22,    /* a *_now call could not do it at once (or it is not one for it): nothing
                                 was done; the waiting call does it */
};

typedef struct sy_ring sy_ring;
typedef struct sy_ring_producer sy_ring_producer;
typedef struct sy_ring_consumer sy_ring_consumer;

typedef struct sy_ring_config {
    int64_t capacity;      /* slots; a power of two >= 2 */
    int64_t slot_size;     /* bytes per item, >= 1 */
    int producer_kind;     /* enum sy_ring_producer_kind */
    int wait;              /* enum sy_ring_wait */
    int sequence_stride;   /* bytes between the hot sequences: 0 (= 128, the right choice), or 64 or 8
                              to measure false sharing on this very ring */
    const char *item_type; /* stored in the segment for attach to read back (sympathy: the NumPy
                              dtype's descr); NULL or "" for raw bytes; < SY_RING_ITEM_TYPE_MAX bytes */
    int layout;            /* enum sy_ring_layout; 0 (slots) unless asked */
} sy_ring_config;

typedef struct sy_ring_info {
    int64_t capacity;
    int64_t slot_size;
    int producer_kind;
    int wait;
    int shared;            /* 1 when the region is a named shared-memory segment */
    int closed;            /* 1 once end-of-stream was signalled */
    int64_t cursor;        /* single producer: last published; multi: last claimed */
    int64_t region_bytes;
    int64_t header_bytes;
    int64_t slots_offset;  /* byte offset of slot 0's header within the region */
    int64_t slot_stride;   /* bytes from one item to the next (slot_size in the contiguous layout) */
    int64_t payload_offset;/* bytes from a slot's header to its item (slots layout; 0 when contiguous) */
    int64_t sequence_stride;
    int layout;            /* enum sy_ring_layout */
} sy_ring_info;

typedef struct sy_ring_peer {
    int kind;              /* 0 = producer, 1 = consumer */
    int index;             /* record index in its registry */
    int64_t pid;
    int64_t heartbeat_ns;  /* CLOCK_MONOTONIC of its last sign of life */
    int64_t sequence;      /* consumers: last released; producers: -1 */
    uint64_t after_mask;   /* consumers: the consumers this one runs after */
    int alive;             /* 0 when the process is gone (or a zombie) */
} sy_ring_peer;

/* ---- the ring (region) ---- */
/* A named segment is created 0600 with its memory reserved (a full /dev/shm: SY_EOS, errno ENOSPC)
 * and locked shared (flock) for as long as this process maps it. */
int sy_ring_create(const sy_ring_config *config, const char *name, sy_ring **out);
/* Refuses (SY_EOS, errno EPERM) a segment not owned by the effective uid or open to group/others;
 * checks the header and the file size before mapping (SY_EINVAL: not a valid ring). */
int sy_ring_attach(const char *name, sy_ring **out);
/* Drops this handle; the region is unmapped once its producers and consumers are closed too.
 * A named segment stays until sy_ring_unlink. */
void sy_ring_free(sy_ring *ring);
int sy_ring_unlink(const char *name);                /* removes a named segment (stale or not) */
/* Removes the name only while it still names the segment created with this nonce: 1 removed, 0 the
 * name is gone or names another segment now (a ring re-created under it), < 0 an error. */
int sy_ring_unlink_own(const char *name, uint64_t nonce);
/* For a create that met an existing name: removes the segment if no process maps it any more (every
 * mapper holds a shared flock through its mapping; the kernel drops it when the process dies) and it
 * is ours (our uid, 0600, a ring of this version, or a creation that never finished). 1: the name is
 * free now (*creator_pid: who made it, 0 if unknown); 0: in use or not ours to remove; < 0 error. */
int sy_ring_reclaim_stale(const char *name, int64_t *creator_pid);
uint64_t sy_ring_nonce(const sy_ring *ring);
/* Copies the stored item type (NUL-terminated, "" for raw) into out; returns its length. */
int sy_ring_item_type(const sy_ring *ring, char *out, int max_bytes);
int64_t sy_ring_region_bytes(int64_t capacity, int64_t slot_size);  /* -1 for an invalid layout */
/* Header checks used by attach: SY_EUNSUPPORTED for a ring of another format version. */
int sy_ring_validate(const void *region, int64_t region_bytes);
uint32_t sy_ring_format_version(void);              /* the version this build creates and attaches */
int sy_ring_get_info(const sy_ring *ring, sy_ring_info *out);
void *sy_ring_slots(const sy_ring *ring);            /* slot 0's item; the next is slot_stride on */
int sy_ring_close_stream(sy_ring *ring);             /* end of stream: consumers drain, then SY_ECLOSED */
int sy_ring_peers(const sy_ring *ring, sy_ring_peer *out, int max_peers);
int sy_ring_layout_offsets(const sy_ring *ring, int64_t *out, int n);  /* where the hot fields are, for tests */
/* Peer liveness within a process: every wait through this handle (and its producers and consumers)
 * ends with SY_ECLOSED at its next checkpoint; sleepers are woken. The mapping stays until the
 * last holder is freed, so a call still inside never touches unmapped memory. */
void sy_ring_shutdown(sy_ring *ring);
sy_ring *sy_ring_retain(sy_ring *ring);              /* one more holder of the mapping; sy_ring_free drops it */
/* Waits return SY_RING_WAIT_SLICE after slice_ns (0: never) when their deadline lies further:
 * nothing is claimed or consumed, so the caller can run signal handlers and call again with the
 * timeout less slice_ns. Multi-producer claims then use compare-and-swap (no claim without space). */
void sy_ring_set_wait_slice(sy_ring *ring, int64_t slice_ns);
/* Single producer: a claim while another thread's claim through the same handle is open (claim to
 * publish) gets SY_RING_EBUSY instead of the same sequences. Off by default (a locked exchange per
 * claim); the Python layer turns it on. */
void sy_ring_refuse_concurrent_claims(sy_ring *ring, int on);
/* Waits through this handle hand the GIL over (the Python layer turns it on; NULL turns it off):
 * `waiters` counts the threads of this process inside a wait through any handle so set (one
 * counter per process, owned by the caller, never freed while a handle uses it). A wait whose peer
 * (the single producer, or the one gating consumer) is in this process, and that finds what it
 * waited for while no other thread of the process is inside such a wait (the peer may still hold
 * the GIL), keeps waiting, the GIL released, until one is, or 50 us have passed. See ring_wait.c,
 * "The GIL handoff". */
void sy_ring_set_gil_handoff(sy_ring *ring, int64_t *waiters);

/* ---- producers ---- */
int sy_ring_producer_open(sy_ring *ring, sy_ring_producer **out);
void sy_ring_producer_close(sy_ring_producer *producer);
/* Claim n sequences (1 <= n <= capacity); *hi receives the last one, the first is *hi - n + 1.
 * timeout_ns < 0 waits forever; 0 tries once. */
int sy_ring_claim(sy_ring_producer *producer, int64_t n, int64_t timeout_ns, int64_t *hi);
void sy_ring_publish(sy_ring_producer *producer, int64_t lo, int64_t hi);
/* claim + copy + publish of n items (any n; larger than capacity goes in capacity-sized pieces). */
int sy_ring_write(sy_ring_producer *producer, const void *items, int64_t n, int64_t timeout_ns,
                  int64_t *written);
/* One item of exactly slot_size bytes. */
int sy_ring_write_one(sy_ring_producer *producer, const void *item, int64_t timeout_ns);
/* One 8-byte item passed by value (rings whose slot_size is 8; SY_EINVAL otherwise). */
int sy_ring_write_i64(sy_ring_producer *producer, int64_t value, int64_t timeout_ns);
/* sy_ring_write of n items if it can be done at once, without waiting: a single-producer ring, n <=
 * capacity, n * slot_size <= SY_RING_NOW_BYTES and room for all n now. Otherwise SY_RING_NOT_NOW
 * and nothing is written (call sy_ring_write). Never waits: the Python layer keeps the GIL. */
int sy_ring_write_now(sy_ring_producer *producer, const void *items, int64_t n);
/* sy_ring_claim for a single producer if room for n is there now (SY_RING_NOT_NOW otherwise, and
 * for a multi-producer ring: call sy_ring_claim). Never waits: the Python layer keeps the GIL. */
int sy_ring_claim_now(sy_ring_producer *producer, int64_t n, int64_t *hi);
/* sy_ring_write_now with its arguments in one struct, kept by the caller for the array it publishes
 * again and again: one argument crosses the FFI (cffi then calls it as METH_O, no argument tuple). */
typedef struct sy_ring_write_args {
    sy_ring_producer *producer;
    const void *items;
    int64_t n;
} sy_ring_write_args;
int sy_ring_write_args_now(const sy_ring_write_args *args);

/* ---- consumers ---- */
/* Declares n consumers to come (the creator, before publishing): n records gate the producers from
 * sequence -1 until consumers attach to them, so nothing is published past them unseen. */
int sy_ring_declare_consumers(sy_ring *ring, int n);
/* after: indices of the consumers this one runs after (NULL/0 for none: it follows the producers).
 * With none, a record declared at creation is taken first (it starts at -1); otherwise the consumer
 * starts after what is published (claimed) now: its sequence + 1 items are what it missed. */
int sy_ring_consumer_open(sy_ring *ring, const int *after, int n_after, sy_ring_consumer **out);
int sy_ring_consumer_close(sy_ring_consumer *consumer);  /* SY_EINVAL while others run after it */
/* Leave a consumer that others run after: it stays registered, frozen at its last release, so
 * they can drain up to it; its process may then exit without being taken for a dead peer. */
void sy_ring_consumer_detach(sy_ring_consumer *consumer);
int sy_ring_consumer_index(const sy_ring_consumer *consumer);
/* Close, or detach when others run after it (what a finaliser or a ring's close does). */
void sy_ring_consumer_leave(sy_ring_consumer *consumer);
/* Sequences this consumer skipped because the producer that claimed them died (multi producer). */
int64_t sy_ring_consumer_lost(const sy_ring_consumer *consumer);
int64_t sy_ring_consumer_sequence(const sy_ring_consumer *consumer);
/* Wait until the next sequence is readable; *hi receives the highest readable one (a batch). */
int sy_ring_wait_for(sy_ring_consumer *consumer, int64_t timeout_ns, int64_t *hi);
void sy_ring_release(sy_ring_consumer *consumer, int64_t upto);
/* wait + copy up to max_n items (stopping at max_n, never waiting for more than one) + release. */
int sy_ring_read(sy_ring_consumer *consumer, void *dst, int64_t max_n, int64_t timeout_ns, int64_t *n_out);
int sy_ring_read_one(sy_ring_consumer *consumer, void *dst, int64_t timeout_ns);
/* sy_ring_read without waiting, into dst + at items: the count read (>= 1), or SY_RING_NOT_NOW
 * (nothing read) when nothing is readable now or max_n * slot_size > SY_RING_NOW_BYTES, or another
 * status (< 0). Never waits (the GIL is kept). */
int64_t sy_ring_read_now(sy_ring_consumer *consumer, void *dst, int64_t at, int64_t max_n);
/* sy_ring_read, but one item only while another consumer runs after this one. For per-item
 * readers that buffer what they took: one FFI crossing per batch instead of per item. */
int sy_ring_read_ahead(sy_ring_consumer *consumer, void *dst, int64_t max_n, int64_t timeout_ns, int64_t *n_out);
/* After sy_ring_read_ahead, sy_ring_read_now answers SY_RING_NOT_NOW until the caller says that
 * every item it took was handed out (so a batch never overtakes them); sy_ring_read does not. */
void sy_ring_ahead_taken(sy_ring_consumer *consumer);

/* ---- the event poller: LMAX's EventPoller, a consumer that is polled and never waits ---- */
enum sy_ring_poll_state {
    SY_POLL_PROCESSING = 0,  /* events were ready (handed to the handler) */
    SY_POLL_GATING = 1,      /* more is claimed or published, but not yet readable by this consumer */
    SY_POLL_IDLE = 2,        /* nothing new */
};
/* Returns nonzero to go on with the batch, 0 to stop after this event (it counts as processed). */
typedef int (*sy_ring_event_handler)(void *ctx, const void *event, int64_t sequence, int end_of_batch);
/* Never waits. A poll state, or SY_ECLOSED once the stream is closed and drained. PROCESSING sets
 * *hi to the last readable sequence (the first is sy_ring_consumer_sequence + 1); the caller
 * handles them and calls sy_ring_release. */
int sy_ring_poll_ready(sy_ring_consumer *consumer, int64_t *hi);
/* sy_ring_poll_ready, then the handler on each ready event in order, then the release. */
int sy_ring_poll(sy_ring_consumer *consumer, sy_ring_event_handler handler, void *ctx);

/* ---- C-level benchmarks (c_src/ring_bench.c): threads created and pinned in C ---- */
enum sy_bench_shape {
    SY_SHAPE_UNICAST = 0,     /* P -> C */
    SY_SHAPE_PIPELINE = 1,    /* P -> C1 -> C2 -> C3 */
    SY_SHAPE_MULTICAST = 2,   /* P -> {C1, C2, C3}, each sees every item */
    SY_SHAPE_DIAMOND = 3,     /* P -> {C1, C2} -> C3 */
    SY_SHAPE_THREE_TO_ONE = 4,/* {P1, P2, P3} -> C */
};

typedef struct sy_bench_result {
    double seconds;
    int64_t items;            /* items through the shape (per consumer) */
    int64_t batches;          /* read calls that returned data, summed over the leaf consumers */
    int64_t checksum_ok;      /* 1 when every consumer saw exactly the expected items */
} sy_bench_result;

/* cpus: one CPU per thread in thread order (producers first), or NULL for no pinning. */
int sy_bench_ring(int shape, int wait, int64_t items, int64_t batch, int64_t capacity,
                  const int *cpus, int n_cpus, sy_bench_result *out);
int sy_bench_mutex_queue(int shape, int64_t items, int64_t capacity, const int *cpus, int n_cpus,
                         sy_bench_result *out);
/* Round trips through two 1P-1C rings; rtt_ns[i] receives each round trip. */
int sy_bench_pingpong(int wait, int64_t rounds, const int *cpus, int n_cpus, int64_t *rtt_ns);
/* The floor: the same round trips through two bare flags (no ring), each on its own block. */
int sy_bench_pingpong_flags(int64_t rounds, const int *cpus, int n_cpus, int64_t *rtt_ns);
/* The ring itself, one producer and one consumer item at a time, with its hot sequences (cursor,
 * gating cache, consumer sequences) packed 8 B apart (padding 0 or 8), 64 B apart, or 128 B apart. */
int sy_bench_false_sharing(int padding, int64_t items, const int *cpus, int n_cpus, sy_bench_result *out);
/* Latency of the mutex + condvar queue: the same round trips as sy_bench_pingpong. One-way latency
 * (send stamp to arrival, items paced interval_ns apart; the producer sleeps between items from 20 us
 * up, spins below) through the ring (use_ring=1, with `wait`)
 * or the mutex queue (use_ring=0); latency_ns[i] receives each item's. */
int sy_bench_mutex_pingpong(int64_t rounds, const int *cpus, int n_cpus, int64_t *rtt_ns);
int sy_bench_oneway(int use_ring, int wait, int64_t items, int64_t interval_ns, const int *cpus, int n_cpus,
                    int64_t *latency_ns);
/* ---- work sharing and records: sympathy.Queue (c_src/ring_work_pool.c, ring_work_records.c) ----
 * A ring made with producer_kind multi and slot_size >= 16, then sy_queue_init by its creator, is a
 * work queue: each record put goes to exactly one worker (order kept per producer). Records are
 * byte strings up to sy_queue_max_record bytes, spanning consecutive slots. */
enum sy_queue_status {
    SY_QUEUE_HELD = 1,     /* sy_queue_get: the record did not fit (or has a tag): it is held, copy it out */
    SY_QUEUE_SPILLED = 2,  /* sy_queue_put: no ring space now; the count is kept for the caller's spill */
};
enum sy_queue_put_mode {
    SY_QUEUE_TRY = 0,       /* take a count (never waits: SY_ETIMEDOUT at maxsize), then space */
    SY_QUEUE_RESERVED = 1,  /* the count was taken before: sy_queue_reserve, or a SPILLED put */
};
typedef struct sy_queue_producer sy_queue_producer;
typedef struct sy_queue_worker sy_queue_worker;
typedef struct sy_queue_counts {
    int64_t items;       /* put (or being put) and not yet taken: qsize */
    int64_t unfinished;  /* put and not yet task_done (JoinableQueue) */
    int64_t lost;        /* records a worker took and died holding */
    int64_t abandoned;   /* puts whose producer died between its claim and its publish */
    int64_t maxsize;     /* 0: unbounded */
} sy_queue_tally;
/* maxsize: items (0 unbounded). SY_EINVAL for a ring that is not multi-producer or already a queue. */
int sy_queue_init(sy_ring *ring, int64_t maxsize, int joinable);
int sy_queue_check(const sy_ring *ring, int64_t *maxsize, int *joinable);  /* SY_EINVAL: not a queue */
int64_t sy_queue_max_record(const sy_ring *ring);
int sy_queue_producer_open(sy_ring *ring, sy_queue_producer **out);
void sy_queue_producer_close(sy_queue_producer *producer);
/* One record gathered from n pieces; tag is stored with it. Never waits (multiprocessing.Queue's put
 * never waits for the pipe: its feeder thread does): SY_OK published; SY_QUEUE_SPILLED no space now,
 * the count held for the record the caller keeps (its feeder puts it later with SY_QUEUE_RESERVED,
 * after sy_queue_wait_space); SY_ETIMEDOUT (SY_QUEUE_TRY only) maxsize reached, nothing held. The
 * counts a producer holds are given back, and counted abandoned, if its process dies. */
int sy_queue_put(sy_queue_producer *producer, const void *const *pieces, const int64_t *sizes, int n, int64_t tag,
                 int mode);
int sy_queue_put1(sy_queue_producer *producer, const void *data, int64_t size, int64_t tag, int mode);
/* Waits for one count below maxsize and holds it (for a put with SY_QUEUE_RESERVED); timeout_ns < 0
 * forever, 0 one look. Safe beside another thread's put through the same producer. */
int sy_queue_reserve(sy_queue_producer *producer, int64_t timeout_ns);
void sy_queue_unreserve(sy_queue_producer *producer, int64_t n);  /* gives back n counts held */
/* Waits until a record of `bytes` would fit at the cursor (no claim); safe beside a put. */
int sy_queue_wait_space(sy_queue_producer *producer, int64_t bytes, int64_t timeout_ns);
int sy_queue_worker_open(sy_ring *ring, sy_queue_worker **out);
void sy_queue_worker_close(sy_queue_worker *worker);  /* a record still held is counted lost */
/* Takes the next record: copied into dst when it fits in capacity bytes and its tag is 0 (SY_OK);
 * else held (SY_QUEUE_HELD) for sy_queue_copy_held into a buffer of *bytes. */
int sy_queue_get(sy_queue_worker *worker, void *dst, int64_t capacity, int64_t timeout_ns, int64_t *bytes,
                 int64_t *tag);
int sy_queue_copy_held(sy_queue_worker *worker, void *dst);
/* reap: first look for dead workers (their held records counted lost) and dead producers. */
int sy_queue_counts(sy_ring *ring, int reap, sy_queue_tally *out);
int sy_queue_task_done(sy_ring *ring);               /* SY_EINVAL: called more times than items put */
int sy_queue_join(sy_ring *ring, int64_t timeout_ns); /* until every item put is task_done */
void sy_queue_note_abandoned(sy_ring *ring);          /* a frame record found stale: counted abandoned */
/* sy_queue_put1 (tag 0) and sy_queue_get (timeout 0) for records of at most SY_QUEUE_SMALL_BYTES:
 * they never wait and copy little, so the Python layer calls them without releasing the GIL (a
 * release and re-take costs about as much as the put itself: sympathy/_build/ring_build.py). */
enum sy_queue_small { SY_QUEUE_SMALL_BYTES = 65536 };
int sy_queue_put_small(sy_queue_producer *producer, const void *data, int64_t size, int mode);
int sy_queue_get_small(sy_queue_worker *worker, void *dst, int64_t capacity, int64_t *bytes, int64_t *tag);
/* Waits that take and hold nothing (for asyncio: a helper thread waits, the event loop then tries):
 * until a record is ready at the head / until the count is below maxsize; SY_OK or SY_ETIMEDOUT. */
int sy_queue_wait_item(sy_ring *ring, int64_t timeout_ns);
int sy_queue_wait_room(sy_ring *ring, int64_t timeout_ns);

/* ---- zero-copy frames (c_src/ring_work_frames.c): a ring whose slots are frame buffers ----
 * Made with sy_ring_create(capacity = buffers, slot_size = sy_frames_slot_size(frame_bytes)); a
 * buffer's data is sy_frames_data(i), 64-byte aligned, frame_bytes long. */
enum sy_frames_layout { SY_FRAME_DATA_OFFSET = 64 };  /* bytes from a slot's header to its data */
int64_t sy_frames_slot_size(int64_t frame_bytes);     /* -1: out of range */
int64_t sy_frames_capacity(const sy_ring *frames);
int64_t sy_frames_bytes(const sy_ring *frames);
void *sy_frames_data(const sy_ring *frames, int64_t index);
/* The lowest free buffer (the most likely still cached), for this process: pinned to it until
 * sy_frames_unpin. */
int sy_frames_acquire(sy_ring *frames, int64_t timeout_ns, int64_t *index, int64_t *gen);
int64_t sy_frames_acquire_now(sy_ring *frames);  /* no wait: gen << 32 | index, or -1 */
void sy_frames_queued(sy_ring *frames, int64_t index, int64_t gen);  /* its record is in the queue */
int sy_frames_take(sy_ring *frames, int64_t index, int64_t gen);     /* SY_EINVAL: a stale record */
int sy_frames_release(sy_ring *frames, int64_t index, int64_t gen);  /* held or staged by us -> free */
void sy_frames_unpin(sy_ring *frames, int64_t index);
int sy_frames_state(const sy_ring *frames, int64_t index, int64_t *out);  /* kind, gen, pid, pin */
/* CDEF END */

#endif /* SYMPATHY_RING_H */
