/* SPDX-License-Identifier: MIT */
/*
 * histogram_dsm.c - histogram of generated items over libpmdsm: the
 * irregular program, with fine-grain sharing under locks (README.md).
 *
 * Shared: the items (PMDSM_BLOCK, each rank generates its block), the
 * task table (rank 0 cuts the items into tasks of irregular size), a task
 * queue (the index of the next task, and what the ranks did) and the
 * histogram's bins.  After a barrier:
 *
 *  - every rank takes tasks from the queue under TASK_LOCK, one at a time,
 *    and counts their items into a private histogram: which items a rank
 *    reads depends on who was faster, so it reads other ranks' pages;
 *  - then it adds its counts into the shared bins, a group of
 *    BINS_PER_LOCK bins under one lock, starting at a different group on
 *    every rank; bins of several groups share a page, which several ranks
 *    then write at once under different locks;
 *  - and adds the number of items and tasks it did into the queue.
 *
 * A barrier ends the computation; rank 0 then checks that every item and
 * task was counted once and reads the bins.  Every value that passes from
 * one rank to another in the counting phase passes through a lock: the
 * queue's index, the bins' partial sums.
 *
 *   scrun -nodes=2x2 histogram_dsm [-m 1000000] [-k 256] [-c 10000] [-s 1] [--check]
 */
#include "common.h"
#include "kernels.h"

#include <pmdsm.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lock of the task queue; the others guard the bins. */
#define TASK_LOCK (PMDSM_LOCKS - 1)
#define BIN_LOCKS (PMDSM_LOCKS - 1)
#define BINS_PER_LOCK 16

struct queue {
	uint64_t ntasks;           /* written by rank 0 before the first barrier */
	uint64_t next;             /* the next task to take: under TASK_LOCK */
	uint64_t tasks_done;       /* sums of what the ranks did: under TASK_LOCK */
	uint64_t items_done;
};

static void dsm_barrier(void)
{
	int err = pmdsm_barrier();

	if (err)
		fail("pmdsm_barrier: %s", pmdsm_strerror(err));
}

static void dsm_lock(unsigned l)
{
	int err = pmdsm_lock(l);

	if (err)
		fail("pmdsm_lock(%u): %s", l, pmdsm_strerror(err));
}

static void dsm_unlock(unsigned l)
{
	int err = pmdsm_unlock(l);

	if (err)
		fail("pmdsm_unlock(%u): %s", l, pmdsm_strerror(err));
}

static void *shared(uint64_t bytes, const char *what)
{
	void *p = pmdsm_malloc(bytes);

	if (!p)
		fail("pmdsm_malloc of %" PRIu64 " bytes for the %s: %s "
		     "(the heap's size is PMDSM_HEAP_SIZE)", bytes, what, strerror(errno));
	return p;
}

int main(int argc, char **argv)
{
	int err = pmdsm_init(NULL);

	if (err) {
		fprintf(stderr, "histogram_dsm: pmdsm_init: %s\n", pmdsm_strerror(err));
		return 1;
	}
	int rank = pmdsm_rank(), size = pmdsm_size();
	struct options o;
	int status = options_parse(&o, PROG_HISTOGRAM, "dsm", argc, argv, rank == 0);

	if (status >= 0) {
		pmdsm_finalize();
		return status;
	}
	status = 0;

	uint64_t max_tasks = histogram_max_tasks(o.items, o.chunk);
	uint32_t *items = shared(o.items * sizeof *items, "items");
	uint64_t *starts = shared((max_tasks + 1) * sizeof *starts, "task table");
	struct queue *queue = shared(sizeof *queue, "task queue");
	uint64_t *bins = shared(o.bins * sizeof *bins, "bins");
	uint64_t *local = xcalloc(o.bins, sizeof *local);
	uint64_t groups = (o.bins + BINS_PER_LOCK - 1) / BINS_PER_LOCK;
	uint64_t lo, hi;

	block_range(o.items, size, rank, &lo, &hi);
	for (uint64_t i = lo; i < hi; i++)
		items[i] = item_value(o.seed, i);
	if (rank == 0)
		queue->ntasks = histogram_tasks(o.seed, o.items, o.chunk, starts);

	dsm_barrier();
	double t0 = now_seconds();
	uint64_t ntasks = queue->ntasks, my_tasks = 0, my_items = 0;
	for (;;) {
		uint64_t t;

		dsm_lock(TASK_LOCK);
		t = queue->next;
		if (t < ntasks)
			queue->next = t + 1;
		dsm_unlock(TASK_LOCK);
		if (t >= ntasks)
			break;
		histogram_count(&items[starts[t]], starts[t + 1] - starts[t], o.bins, local);
		my_tasks++;
		my_items += starts[t + 1] - starts[t];
	}
	/* Into the shared bins, group by group, each rank starting elsewhere
	 * so that the ranks do not queue for the same lock. */
	for (uint64_t k = 0; k < groups; k++) {
		uint64_t g = (k + groups * (uint64_t)rank / (uint64_t)size) % groups;
		uint64_t b_end = (g + 1) * BINS_PER_LOCK < o.bins ? (g + 1) * BINS_PER_LOCK : o.bins;
		unsigned l = (unsigned)(g % BIN_LOCKS);

		dsm_lock(l);
		for (uint64_t b = g * BINS_PER_LOCK; b < b_end; b++)
			bins[b] += local[b];
		dsm_unlock(l);
	}
	dsm_lock(TASK_LOCK);
	queue->tasks_done += my_tasks;
	queue->items_done += my_items;
	dsm_unlock(TASK_LOCK);
	dsm_barrier();
	double t1 = now_seconds();

	if (rank == 0) {
		uint64_t sum = fnv1a64(bins, o.bins * sizeof *bins), counted = 0;

		for (uint64_t b = 0; b < o.bins; b++)
			counted += bins[b];
		if (queue->tasks_done != ntasks || queue->items_done != o.items ||
		    counted != o.items) {
			fprintf(stderr, "histogram_dsm: lost updates: the ranks did %" PRIu64
			        " of %" PRIu64 " tasks, %" PRIu64 " of %" PRIu64 " items, "
			        "and the bins hold %" PRIu64 "\n", queue->tasks_done, ntasks,
			        queue->items_done, o.items, counted);
			status = 1;
		}
		print_result(&o, size, t1 - t0, sum);
		if (o.check && check_checksum(sum, histogram_reference(&o)))
			status = 1;
	}
	free(local);
	if ((err = pmdsm_free(bins)) < 0 || (err = pmdsm_free(queue)) < 0 ||
	    (err = pmdsm_free(starts)) < 0 || (err = pmdsm_free(items)) < 0)
		fail("pmdsm_free: %s", pmdsm_strerror(err));
	if ((err = pmdsm_finalize()) < 0)
		fail("pmdsm_finalize: %s", pmdsm_strerror(err));
	return status;
}
