/* SPDX-License-Identifier: MIT */
/* boot.c - choosing the bootstrap, and what every bootstrap shares. */
#include "pm_internal.h"

#include <stdlib.h>
#include <string.h>

int pm_boot_open(struct pm_boot *b)
{
	memset(b, 0, sizeof(*b));
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
