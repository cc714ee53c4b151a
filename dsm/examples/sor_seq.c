/* SPDX-License-Identifier: MIT */
/*
 * sor_seq.c - red-black successive over-relaxation, sequential version:
 * the reference of sor_dsm and sor_mpi (README.md).
 *
 *   sor_seq [-n 512] [-i 100] [-w 1.5] [-s 1]
 */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int status = options_parse(&o, PROG_SOR, "seq", argc, argv, true);

	if (status >= 0)
		return status;

	uint64_t n = o.n;
	double *g = xarray(n * n, sizeof *g);

	for (uint64_t i = 0; i < n; i++)
		grid_init_row(&g[i * n], n, o.seed, i);

	double t0 = now_seconds();
	sor_sweeps(g, n, o.iterations, o.omega);
	double t1 = now_seconds();

	print_result(&o, 1, t1 - t0, fnv1a64(g, n * n * sizeof *g));
	xarray_free(g);
	return 0;
}
