/* SPDX-License-Identifier: MIT */
/*
 * sor_dsm.c - red-black successive over-relaxation over libpmdsm
 * (README.md).
 *
 * One shared grid (PMDSM_BLOCK: rank r's block of rows is homed at rank
 * r), updated in place.  Every rank sweeps the red points of its rows,
 * waits at a barrier, sweeps the black points, waits at a barrier.  A red
 * point's neighbours are all black and the other way round, so within a
 * sweep no rank reads what another writes; where two ranks' rows share a
 * page, both write it (different words) and the DSM merges their diffs.
 *
 *   scrun -nodes=2x2 sor_dsm [-n 512] [-i 100] [-w 1.5] [-s 1] [--check]
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

int main(int argc, char **argv)
{
	int err = pmdsm_init(NULL);

	if (err) {
		fprintf(stderr, "sor_dsm: pmdsm_init: %s\n", pmdsm_strerror(err));
		return 1;
	}
	int rank = pmdsm_rank(), size = pmdsm_size();
	struct options o;
	int status = options_parse(&o, PROG_SOR, "dsm", argc, argv, rank == 0);

	if (status >= 0) {
		pmdsm_finalize();
		return status;
	}
	status = 0;

	uint64_t n = o.n, lo, hi;
	double *g = pmdsm_malloc(n * n * sizeof *g);

	if (!g)
		fail("pmdsm_malloc of %" PRIu64 " bytes: %s (the heap's size is PMDSM_HEAP_SIZE)",
		     n * n * sizeof *g, strerror(errno));
	block_range(n, size, rank, &lo, &hi);
	for (uint64_t i = lo; i < hi; i++)
		grid_init_row(&g[i * n], n, o.seed, i);
	/* The rows this rank updates: its block without the boundary rows. */
	uint64_t first = lo > 1 ? lo : 1, last = hi < n - 1 ? hi : n - 1;

	dsm_barrier();
	double t0 = now_seconds();
	for (uint64_t it = 0; it < o.iterations; it++) {
		for (unsigned colour = 0; colour < 2; colour++) {
			for (uint64_t i = first; i < last; i++)
				sor_row(&g[i * n], &g[(i - 1) * n], &g[(i + 1) * n], n, i,
				        colour, o.omega);
			dsm_barrier();
		}
	}
	if (o.iterations == 0)
		dsm_barrier();
	double t1 = now_seconds();

	if (rank == 0) {
		/* Rank 0 reads the whole result, fetching the other ranks' pages. */
		uint64_t sum = fnv1a64(g, n * n * sizeof *g);

		print_result(&o, size, t1 - t0, sum);
		if (o.check)
			status = check_checksum(sum, sor_reference(&o));
	}
	if ((err = pmdsm_free(g)) < 0)
		fail("pmdsm_free: %s", pmdsm_strerror(err));
	if ((err = pmdsm_finalize()) < 0)
		fail("pmdsm_finalize: %s", pmdsm_strerror(err));
	return status;
}
