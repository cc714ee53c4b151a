/* SPDX-License-Identifier: MIT */
/* random.c - secrets from the kernel (random.h). */
#include "random.h"

#include <errno.h>
#include <sys/random.h>

int pm_random_u64(uint64_t *out)
{
	uint8_t *p = (uint8_t *)out;
	size_t got = 0;

	/* Eight bytes come whole once the pool is ready; a signal may still cut
	 * the call short, and before the pool is ready it blocks, as a secret
	 * should. */
	while (got < sizeof(*out)) {
		ssize_t n = getrandom(p + got, sizeof(*out) - got, 0);

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			got += (size_t)n;
	}
	return 0;
}
