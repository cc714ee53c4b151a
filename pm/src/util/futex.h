/* SPDX-License-Identifier: MIT */
/* futex.h - waiting on a word in memory shared between processes. */
#ifndef PM_FUTEX_H
#define PM_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleep while *word == expected, at most timeout_ms.  Shared (not
 * FUTEX_PRIVATE) because the word lives in another process's mapping too. */
static inline int futex_wait_shared(_Atomic uint32_t *word, uint32_t expected,
				    int timeout_ms)
{
	struct timespec ts = { .tv_sec = timeout_ms / 1000,
			       .tv_nsec = (long)(timeout_ms % 1000) * 1000000L };

	if (syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0) < 0)
		return -errno;
	return 0;
}

static inline void futex_wake_shared(_Atomic uint32_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 1, NULL, NULL, 0);
}

#endif /* PM_FUTEX_H */
