/* SPDX-License-Identifier: MIT */
/*
 * mpi_common.c - start-up, halo exchange and gathering of the MPI versions
 * of the example programs (mpi_common.h).
 */
#include "mpi_common.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>

static void mpi_abort(int status)
{
	MPI_Abort(MPI_COMM_WORLD, status);
}

int mpi_start(struct options *o, enum program p, bool row_per_rank,
              int *argc, char ***argv, int *rank, int *size)
{
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
	set_fail_hook(mpi_abort);

	int status = options_parse(o, p, "mpi", *argc, *argv, *rank == 0);

	if (status < 0 && row_per_rank && o->n < (uint64_t)*size) {
		if (*rank == 0)
			fprintf(stderr, "%s_mpi: --size %llu is less than the %d ranks: "
			        "each rank needs a row\n", o->name, (unsigned long long)o->n,
			        *size);
		status = 2;
	}
	if (status >= 0)
		MPI_Finalize();
	return status;
}

void halo_block_init(struct halo_block *b, uint64_t n, int rank, int size)
{
	b->n = n;
	block_range(n, size, rank, &b->lo, &b->hi);
	b->rows = b->hi - b->lo;
	b->first = b->lo == 0 ? 2 : 1;
	b->last = b->hi == n ? b->rows - 1 : b->rows;
	b->up = rank > 0 ? rank - 1 : MPI_PROC_NULL;
	b->down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
}

double *halo_grid(const struct halo_block *b, uint64_t seed)
{
	uint64_t n = b->n;
	double *g = xarray((b->rows + 2) * n, sizeof *g);

	for (uint64_t r = 1; r <= b->rows; r++)
		grid_init_row(&g[r * n], n, seed, b->lo + r - 1);
	return g;
}

void halo_exchange(double *g, const struct halo_block *b)
{
	uint64_t n = b->n, rows = b->rows;

	MPI_Sendrecv(&g[1 * n], (int)n, MPI_DOUBLE, b->up, 0,
	             &g[(rows + 1) * n], (int)n, MPI_DOUBLE, b->down, 0,
	             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	MPI_Sendrecv(&g[rows * n], (int)n, MPI_DOUBLE, b->down, 1,
	             &g[0], (int)n, MPI_DOUBLE, b->up, 1,
	             MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

void row_counts(uint64_t n, int size, int **counts, int **displs)
{
	*counts = xmalloc((size_t)size * sizeof **counts);
	*displs = xmalloc((size_t)size * sizeof **displs);
	for (int p = 0; p < size; p++) {
		uint64_t lo, hi;

		block_range(n, size, p, &lo, &hi);
		(*counts)[p] = (int)((hi - lo) * n);
		(*displs)[p] = (int)(lo * n);
	}
}

double *gather_rows(const double *mine, uint64_t rows, uint64_t n,
                    int rank, int size)
{
	int *counts = NULL, *displs = NULL;
	double *all = NULL;

	if (rank == 0) {
		row_counts(n, size, &counts, &displs);
		all = xmalloc(n * n * sizeof *all);
	}
	MPI_Gatherv(mine, (int)(rows * n), MPI_DOUBLE,
	            all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
	free(counts);
	free(displs);
	return all;
}
