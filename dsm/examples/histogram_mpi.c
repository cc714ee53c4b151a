/* SPDX-License-Identifier: MIT */
/*
 * histogram_mpi.c - histogram of generated items with MPI (README.md).
 *
 * The same tasks as the DSM version, handed out statically: task t to
 * rank t % size.  Every rank generates the items of its own tasks, counts
 * them into a local histogram, and MPI_Reduce sums the histograms on
 * rank 0.
 *
 *   mpirun -np 4 histogram_mpi [-m 1000000] [-k 256] [-c 10000] [-s 1] [--check]
 */
#include "common.h"
#include "kernels.h"
#include "mpi_common.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = mpi_start(&o, PROG_HISTOGRAM, false, &argc, &argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t *starts = xarray(histogram_max_tasks(o.items, o.chunk) + 1, sizeof *starts);
	uint64_t ntasks = histogram_tasks(o.seed, o.items, o.chunk, starts);

	/* This rank's items: those of its tasks, one after the other. */
	uint64_t mine = 0;
	for (uint64_t t = (uint64_t)rank; t < ntasks; t += (uint64_t)size)
		mine += starts[t + 1] - starts[t];
	uint32_t *items = xarray(mine, sizeof *items);
	uint64_t at = 0;
	for (uint64_t t = (uint64_t)rank; t < ntasks; t += (uint64_t)size)
		for (uint64_t i = starts[t]; i < starts[t + 1]; i++)
			items[at++] = item_value(o.seed, i);

	uint64_t *local = xcalloc(o.bins, sizeof *local);
	uint64_t *hist = rank == 0 ? xcalloc(o.bins, sizeof *hist) : NULL;

	MPI_Barrier(MPI_COMM_WORLD);
	double t0 = now_seconds();
	at = 0;
	for (uint64_t t = (uint64_t)rank; t < ntasks; t += (uint64_t)size) {
		histogram_count(&items[at], starts[t + 1] - starts[t], o.bins, local);
		at += starts[t + 1] - starts[t];
	}
	MPI_Reduce(local, hist, (int)o.bins, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Barrier(MPI_COMM_WORLD);
	double t1 = now_seconds();

	status = rank == 0 ? report_result(&o, size, t1 - t0, hist, o.bins * sizeof *hist,
	                                   histogram_reference)
	                   : 0;
	free(hist);
	free(local);
	xarray_free(items);
	xarray_free(starts);
	MPI_Finalize();
	return status;
}
