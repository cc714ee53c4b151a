/* SPDX-License-Identifier: MIT */
/*
 * matmul_mpi.c - C = A x B with MPI (README.md).
 *
 * Every rank generates its block of rows of A and of B, as the DSM
 * version does in its home pages.  The timed phase moves what the DSM
 * version moves: every rank needs all of B, so the blocks of B are
 * gathered everywhere (MPI_Allgatherv); then every rank computes its rows
 * of C.  Rank 0 gathers C for the checksum afterwards (outside the timed
 * phase, like the DSM version's reading of the shared C).
 *
 *   mpirun -np 4 matmul_mpi [-n 256] [-s 1] [--check]
 */
#include "common.h"
#include "kernels.h"

#include <mpi.h>

#include <stdlib.h>

static void mpi_abort(int status)
{
	MPI_Abort(MPI_COMM_WORLD, status);
}

int main(int argc, char **argv)
{
	int rank, size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	set_fail_hook(mpi_abort);

	struct options o;
	int status = options_parse(&o, PROG_MATMUL, "mpi", argc, argv, rank == 0);

	if (status >= 0) {
		MPI_Finalize();
		return status;
	}
	status = 0;

	uint64_t n = o.n, lo, hi;
	block_range(n, size, rank, &lo, &hi);
	uint64_t rows = hi - lo;

	/* Every rank's block of rows, in elements: n * n < 2^31 (MAX_N). */
	int *counts = xmalloc((size_t)size * sizeof *counts);
	int *displs = xmalloc((size_t)size * sizeof *displs);
	for (int p = 0; p < size; p++) {
		uint64_t plo, phi;

		block_range(n, size, p, &plo, &phi);
		counts[p] = (int)((phi - plo) * n);
		displs[p] = (int)(plo * n);
	}

	/* a and c: this rank's rows; b: the whole matrix, this rank's rows
	 * at their place. */
	double *a = xmalloc((rows ? rows : 1) * n * sizeof *a);
	double *b = xmalloc(n * n * sizeof *b);
	double *c = xmalloc((rows ? rows : 1) * n * sizeof *c);
	for (uint64_t r = 0; r < rows; r++) {
		matrix_init_row(&a[r * n], n, o.seed, STREAM_A, lo + r);
		matrix_init_row(&b[(lo + r) * n], n, o.seed, STREAM_B, lo + r);
	}

	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now_seconds();
	MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL,
	               b, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
	for (uint64_t r = 0; r < rows; r++)
		matmul_row(&c[r * n], &a[r * n], b, n);
	MPI_Barrier(MPI_COMM_WORLD);
	double t1 = now_seconds();

	double *cc = rank == 0 ? xmalloc(n * n * sizeof *cc) : NULL;
	MPI_Gatherv(c, (int)(rows * n), MPI_DOUBLE,
	            cc, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);

	if (rank == 0) {
		uint64_t sum = fnv1a64(cc, n * n * sizeof *cc);

		print_result(&o, size, t1 - t0, sum);
		if (o.check)
			status = check_checksum(sum, matmul_reference(&o));
		free(cc);
	}
	free(a);
	free(b);
	free(c);
	free(counts);
	free(displs);
	MPI_Finalize();
	return status;
}
