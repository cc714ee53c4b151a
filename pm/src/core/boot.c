/* SPDX-License-Identifier: MIT */
/* boot.c - choosing the bootstrap, and what every bootstrap shares. */
#include "pm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pm_boot_open(struct pm_boot *b, bool detached)
{
	memset(b, 0, sizeof(*b));
	if (detached) {
		/* A job of its own, whatever launcher is around: the process's
		 * values stay in it, its peers come by pm_peer_insert(). */
		int err = pm_boot_open_singleton(b);
		char unique[64] = "";
		const char *tail = strchr(b->job, '.');        /* ".pid.ns" */

		if (!err) {
			if (tail)
				memcpy(unique, tail, strnlen(tail, sizeof(unique) - 1));
			snprintf(b->job, sizeof(b->job), "detached%s", unique);
		}
		return err;
	}
	/* A PMIx server announces itself to its clients through these. */
	if (getenv("PMIX_NAMESPACE") || getenv("PMIX_SERVER_URI41") ||
	    getenv("PMIX_SERVER_URI4") || getenv("PMIX_SERVER_URI3") ||
	    getenv("PMIX_SERVER_URI21") || getenv("PMIX_SERVER_URI2"))
		return pm_boot_open_pmix(b);
	return pm_boot_open_singleton(b);
}

void pm_boot_close(struct pm_boot *b)
{
	if (b->ops && b->ops->fini)
		b->ops->fini(b);
	free(b->local_ranks);
	memset(b, 0, sizeof(*b));
}
