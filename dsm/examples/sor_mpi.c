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

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

static void mpi_abort(int status)
{
	MPI_Abort(MPI_COMM_WORLD, status);
}

/* Exchange the edge rows of g (rows 1..rows, halos 0 and rows + 1). */
static void exchange_halos(double *g, uint64_t rows, uint64_t n, int up, int down)
{
	MPI_Sendrecv(&g[1 * n], (int)n, MPI_DOUBLE, up, 0,
	             &g[(rows + 1) * n], (int)n, MPI_DOUBLE, down, 0,
	             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	MPI_Sendrecv(&g[rows * n], (int)n, MPI_DOUBLE, down, 1,
	             &g[0], (int)n, MPI_DOUBLE, up, 1,
	             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv)
{
	int rank, size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	set_fail_hook(mpi_abort);

	struct options o;
	int status = options_parse(&o, PROG_SOR, "mpi", argc, argv, rank == 0);

	if (status < 0 && o.n < (uint64_t)size) {
		if (rank == 0)
			fprintf(stderr, "sor_mpi: --size %llu is less than the %d ranks: "
			        "each rank needs a row\n", (unsigned long long)o.n, size);
		status = 2;
	}
	if (status >= 0) {
		MPI_Finalize();
		return status;
	}
	status = 0;

	uint64_t n = o.n, lo, hi;
	block_range(n, size, rank, &lo, &hi);
	uint64_t rows = hi - lo;
	int up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
	int down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;

	/* Local row r (1..rows) is global row lo + r - 1. */
	double *g = xcalloc((rows + 2) * n, sizeof *g);
	for (uint64_t r = 1; r <= rows; r++)
		grid_init_row(&g[r * n], n, o.seed, lo + r - 1);
	/* The local rows this rank updates: not the grid's boundary rows. */
	uint64_t first = lo == 0 ? 2 : 1, last = hi == n ? rows - 1 : rows;

	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now_seconds();
	for (uint64_t it = 0; it < o.iterations; it++) {
		for (unsigned colour = 0; colour < 2; colour++) {
			exchange_halos(g, rows, n, up, down);
			for (uint64_t r = first; r <= last; r++)
				sor_row(&g[r * n], &g[(r - 1) * n], &g[(r + 1) * n], n,
				        lo + r - 1, colour, o.omega);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	double t1 = now_seconds();

	/* Gather the grid on rank 0: n * n < 2^31 (MAX_N), so counts fit int. */
	int *counts = NULL, *displs = NULL;
	double *grid = NULL;
	if (rank == 0) {
		counts = xmalloc((size_t)size * sizeof *counts);
		displs = xmalloc((size_t)size * sizeof *displs);
		for (int p = 0; p < size; p++) {
			uint64_t plo, phi;

			block_range(n, size, p, &plo, &phi);
			counts[p] = (int)((phi - plo) * n);
			displs[p] = (int)(plo * n);
		}
		grid = xmalloc(n * n * sizeof *grid);
	}
	MPI_Gatherv(&g[n], (int)(rows * n), MPI_DOUBLE,
	            grid, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);

	if (rank == 0) {
		uint64_t sum = fnv1a64(grid, n * n * sizeof *grid);

		print_result(&o, size, t1 - t0, sum);
		if (o.check)
			status = check_checksum(sum, sor_reference(&o));
		free(grid);
		free(counts);
		free(displs);
	}
	free(g);
	MPI_Finalize();
	return status;
}
