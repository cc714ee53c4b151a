/* SPDX-License-Identifier: MIT */
/*
 * jacobi_dsm.c - 2-D 5-point Jacobi stencil over libpmdsm (README.md).
 *
 * Both grids are shared (PMDSM_BLOCK: the pages of rank r's block of rows
 * have their home at rank r).  Every rank initialises and updates its own
 * block of rows; the rows just above and below it are read from the
 * neighbours' pages, fetched on demand after each barrier.  The barrier at
 * the end of each sweep is the only synchronisation: it makes the sweep's
 * writes visible before anyone reads them, and keeps the next sweep from
 * overwriting what a slower rank still reads.
 *
 *   scrun -nodes=2x2 jacobi_dsm [-n 512] [-i 100] [-s 1] [--check]
 */
#include "common.h"
#include "kernels.h"

#include <pmdsm.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static void dsm_barrier(void)
{
	int err = pmdsm_barrier();

	if (err)
		fail("pmdsm_barrier: %s", pmdsm_strerror(err));
}

static double *shared_grid(uint64_t n)
{
	double *g = pmdsm_malloc(n * n * sizeof *g);

	if (!g)
		fail("pmdsm_malloc of %" PRIu64 " bytes: %s (the heap's size is PMDSM_HEAP_SIZE)",
		     n * n * sizeof *g, strerror(errno));
	return g;
}

int main(int argc, char **argv)
{
	int err = pmdsm_init(NULL);

	if (err) {
		fprintf(stderr, "jacobi_dsm: pmdsm_init: %s\n", pmdsm_strerror(err));
		return 1;
	}
	int rank = pmdsm_rank(), size = pmdsm_size();
	struct options o;
	int status = options_parse(&o, PROG_JACOBI, "dsm", argc, argv, rank == 0);

	if (status >= 0) {
		pmdsm_finalize();
		return status;
	}
	status = 0;

	uint64_t n = o.n, lo, hi;
	double *a = shared_grid(n), *b = shared_grid(n);

	block_range(n, size, rank, &lo, &hi);
	for (uint64_t i = lo; i < hi; i++) {
		grid_init_row(&a[i * n], n, o.seed, i);
		grid_init_row(&b[i * n], n, o.seed, i);
	}
	/* The rows this rank updates: its block without the boundary rows. */
	uint64_t first = lo > 1 ? lo : 1, last = hi < n - 1 ? hi : n - 1;

	dsm_barrier();
	double t0 = now_seconds();
	double *cur = a, *next = b;
	for (uint64_t it = 0; it < o.iterations; it++) {
		for (uint64_t i = first; i < last; i++)
			jacobi_row(&next[i * n], &cur[(i - 1) * n], &cur[i * n],
			           &cur[(i + 1) * n], n);
		dsm_barrier();
		double *t = cur;
		cur = next;
		next = t;
	}
	if (o.iterations == 0)
		dsm_barrier();
	double t1 = now_seconds();

	if (rank == 0) {
		/* Rank 0 reads the whole result, fetching the other ranks' pages. */
		uint64_t sum = fnv1a64(cur, n * n * sizeof *cur);

		print_result(&o, size, t1 - t0, sum);
		if (o.check)
			status = check_checksum(sum, jacobi_reference(&o));
	}
	if ((err = pmdsm_free(b)) < 0 || (err = pmdsm_free(a)) < 0)
		fail("pmdsm_free: %s", pmdsm_strerror(err));
	if ((err = pmdsm_finalize()) < 0)
		fail("pmdsm_finalize: %s", pmdsm_strerror(err));
	return status;
}
