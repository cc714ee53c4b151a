/* SPDX-License-Identifier: MIT */
/*
 * sor_mpi.c - red-black successive over-relaxation with MPI (README.md).
 *
 * Every rank holds its block of rows with a halo row above and below.
 * Before each colour's sweep the ranks exchange their edge rows
 * (MPI_Sendrecv): the red sweep needs the black values of the rows next
 * to the block, and the black sweep the red ones just computed.  After
 * the last sweep rank 0 gathers the grid for the checksum (outside the
 * timed phase).
 *
 *   mpirun -np 4 sor_mpi [-n 512] [-i 100] [-w 1.5] [-s 1] [--check]
 */
#include "common.h"
#include "kernels.h"
#include "mpi_common.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = mpi_start(&o, PROG_SOR, true, &argc, &argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t n = o.n;
	struct halo_block b;

	halo_block_init(&b, n, rank, size);
	/* Local row r (1..b.rows) is global row b.lo + r - 1. */
	double *g = halo_grid(&b, o.seed);

	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now_seconds();
	for (uint64_t it = 0; it < o.iterations; it++) {
		for (unsigned colour = 0; colour < 2; colour++) {
			halo_exchange(g, &b);
			for (uint64_t r = b.first; r <= b.last; r++)
				sor_row(&g[r * n], &g[(r - 1) * n], &g[(r + 1) * n], n,
				        b.lo + r - 1, colour, o.omega);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	double t1 = now_seconds();

	/* The grid on rank 0, for the checksum. */
	double *grid = gather_rows(&g[n], b.rows, n, rank, size);

	status = rank == 0 ? report_result(&o, size, t1 - t0, grid, n * n * sizeof *grid,
	                                   sor_reference)
	                   : 0;
	free(grid);
	xarray_free(g);
	MPI_Finalize();
	return status;
}
