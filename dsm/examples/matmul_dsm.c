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

static double *shared_matrix(uint64_t n)
{
	double *m = pmdsm_malloc(n * n * sizeof *m);

	if (!m)
		fail("pmdsm_malloc of %" PRIu64 " bytes: %s (the heap's size is PMDSM_HEAP_SIZE)",
		     n * n * sizeof *m, strerror(errno));
	return m;
}

int main(int argc, char **argv)
{
	int err = pmdsm_init(NULL);

	if (err) {
		fprintf(stderr, "matmul_dsm: pmdsm_init: %s\n", pmdsm_strerror(err));
		return 1;
	}
	int rank = pmdsm_rank(), size = pmdsm_size();
	struct options o;
	int status = options_parse(&o, PROG_MATMUL, "dsm", argc, argv, rank == 0);

	if (status >= 0) {
		pmdsm_finalize();
		return status;
	}
	status = 0;

	uint64_t n = o.n, lo, hi;
	double *a = shared_matrix(n), *b = shared_matrix(n), *c = shared_matrix(n);

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

	if (rank == 0) {
		/* Rank 0 reads the whole result, fetching the other ranks' pages. */
		uint64_t sum = fnv1a64(c, n * n * sizeof *c);

		print_result(&o, size, t1 - t0, sum);
		if (o.check)
			status = check_checksum(sum, matmul_reference(&o));
	}
	if ((err = pmdsm_free(c)) < 0 || (err = pmdsm_free(b)) < 0 ||
	    (err = pmdsm_free(a)) < 0)
		fail("pmdsm_free: %s", pmdsm_strerror(err));
	if ((err = pmdsm_finalize()) < 0)
		fail("pmdsm_finalize: %s", pmdsm_strerror(err));
	return status;
}
