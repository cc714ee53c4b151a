/* SPDX-License-Identifier: MIT */
/*
 * matmul_seq.c - C = A x B, sequential version: the reference of
 * matmul_dsm and matmul_mpi (README.md).
 *
 *   matmul_seq [-n 256] [-s 1]
 */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int status = options_parse(&o, PROG_MATMUL, "seq", argc, argv, true);

	if (status >= 0)
		return status;

	uint64_t n = o.n;
	double *a = xarray(n * n, sizeof *a), *b = xarray(n * n, sizeof *b);
	double *c = xarray(n * n, sizeof *c);

	for (uint64_t i = 0; i < n; i++) {
		matrix_init_row(&a[i * n], n, o.seed, STREAM_A, i);
		matrix_init_row(&b[i * n], n, o.seed, STREAM_B, i);
	}

	double t0 = now_seconds();
	for (uint64_t i = 0; i < n; i++)
		matmul_row(&c[i * n], &a[i * n], b, n);
	double t1 = now_seconds();

	print_result(&o, 1, t1 - t0, fnv1a64(c, n * n * sizeof *c));
	xarray_free(a);
	xarray_free(b);
	xarray_free(c);
	return 0;
}
