/* SPDX-License-Identifier: MIT */
/*
 * jacobi_mpi.c - 2-D 5-point Jacobi stencil with MPI (README.md).
 *
 * Every rank holds its block of rows of both grids, with a halo row above
 * and below.  Before each sweep the ranks exchange their edge rows with
 * their neighbours (MPI_Sendrecv); after the last one rank 0 gathers the
 * grid for the checksum (outside the timed phase, like the DSM version's
 * reading of the shared grid).
 *
 *   mpirun -np 4 jacobi_mpi [-n 512] [-i 100] [-s 1] [--check]
 */
#include "common.h"
#include "kernels.h"
#include "mpi_common.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = mpi_start(&o, PROG_JACOBI, true, &argc, &argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t n = o.n;
	struct halo_block b;

	halo_block_init(&b, n, rank, size);
	/* Local row r (1..b.rows) is global row b.lo + r - 1. */
	double *cur = halo_grid(&b, o.seed), *next = halo_grid(&b, o.seed);

	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now_seconds();
	for (uint64_t it = 0; it < o.iterations; it++) {
		halo_exchange(cur, &b);
		for (uint64_t r = b.first; r <= b.last; r++)
			jacobi_row(&next[r * n], &cur[(r - 1) * n], &cur[r * n],
			           &cur[(r + 1) * n], n);
		double *t = cur;
		cur = next;
		next = t;
		/* --barrier: the DSM version's synchronisation, by messages. */
		if (o.barrier)
			MPI_Barrier(MPI_COMM_WORLD);
	}
	MPI_Barrier(MPI_COMM_WORLD);
	double t1 = now_seconds();

	/* The grid on rank 0, for the checksum. */
	double *grid = gather_rows(&cur[n], b.rows, n, rank, size);

	status = rank == 0 ? report_result(&o, size, t1 - t0, grid, n * n * sizeof *grid,
	                                   jacobi_reference)
	                   : 0;
	free(grid);
	xarray_free(cur);
	xarray_free(next);
	MPI_Finalize();
	return status;
}
