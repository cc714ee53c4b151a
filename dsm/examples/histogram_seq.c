/* SPDX-License-Identifier: MIT */
/*
 * histogram_seq.c - histogram of generated items, sequential version: the
 * reference of histogram_dsm and histogram_mpi (README.md).  It counts the
 * tasks one after the other, as one rank of the parallel versions would.
 *
 *   histogram_seq [-m 1000000] [-k 256] [-c 10000] [-s 1]
 */
#include "common.h"
#include "kernels.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	struct options o;
	int status = options_parse(&o, PROG_HISTOGRAM, "seq", argc, argv, true);

	if (status >= 0)
		return status;

	uint32_t *items = xarray(o.items, sizeof *items);
	uint64_t *starts = xarray(histogram_max_tasks(o.items, o.chunk) + 1, sizeof *starts);
	uint64_t *hist = xarray(o.bins, sizeof *hist);

	for (uint64_t i = 0; i < o.items; i++)
		items[i] = item_value(o.seed, i);
	uint64_t ntasks = histogram_tasks(o.seed, o.items, o.chunk, starts);

	double t0 = now_seconds();
	for (uint64_t t = 0; t < ntasks; t++)
		histogram_count(&items[starts[t]], starts[t + 1] - starts[t], o.bins, hist);
	double t1 = now_seconds();

	print_result(&o, 1, t1 - t0, fnv1a64(hist, o.bins * sizeof *hist));
	xarray_free(items);
	xarray_free(starts);
	xarray_free(hist);
	return 0;
}
