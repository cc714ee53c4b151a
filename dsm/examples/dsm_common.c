/* SPDX-License-Identifier: MIT */
/*
 * dsm_common.c - start, end and checked libpmdsm calls of the DSM versions
 * of the example programs (dsm_common.h).
 */
#include "dsm_common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int dsm_start(struct options *o, enum program p, int argc, char **argv,
              int *rank, int *size)
{
	int err = pmdsm_init(NULL);

	if (err) {
		fprintf(stderr, "%s_dsm: pmdsm_init: %s\n", program_name(p),
		        pmdsm_strerror(err));
		return 1;
	}
	*rank = pmdsm_rank();
	*size = pmdsm_size();

	int status = options_parse(o, p, "dsm", argc, argv, *rank == 0);

	if (status >= 0)
		pmdsm_finalize();
	return status;
}

int dsm_finish(int status)
{
	int err = pmdsm_finalize();

	if (err < 0)
		fail("pmdsm_finalize: %s", pmdsm_strerror(err));
	return status;
}

/* A call of libpmdsm that returned err: fail() unless it is 0. */
static void succeeded(int err, const char *call)
{
	if (err)
		fail("%s: %s", call, pmdsm_strerror(err));
}

void dsm_barrier(void)
{
	succeeded(pmdsm_barrier(), "pmdsm_barrier");
}

void dsm_barrier_with(const int *peers, unsigned n)
{
	succeeded(pmdsm_barrier_with(peers, n), "pmdsm_barrier_with");
}

void dsm_barrier_with_notify(const int *peers, unsigned n)
{
	succeeded(pmdsm_barrier_with_notify(peers, n), "pmdsm_barrier_with_notify");
}

void dsm_barrier_with_wait(void)
{
	succeeded(pmdsm_barrier_with_wait(), "pmdsm_barrier_with_wait");
}

void *dsm_shared(uint64_t bytes, const char *what)
{
	void *p = pmdsm_malloc(bytes);

	if (!p)
		fail("pmdsm_malloc of %" PRIu64 " bytes for the %s: %s "
		     "(the heap's size is PMDSM_HEAP_SIZE)", bytes, what, strerror(errno));
	return p;
}

void dsm_free(void *p)
{
	int err = pmdsm_free(p);

	if (err < 0)
		fail("pmdsm_free: %s", pmdsm_strerror(err));
}
