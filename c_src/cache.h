/* cache.h: measuring what the caches do — a callgrind region marker and perf_event_open counters. */
#ifndef SYMPATHY_CACHE_H
#define SYMPATHY_CACHE_H

#include <stdint.h>

/* CDEF BEGIN */
/* 1 when this process runs under valgrind (the simulated counts are then meaningful). */
int sy_cache_running_on_valgrind(void);
/* Start and stop callgrind's instrumentation around a region; no-ops outside valgrind. */
void sy_cache_region_begin(void);
void sy_cache_region_end(void);

/* Hardware counters: open one event (perf_event_attr.type/config) in a group led by group_fd
 * (-1 opens a new group). Returns the fd, or -errno when the kernel or the machine refuses. */
int sy_perf_open(uint32_t type, uint64_t config, int group_fd);
/* Reset and enable (or disable) every event of the group led by leader_fd: 0 or -errno. */
int sy_perf_enable(int leader_fd);
int sy_perf_disable(int leader_fd);
/* Read n counts of the group led by leader_fd into values (in the order they were opened), with
 * the time the group was enabled and running, so multiplexed counts can be scaled: 0 or -errno. */
int sy_perf_read_group(int leader_fd, int n, uint64_t *values, uint64_t *time_enabled,
                       uint64_t *time_running);
void sy_perf_close(int fd);
/* CDEF END */

#endif
