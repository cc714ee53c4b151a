/* SPDX-License-Identifier: MIT */
/*
 * jacobi_seq.c - 2-D 5-point Jacobi stencil, sequential version: the
 * reference of jacobi_dsm and jacobi_mpi (README.md).
 *
 *   jacobi_seq [-n 512] [-i 100] [-s 1]
 */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int status = options_parse(&o, PROG_JACOBI, "seq", argc, argv, true);

	if (status >= 0)
		return status;

	uint64_t n = o.n;
	double *a = xarray(n * n, sizeof *a), *b = xarray(n * n, sizeof *b);

	/* Both grids hold the boundary; the interior of b is overwritten by
	 * the first sweep. */
	for (uint64_t i = 0; i < n; i++) {
		grid_init_row(&a[i * n], n, o.seed, i);
		grid_init_row(&b[i * n], n, o.seed, i);
	}

	double t0 = now_seconds();
	double *result = jacobi_sweeps(a, b, n, o.iterations);
	double t1 = now_seconds();

	print_result(&o, 1, t1 - t0, fnv1a64(result, n * n * sizeof *result));
	xarray_free(a);
	xarray_free(b);
	return 0;
}
