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
#include "mpi_common.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = mpi_start(&o, PROG_MATMUL, false, &argc, &argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t n = o.n, lo, hi;
	block_range(n, size, rank, &lo, &hi);
	uint64_t rows = hi - lo;

	/* Every rank's block of rows, for the MPI_Allgatherv of B. */
	int *counts, *displs;
	row_counts(n, size, &counts, &displs);

	/* a and c: this rank's rows; b: the whole matrix, this rank's rows
	 * at their place. */
	double *a = xarray(rows * n, sizeof *a);
	double *b = xarray(n * n, sizeof *b);
	double *c = xarray(rows * n, sizeof *c);
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

	/* C on rank 0, for the checksum. */
	double *cc = gather_rows(c, rows, n, rank, size);

	status = rank == 0 ? report_result(&o, size, t1 - t0, cc, n * n * sizeof *cc,
	                                   matmul_reference)
	                   : 0;
	free(cc);
	xarray_free(a);
	xarray_free(b);
	xarray_free(c);
	free(counts);
	free(displs);
	MPI_Finalize();
	return status;
}
