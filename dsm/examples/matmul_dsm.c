/* SPDX-License-Identifier: MIT */
/*
 * matmul_dsm.c - C = A x B over libpmdsm (README.md).
 *
 * A, B and C are shared (PMDSM_BLOCK: rank r's block of rows is homed at
 * rank r).  Every rank initialises its block of rows of A and B, then,
 * after a barrier, computes its block of rows of C: its rows of A are at
 * home, B is read whole, the other ranks' blocks fetched page by page on
 * first touch.  A barrier ends the computation; rank 0 then reads C.
 *
 *   scrun -nodes=2x2 matmul_dsm [-n 256] [-s 1] [--check]
 */
#include "common.h"
#include "dsm_common.h"
#include "kernels.h"

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = dsm_start(&o, PROG_MATMUL, argc, argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t n = o.n, lo, hi;
	double *a = dsm_shared(n * n * sizeof *a, "matrix A");
	double *b = dsm_shared(n * n * sizeof *b, "matrix B");
	double *c = dsm_shared(n * n * sizeof *c, "matrix C");

	block_range(n, size, rank, &lo, &hi);
	for (uint64_t i = lo; i < hi; i++) {
		matrix_init_row(&a[i * n], n, o.seed, STREAM_A, i);
		matrix_init_row(&b[i * n], n, o.seed, STREAM_B, i);
	}

	dsm_barrier();
	double t0 = now_seconds();
	for (uint64_t i = lo; i < hi; i++)
		matmul_row(&c[i * n], &a[i * n], b, n);
	dsm_barrier();
	double t1 = now_seconds();

	/* Rank 0 reads the whole result, fetching the other ranks' pages. */
	status = rank == 0 ? report_result(&o, size, t1 - t0, c, n * n * sizeof *c,
	                                   matmul_reference)
	                   : 0;
	dsm_free(c);
	dsm_free(b);
	dsm_free(a);
	return dsm_finish(status);
}
