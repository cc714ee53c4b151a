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
#include "dsm_common.h"
#include "kernels.h"

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = dsm_start(&o, PROG_SOR, argc, argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t n = o.n, lo, hi;
	double *g = dsm_shared(n * n * sizeof *g, "grid");

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

	/* Rank 0 reads the whole result, fetching the other ranks' pages. */
	status = rank == 0 ? report_result(&o, size, t1 - t0, g, n * n * sizeof *g,
	                                   sor_reference)
	                   : 0;
	dsm_free(g);
	return dsm_finish(status);
}
