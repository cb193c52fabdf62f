/* ring_segment.c: the shared segment: create, attach, validate, reclaim and unlink a ring's memory.
 *
 * Hardware fact served: the memory a ring lives in must exist before anyone touches it. tmpfs pages
 * are allocated on first write, so a ring on a full /dev/shm would die with SIGBUS mid-stream;
 * posix_fallocate reserves every page at creation, where the error can still be an OSError. The
 * header is validated field by field before use, because another process (or another user) wrote it.
 */
#include "ring_internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* ---- region creation, attach, validation --------------------------------------------------------- */

/* FNV-1a over bytes [from, to) of a header block. */
static uint64_t fnv1a(const void *block, size_t from, size_t to) {
    const unsigned char *p = block;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = from; i < to; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t identity_checksum(const sy_ring_identity *id) {
    /* the fields between `magic` (written last) and `checksum` */
    return fnv1a(id, offsetof(sy_ring_identity, version), offsetof(sy_ring_identity, checksum));
}


/* Header plus item, rounded so that a slot never straddles a cache line it need not: up to 56-byte
 * items get a power-of-two stride (16, 32, 64: the header and the whole item share one line);
 * larger ones start on a line, so the header and the item's first bytes arrive together. */
static int64_t slot_stride_for(int64_t slot_size) {
    int64_t bytes = SLOT_HEADER_BYTES + slot_size;
    if (bytes > SY_CACHE_LINE) return align_up(bytes, SY_CACHE_LINE);
    int64_t stride = 2 * SLOT_HEADER_BYTES;
    while (stride < bytes) stride *= 2;
    return stride;
}

static bool valid_sequence_stride(int64_t stride) {
    return stride == SY_DESTRUCTIVE_SIZE || stride == SY_CACHE_LINE || stride == (int64_t)sizeof(int64_t);
}

/* The header array of the CONTIGUOUS layout: capacity 8-byte headers, to the next block, so the
 * items start on a block of their own (no line shared between the last headers and the first items). */
static int64_t header_array_bytes(int64_t capacity) { return align_up(capacity * SLOT_HEADER_BYTES, BLOCK); }

/* slot_stride: bytes from one item to the next (slot_size when CONTIGUOUS). */
static int layout_for(int64_t capacity, int64_t slot_size, int layout, int64_t *slot_stride, int64_t *slots_offset,
                      int64_t *region_bytes) {
    if (capacity < 2 || (capacity & (capacity - 1)) || capacity > ((int64_t)1 << 40)) return SY_EINVAL;
    if (slot_size < 1 || slot_size > ((int64_t)1 << 30)) return SY_EINVAL;
    if (layout != SY_RING_LAYOUT_SLOTS && layout != SY_RING_LAYOUT_CONTIGUOUS) return SY_EINVAL;
    *slot_stride = layout == SY_RING_LAYOUT_SLOTS ? slot_stride_for(slot_size) : slot_size;
    if (capacity > (INT64_MAX / 4) / (*slot_stride + SLOT_HEADER_BYTES)) return SY_EINVAL;
    *slots_offset = (int64_t)sizeof(struct sy_ring_header);
    int64_t headers = layout == SY_RING_LAYOUT_SLOTS ? 0 : header_array_bytes(capacity);
    *region_bytes = align_up(*slots_offset + headers + capacity * *slot_stride, 4096);
    return SY_OK;
}

/* Our magic and version, checksum and a layout that adds up: what attach reads (with pread) from
 * the file before it maps anything. */
static int validate_identity(const sy_ring_identity *id) {
    /* acquire: pairs with the creator's release of the magic, so the fields below are complete */
    if (atomic_load_explicit(&id->magic, memory_order_acquire) != SY_RING_MAGIC) return SY_EINVAL;
    /* Our magic in another format: say so (the caller names both versions) rather than "corrupt". */
    if (id->version != SY_RING_VERSION) return SY_EUNSUPPORTED;
    if (id->header_bytes != sizeof(struct sy_ring_header)) return SY_EINVAL;
    if (id->checksum != identity_checksum(id)) return SY_EINVAL;
    if (id->producer_kind != SY_RING_SINGLE_PRODUCER && id->producer_kind != SY_RING_MULTI_PRODUCER) return SY_EINVAL;
    if (id->wait < SY_WAIT_BUSY_SPIN || id->wait > SY_WAIT_BLOCKING) return SY_EINVAL;
    if (id->max_consumers != SY_RING_MAX_CONSUMERS || id->max_producers != SY_RING_MAX_PRODUCERS) return SY_EINVAL;
    if (!valid_sequence_stride(id->sequence_stride)) return SY_EINVAL;
    if (id->payload_offset != (id->layout == SY_RING_LAYOUT_SLOTS ? SLOT_HEADER_BYTES : 0) || id->reserved) return SY_EINVAL;
    int64_t slot_stride, slots_offset, bytes;
    if (layout_for(id->capacity, id->slot_size, id->layout, &slot_stride, &slots_offset, &bytes) != SY_OK)
        return SY_EINVAL;
    if (slot_stride != id->slot_stride || slots_offset != id->slots_offset) return SY_EINVAL;
    if (bytes != id->region_bytes) return SY_EINVAL;
    return SY_OK;
}

static uint64_t origin_checksum(const sy_ring_origin *o) {
    return fnv1a(o, 0, offsetof(sy_ring_origin, checksum));  /* every field before `checksum` */
}

static bool valid_pid(int64_t pid) { return pid >= 0 && pid <= INT32_MAX; }

/* The fields that change while the ring runs cannot be checksummed: each must lie in its possible
 * range, so a scribbled segment is refused at attach instead of being trusted. */
static int validate_live_fields(const struct sy_ring_header *h, int64_t capacity, int64_t sequence_stride) {
    const sy_ring_registry *reg = &h->registry;
    int32_t closed = atomic_load_explicit(&reg->closed, memory_order_relaxed);
    int32_t producers = atomic_load_explicit(&reg->producers, memory_order_relaxed);
    if ((closed != 0 && closed != 1) || producers < 0 || producers > SY_RING_MAX_PRODUCERS) return SY_EINVAL;
    if (!valid_pid(atomic_load_explicit(&reg->lock_pid, memory_order_relaxed))) return SY_EINVAL;
    for (int i = 0; i < SY_RING_MAX_CONSUMERS; i++)
        if (!valid_pid(atomic_load_explicit(&h->consumers[i].pid, memory_order_relaxed))) return SY_EINVAL;
    for (int i = 0; i < SY_RING_MAX_PRODUCERS; i++)
        if (!valid_pid(atomic_load_explicit(&h->producers[i].pid, memory_order_relaxed))) return SY_EINVAL;
    /* Every consumer sequence (and the multi-producer gating cache, a minimum of them) is read
     * before the cursor, which only grows, so it is checked against a cursor at least as new. */
    const unsigned char *room = h->sequences.room;
    int64_t highest = NO_SEQUENCE, lowest = NO_SEQUENCE;
    for (int i = SEQ_FIRST_CONSUMER; i <= SEQ_GATING_CACHE; i++) {
        int64_t s = atomic_load_explicit((const _Atomic int64_t *)(room + i * sequence_stride), memory_order_acquire);
        if (s > highest) highest = s;
        if (s < lowest) lowest = s;
    }
    int64_t cursor = atomic_load_explicit((const _Atomic int64_t *)(room + SEQ_CURSOR * sequence_stride),
                                          memory_order_acquire);
    /* A single producer stores the cursor after a batch's slot headers, so a consumer may be up to
     * a batch (at most a lap) past it for a moment. */
    if (lowest < NO_SEQUENCE || cursor < NO_SEQUENCE || cursor > INT64_MAX - 4 * capacity || highest > cursor + capacity)
        return SY_EINVAL;
    return SY_OK;
}

static int validate_origin(const sy_ring_origin *o) {
    if (o->checksum != origin_checksum(o) || o->nonce == 0 || !valid_pid(o->creator_pid)) return SY_EINVAL;
    if (o->item_type_bytes >= SY_RING_ITEM_TYPE_MAX || o->item_type[o->item_type_bytes] != '\0') return SY_EINVAL;
    return SY_OK;
}

int sy_ring_validate(const void *region, int64_t region_bytes) {
    if (region_bytes < (int64_t)sizeof(sy_ring_identity)) return SY_EINVAL;
    const struct sy_ring_header *h = region;
    int status = validate_identity(&h->identity);
    if (status != SY_OK) return status;
    if (region_bytes < (int64_t)sizeof(struct sy_ring_header) || h->identity.region_bytes > region_bytes)
        return SY_EINVAL;
    status = validate_origin(&h->origin);
    if (status != SY_OK) return status;
    return validate_live_fields(h, h->identity.capacity, h->identity.sequence_stride);
}

uint32_t sy_ring_format_version(void) { return SY_RING_VERSION; }

/* The SLOTS layout's size: the contiguous layout's is never larger (8 + slot_size bytes a slot
 * against at least that, rounded up), so this is what any ring of these slots needs at most. */
int64_t sy_ring_region_bytes(int64_t capacity, int64_t slot_size) {
    int64_t slot_stride, slots_offset, bytes;
    return layout_for(capacity, slot_size, SY_RING_LAYOUT_SLOTS, &slot_stride, &slots_offset, &bytes) == SY_OK ? bytes
                                                                                                            : -1;
}

/* Random, never 0 (0 marks "no origin"): tells apart two rings created under one name. */
static uint64_t creation_nonce(void) {
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != (ssize_t)sizeof nonce)
        nonce = sy_now_ns() * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
    return nonce ? nonce : 1;
}

static void init_region(struct sy_ring_header *h, const sy_ring_config *c, int64_t sequence_stride,
                        int64_t slot_stride, int64_t slots_offset, int64_t region_bytes) {
    /* The region comes zeroed from mmap/ftruncate; only the non-zero fields are set. Zeroed slot
     * headers already read "unpublished" (they hold sequence + 1). */
    sy_ring_identity *id = &h->identity;
    id->version = SY_RING_VERSION;
    id->header_bytes = sizeof(struct sy_ring_header);
    id->capacity = c->capacity;
    id->slot_size = c->slot_size;
    id->slot_stride = slot_stride;
    id->producer_kind = c->producer_kind;
    id->wait = c->wait;
    id->max_consumers = SY_RING_MAX_CONSUMERS;
    id->max_producers = SY_RING_MAX_PRODUCERS;
    id->sequence_stride = (int32_t)sequence_stride;
    id->layout = c->layout;
    id->payload_offset = c->layout == SY_RING_LAYOUT_SLOTS ? (int32_t)SLOT_HEADER_BYTES : 0;
    id->slots_offset = slots_offset;
    id->region_bytes = region_bytes;
    for (int i = 0; i < SEQ_COUNT; i++)
        atomic_init((_Atomic int64_t *)(h->sequences.room + i * sequence_stride), NO_SEQUENCE);
    id->checksum = identity_checksum(id);
    sy_ring_origin *o = &h->origin;
    o->nonce = creation_nonce();
    o->creator_pid = (int64_t)getpid();
    if (c->item_type) {  /* length checked by sy_ring_create */
        o->item_type_bytes = (uint32_t)strlen(c->item_type);
        memcpy(o->item_type, c->item_type, o->item_type_bytes);
    }
    o->checksum = origin_checksum(o);
    /* The magic goes last, with release: an attacher that sees it sees the rest. */
    atomic_store_explicit(&id->magic, SY_RING_MAGIC, memory_order_release);
}

static int wrap_region(void *region, size_t bytes, int shared, sy_ring **out) {
    sy_ring *r = calloc(1, sizeof *r);
    if (!r) return SY_ENOMEM;
    struct sy_ring_header *h = region;
    r->header = h;
    r->mask = h->identity.capacity - 1;
    r->slot_size = h->identity.slot_size;
    r->slot_stride = h->identity.slot_stride;
    r->wait = h->identity.wait;
    r->producer_kind = h->identity.producer_kind;
    r->slots = (unsigned char *)region + h->identity.slots_offset;
    if (h->identity.layout == SY_RING_LAYOUT_SLOTS) {
        r->items = r->slots + SLOT_HEADER_BYTES;
        r->header_stride = r->item_stride = r->slot_stride;
    } else {
        r->items = r->slots + header_array_bytes(h->identity.capacity);
        r->header_stride = SLOT_HEADER_BYTES;
        r->item_stride = r->slot_size;
    }
    r->cursor_publishes = h->identity.layout == SY_RING_LAYOUT_CONTIGUOUS &&
                          h->identity.producer_kind == SY_RING_SINGLE_PRODUCER;
    r->sequences = h->sequences.room;
    r->sequence_stride = h->identity.sequence_stride;
    r->cursor = (_Atomic int64_t *)(r->sequences + SEQ_CURSOR * r->sequence_stride);
    r->gating_cache = (_Atomic int64_t *)(r->sequences + SEQ_GATING_CACHE * r->sequence_stride);
    r->shared = shared;
    r->futex_op_flags = shared ? 0 : FUTEX_PRIVATE_FLAG;
    r->region_bytes = bytes;
    atomic_init(&r->refs, 1);
    *out = r;
    return SY_OK;
}

static int valid_name(const char *name) {
    size_t n = strnlen(name, SY_RING_NAME_MAX + 1);
    return name[0] == '/' && n > 1 && n <= SY_RING_NAME_MAX && !strchr(name + 1, '/');
}

/* Fails with errno set, leaving the caller to close and unlink. */
static int fail_os(int error) {
    errno = error;
    return SY_EOS;
}

/* tmpfs gives a page its memory on first touch: without a reservation a full /dev/shm surfaces as
 * SIGBUS at some later write into a slot. posix_fallocate reserves it all now (ENOSPC here instead).
 * tmpfs checks only the filesystem's total size up front and otherwise fills memory page by page
 * before it gives up, so a request beyond what is free is refused first, without touching a page. */
static int reserve_segment(int fd, int64_t bytes) {
    if (ftruncate(fd, (off_t)bytes) != 0) return SY_EOS;
    struct statvfs fs;
    /* f_blocks 0: a tmpfs mounted without a size limit reports no figures; fallocate alone decides */
    if (fstatvfs(fd, &fs) == 0 && fs.f_blocks && (uint64_t)bytes > (uint64_t)fs.f_bavail * fs.f_frsize)
        return fail_os(ENOSPC);
    int error = posix_fallocate(fd, 0, (off_t)bytes);
    return error ? fail_os(error) : SY_OK;
}

static int create_segment(const char *name, int64_t bytes, void **region) {
    /* O_EXCL: never adopt someone else's segment. */
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return SY_EOS;
    /* A shared lock for as long as this process maps the segment (the mapping holds the open file,
     * and with it the lock, past close(fd)): sy_ring_reclaim_stale removes only an unlocked one.
     * fchmod: the umask may have cleared bits of 0600, and attach refuses anything but 0600. */
    int status = flock(fd, LOCK_SH) == 0 && fchmod(fd, 0600) == 0 ? reserve_segment(fd, bytes) : SY_EOS;
    if (status == SY_OK) {
        *region = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (*region == MAP_FAILED) status = SY_EOS;
    }
    int saved = errno;
    close(fd);
    if (status != SY_OK) shm_unlink(name);
    errno = saved;
    return status;
}

int sy_ring_create(const sy_ring_config *c, const char *name, sy_ring **out) {
    if (!c || !out) return SY_EINVAL;
    if (c->producer_kind != SY_RING_SINGLE_PRODUCER && c->producer_kind != SY_RING_MULTI_PRODUCER) return SY_EINVAL;
    if (c->wait < SY_WAIT_BUSY_SPIN || c->wait > SY_WAIT_BLOCKING) return SY_EINVAL;
    if (c->item_type && strnlen(c->item_type, SY_RING_ITEM_TYPE_MAX) >= SY_RING_ITEM_TYPE_MAX) return SY_EINVAL;
    int64_t sequence_stride = c->sequence_stride ? c->sequence_stride : SY_DESTRUCTIVE_SIZE;
    if (!valid_sequence_stride(sequence_stride)) return SY_EINVAL;
    int64_t slot_stride, slots_offset, bytes;
    int status = layout_for(c->capacity, c->slot_size, c->layout, &slot_stride, &slots_offset, &bytes);
    if (status != SY_OK) return status;
    if (name && !valid_name(name)) return SY_EINVAL;
    void *region;
    if (!name) {
        region = mmap(NULL, (size_t)bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (region == MAP_FAILED) return errno == ENOMEM ? SY_ENOMEM : SY_EOS;
    } else {
        status = create_segment(name, bytes, &region);
        if (status != SY_OK) return status;
    }
    init_region(region, c, sequence_stride, slot_stride, slots_offset, bytes);
    status = wrap_region(region, (size_t)bytes, name != NULL, out);
    if (status != SY_OK) {
        munmap(region, (size_t)bytes);
        if (name) shm_unlink(name);
    }
    return status;
}

/* Only our own user's segments, closed to everyone else: another user's segment (even one opened
 * up with chmod 666) could feed us its items, or shrink under our mapping and kill us with SIGBUS. */
static bool segment_is_ours(const struct stat *st) {
    return S_ISREG(st->st_mode) && st->st_uid == geteuid() && (st->st_mode & 077) == 0;
}

int sy_ring_attach(const char *name, sy_ring **out) {
    if (!name || !out || !valid_name(name)) return SY_EINVAL;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return SY_EOS;
    struct stat st;
    sy_ring_identity id;
    int status = SY_OK;
    if (fstat(fd, &st) != 0) status = SY_EOS;
    else if (!segment_is_ours(&st)) status = fail_os(EPERM);
    /* The header first, read rather than mapped: the file must be exactly the region it describes
     * before any of it is mapped (a short file would SIGBUS on the first access past its end). */
    else if (pread(fd, &id, sizeof id, 0) != (ssize_t)sizeof id) status = SY_EINVAL;
    else if ((status = validate_identity(&id)) == SY_OK && id.region_bytes != (int64_t)st.st_size) status = SY_EINVAL;
    /* The shared lock that marks this process as a user of the segment (see create_segment). Only
     * a reclaim holds it exclusively, and then the segment is stale and about to go: no such ring. */
    if (status == SY_OK && flock(fd, LOCK_SH | LOCK_NB) != 0) status = fail_os(errno == EWOULDBLOCK ? ENOENT : errno);
    void *region = MAP_FAILED;
    if (status == SY_OK) {
        region = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (region == MAP_FAILED) status = SY_EOS;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    if (status != SY_OK) return status;
    status = sy_ring_validate(region, (int64_t)st.st_size);
    if (status == SY_OK) status = wrap_region(region, (size_t)st.st_size, 1, out);
    if (status != SY_OK) munmap(region, (size_t)st.st_size);
    return status;
}


sy_ring *sy_ring_retain(sy_ring *r) {
    ring_retain(r);
    return r;
}

void sy_ring_shutdown(sy_ring *r) {
    /* release: pairs with wait_checkpoint's acquire */
    atomic_store_explicit(&r->closing, 1, memory_order_release);
    /* Wake the sleepers; one about to sleep naps at most LIVENESS_PERIOD_NS before its next
     * checkpoint. The futex word is not written: closing never stores into the shared segment
     * (a segment another process truncated would kill us with SIGBUS). */
    if (r->wait == SY_WAIT_BLOCKING) futex_wake_all(&r->header->wake.word, r->futex_op_flags);
}

void sy_ring_set_wait_slice(sy_ring *r, int64_t slice_ns) { r->wait_slice_ns = slice_ns > 0 ? slice_ns : 0; }

void sy_ring_refuse_concurrent_claims(sy_ring *r, int on) { r->refuse_concurrent_claims = on != 0; }

/* The counter is plain int64_t in the public header (cffi has no _Atomic); it is only ever used
 * through atomic operations, and on the targets we build for the two have one representation. */
void sy_ring_set_gil_handoff(sy_ring *r, int64_t *waiters) { r->gil_waiters = (_Atomic int64_t *)waiters; }

void sy_ring_free(sy_ring *r) {
    if (!r) return;
    /* acq_rel: every use of the mapping by other holders happens before the unmap */
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
    munmap(r->header, r->region_bytes);
    free(r);
}

int sy_ring_unlink(const char *name) {
    if (!name || !valid_name(name)) return SY_EINVAL;
    return shm_unlink(name) == 0 ? SY_OK : SY_EOS;
}

/* The origin of the segment a name holds now, read from the file (not from anyone's mapping). */
static bool read_origin(int fd, sy_ring_origin *o) {
    return pread(fd, o, sizeof *o, offsetof(struct sy_ring_header, origin)) == (ssize_t)sizeof *o &&
           validate_origin(o) == SY_OK;
}

int sy_ring_unlink_own(const char *name, uint64_t nonce) {
    if (!name || !valid_name(name)) return SY_EINVAL;
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd < 0) return errno == ENOENT ? 0 : SY_EOS;
    sy_ring_origin o;
    bool ours = read_origin(fd, &o) && o.nonce == nonce;
    close(fd);
    /* Between the check and the unlink only a cleanup() or a reclaim (of a segment nobody maps)
     * can replace the name; a plain create cannot while it exists. */
    if (!ours) return 0;
    if (shm_unlink(name) == 0) return 1;
    return errno == ENOENT ? 0 : SY_EOS;
}

/* A segment whose creation never got as far as the magic: its creator died mid-way (a live one
 * holds the lock from its first microseconds, and is given this long besides). */
#define UNFINISHED_AGE_S 2

int sy_ring_reclaim_stale(const char *name, int64_t *creator_pid) {
    if (!name || !creator_pid || !valid_name(name)) return SY_EINVAL;
    *creator_pid = 0;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return errno == ENOENT ? 1 : SY_EOS;
    struct stat st, now;
    sy_ring_identity id;
    bool stale = false;
    /* LOCK_EX succeeds only when no process maps it; held until close, so two processes reclaiming
     * at once cannot both remove (the second would remove the first one's new segment). */
    if (fstat(fd, &st) == 0 && segment_is_ours(&st) && flock(fd, LOCK_EX | LOCK_NB) == 0) {
        memset(&id, 0, sizeof id);
        ssize_t got = pread(fd, &id, sizeof id, 0);
        uint64_t magic = atomic_load_explicit(&id.magic, memory_order_relaxed);
        if (got == (ssize_t)sizeof id && magic == SY_RING_MAGIC && id.version == SY_RING_VERSION) {
            sy_ring_origin o;
            if (read_origin(fd, &o)) *creator_pid = o.creator_pid;
            stale = true;
        } else if (got >= 0 && magic == 0) {
            stale = time(NULL) - st.st_mtime >= UNFINISHED_AGE_S;
        }  /* anything else is not a ring of this version: not ours to remove */
    }
    /* Still the same file under the name (not one a cleanup() and a create put there meanwhile)? */
    if (stale) {
        int again = shm_open(name, O_RDONLY, 0);
        stale = again >= 0 && fstat(again, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino;
        if (again >= 0) close(again);
    }
    int status = stale ? (shm_unlink(name) == 0 || errno == ENOENT ? 1 : SY_EOS) : 0;
    int saved = errno;
    close(fd);
    errno = saved;
    return status;
}

uint64_t sy_ring_nonce(const sy_ring *r) { return r->header->origin.nonce; }

int sy_ring_item_type(const sy_ring *r, char *out, int max_bytes) {
    const sy_ring_origin *o = &r->header->origin;
    int n = (int)o->item_type_bytes;
    if (!out || max_bytes <= n) return SY_EINVAL;
    memcpy(out, o->item_type, (size_t)n);
    out[n] = '\0';
    return n;
}

int sy_ring_get_info(const sy_ring *r, sy_ring_info *out) {
    const sy_ring_identity *id = &r->header->identity;
    out->capacity = id->capacity;
    out->slot_size = id->slot_size;
    out->producer_kind = id->producer_kind;
    out->wait = id->wait;
    out->shared = r->shared;
    out->closed = atomic_load_explicit(&r->header->registry.closed, memory_order_acquire);
    out->cursor = atomic_load_explicit(r->cursor, memory_order_acquire);
    out->region_bytes = id->region_bytes;
    out->header_bytes = (int64_t)sizeof(struct sy_ring_header);
    out->slots_offset = id->slots_offset;
    out->slot_stride = id->slot_stride;
    out->payload_offset = id->payload_offset;
    out->sequence_stride = id->sequence_stride;
    out->layout = id->layout;
    return SY_OK;
}

void *sy_ring_slots(const sy_ring *r) { return r->items; }

int sy_ring_layout_offsets(const sy_ring *r, int64_t *out, int n) {
    const unsigned char *base = (const unsigned char *)r->header;
    const int64_t offsets[] = {
        (const unsigned char *)r->cursor - base, (const unsigned char *)r->gating_cache - base,
        (const unsigned char *)consumer_sequence(r, 0) - base, (const unsigned char *)consumer_sequence(r, 1) - base,
        offsetof(struct sy_ring_header, wake), offsetof(struct sy_ring_header, registry),
        offsetof(struct sy_ring_header, consumers), offsetof(struct sy_ring_header, producers),
        sizeof(sy_consumer_record), sizeof(sy_producer_record), sizeof(struct sy_ring_header),
        r->slots - base, r->slot_stride, SLOT_HEADER_BYTES,
        offsetof(struct sy_ring_producer, gating_cache), offsetof(struct sy_ring_consumer, available_cache),
    };
    int count = (int)(sizeof offsets / sizeof offsets[0]);
    for (int i = 0; i < n && i < count; i++) out[i] = offsets[i];
    return count;
}
