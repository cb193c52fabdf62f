/* cache.c: counting cache events, simulated (callgrind) and real (perf_event_open).
 *
 * Hardware fact: a miss costs ten to a few hundred cycles, so the number of misses, not the number
 * of instructions, decides the speed of memory-bound loops; both tools count them for one region. */
#include "cache.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "platform.h"

#if SY_HAVE_CALLGRIND
#include <valgrind/valgrind.h>
#endif

int sy_cache_running_on_valgrind(void) {
#if SY_HAVE_CALLGRIND
    return RUNNING_ON_VALGRIND ? 1 : 0;
#else
    return 0;
#endif
}

/* Zeroing first drops whatever the interpreter cost before the region (nothing, when valgrind was
 * started with --instr-atstart=no, but a caller may not have). */
void sy_cache_region_begin(void) { SY_MEASURE_BEGIN(); }

void sy_cache_region_end(void) {
#if SY_HAVE_CALLGRIND
    CALLGRIND_STOP_INSTRUMENTATION;
#endif
}

int sy_perf_open(uint32_t type, uint64_t config, int group_fd) {
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = type;
    attr.config = config;
    attr.disabled = group_fd == -1; /* the leader starts disabled; members follow the leader */
    attr.exclude_kernel = 1;        /* user-space counts work at perf_event_paranoid <= 2 */
    attr.exclude_hv = 1;
    attr.read_format = PERF_FORMAT_GROUP | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    long fd = syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1 /* any cpu */, group_fd, 0);
    return fd < 0 ? -errno : (int)fd;
}

int sy_perf_enable(int leader_fd) {
    if (ioctl(leader_fd, PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP) < 0) return -errno;
    if (ioctl(leader_fd, PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP) < 0) return -errno;
    return 0;
}

int sy_perf_disable(int leader_fd) {
    return ioctl(leader_fd, PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP) < 0 ? -errno : 0;
}

int sy_perf_read_group(int leader_fd, int n, uint64_t *values, uint64_t *time_enabled,
                       uint64_t *time_running) {
    /* PERF_FORMAT_GROUP layout: nr, time_enabled, time_running, then nr values. */
    enum { MAX_EVENTS = 16 };
    uint64_t buf[3 + MAX_EVENTS];
    if (n < 0 || n > MAX_EVENTS) return -EINVAL;
    ssize_t got = read(leader_fd, buf, sizeof buf);
    if (got < 0) return -errno;
    if ((size_t)got < 3 * sizeof(uint64_t) || buf[0] != (uint64_t)n) return -EIO;
    *time_enabled = buf[1];
    *time_running = buf[2];
    memcpy(values, buf + 3, (size_t)n * sizeof(uint64_t));
    return 0;
}

void sy_perf_close(int fd) {
    if (fd >= 0) close(fd);
}
