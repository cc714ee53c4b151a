/* SPDX-License-Identifier: MIT */
/*
 * jacobi_dsm.c - 2-D 5-point Jacobi stencil over libpmdsm (README.md).
 *
 * Both grids are shared (PMDSM_BLOCK: the pages of rank r's block of rows
 * have their home at rank r).  Every rank initialises and updates its own
 * block of rows; the rows just above and below it are read from the
 * neighbours' pages, fetched again at each barrier (the DSM's prefetch).
 * A barrier at the end of each sweep is the only synchronisation: it makes
 * the sweep's writes visible before anyone reads them, and keeps the next
 * sweep from overwriting what a slower rank still reads.  With
 * --neighbours it is a barrier with the two neighbours alone
 * (pmdsm_barrier_with), whose pushes bring their edge rows: the next sweep
 * writes the other grid, and the one after writes this one only once the
 * neighbours have met us again, done reading; a barrier of all after the
 * last sweep then shows rank 0 the whole grid.
 *
 * A sweep computes the rows that read only this rank's pages first and the
 * two that read a neighbour's row last, and asks the DSM not to wait for
 * those rows at the barrier (PMDSM_PREFETCH_OVERLAP): they cross the
 * network while the rest is computed.
 *
 *   scrun -nodes=2x2 jacobi_dsm [-n 512] [-i 100] [-s 1] [--neighbours] [--check]
 */
#include "common.h"
#include "dsm_common.h"
#include "kernels.h"

/* The rank whose block holds row i (block_range's blocks). */
static int row_owner(uint64_t n, int size, uint64_t i)
{
	uint64_t lo, hi;
	int r = 0;

	for (block_range(n, size, r, &lo, &hi); i >= hi; block_range(n, size, ++r, &lo, &hi))
		;
	return r;
}

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = dsm_start(&o, PROG_JACOBI, argc, argv, &rank, &size);

	if (status >= 0)
		return status;

	/* Only the two edge rows read the neighbours' pages, last. */
	int err = pmdsm_prefetch_mode(PMDSM_PREFETCH_OVERLAP);

	if (err)
		fail("pmdsm_prefetch_mode: %s", pmdsm_strerror(err));

	uint64_t n = o.n, lo, hi;
	double *a = dsm_shared(n * n * sizeof *a, "grid");
	double *b = dsm_shared(n * n * sizeof *b, "grid");

	block_range(n, size, rank, &lo, &hi);
	for (uint64_t i = lo; i < hi; i++) {
		grid_init_row(&a[i * n], n, o.seed, i);
		grid_init_row(&b[i * n], n, o.seed, i);
	}
	/* The rows this rank updates: its block without the boundary rows. */
	uint64_t first = lo > 1 ? lo : 1, last = hi < n - 1 ? hi : n - 1;
	/* Whom it meets after a sweep: the owners of the rows it reads
	 * beside its block, who read its edge rows (none for an empty block,
	 * N < ranks, and none such rank is anyone's neighbour). */
	int peers[2];
	unsigned npeers = 0;

	if (lo < hi && lo > 0)
		peers[npeers++] = row_owner(n, size, lo - 1);
	if (lo < hi && hi < n)
		peers[npeers++] = row_owner(n, size, hi);

	dsm_barrier();
	double t0 = now_seconds();
	double *cur = a, *next = b;
	for (uint64_t it = 0; it < o.iterations; it++) {
		/* The rows that read only this rank's pages, then the two
		 * that read a neighbour's row (in flight until then).  Split,
		 * the neighbours' rows are theirs to finish until the wait:
		 * the interior rows are computed while the meeting goes on. */
		for (uint64_t i = first + 1; i + 1 < last; i++)
			jacobi_row(&next[i * n], &cur[(i - 1) * n], &cur[i * n],
			           &cur[(i + 1) * n], n);
		if (o.split && it > 0)
			dsm_barrier_with_wait();
		if (first < last)
			jacobi_row(&next[first * n], &cur[(first - 1) * n], &cur[first * n],
			           &cur[(first + 1) * n], n);
		if (first + 1 < last)
			jacobi_row(&next[(last - 1) * n], &cur[(last - 2) * n], &cur[(last - 1) * n],
			           &cur[last * n], n);
		if (o.split)
			dsm_barrier_with_notify(peers, npeers);
		else if (o.neighbours)
			dsm_barrier_with(peers, npeers);
		else
			dsm_barrier();
		double *t = cur;
		cur = next;
		next = t;
	}
	if (o.split && o.iterations > 0)
		dsm_barrier_with_wait();
	if (o.neighbours || o.iterations == 0)
		dsm_barrier();
	double t1 = now_seconds();

	/* Rank 0 reads the whole result, fetching the other ranks' pages. */
	status = rank == 0 ? report_result(&o, size, t1 - t0, cur, n * n * sizeof *cur,
	                                   jacobi_reference)
	                   : 0;
	dsm_free(b);
	dsm_free(a);
	return dsm_finish(status);
}
