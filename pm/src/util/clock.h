/* SPDX-License-Identifier: MIT */
/* clock.h - the one clock of libpm: CLOCK_MONOTONIC in nanoseconds. */
#ifndef PM_UTIL_CLOCK_H
#define PM_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Read through the vDSO: no system call, so cheap enough for fast paths
 * (which still read it once per pass, not per packet). */
static inline uint64_t pm_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif /* PM_UTIL_CLOCK_H */
