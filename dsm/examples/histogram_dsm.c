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
#include "dsm_common.h"
#include "kernels.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv)
{
	struct options o;
	int rank, size;
	int status = dsm_start(&o, PROG_HISTOGRAM, argc, argv, &rank, &size);

	if (status >= 0)
		return status;

	uint64_t max_tasks = histogram_max_tasks(o.items, o.chunk);
	uint32_t *items = dsm_shared(o.items * sizeof *items, "items");
	uint64_t *starts = dsm_shared((max_tasks + 1) * sizeof *starts, "task table");
	struct queue *queue = dsm_shared(sizeof *queue, "task queue");
	uint64_t *bins = dsm_shared(o.bins * sizeof *bins, "bins");
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

	status = 0;
	if (rank == 0) {
		uint64_t counted = 0;

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
		if (report_result(&o, size, t1 - t0, bins, o.bins * sizeof *bins,
		                  histogram_reference))
			status = 1;
	}
	free(local);
	dsm_free(bins);
	dsm_free(queue);
	dsm_free(starts);
	dsm_free(items);
	return dsm_finish(status);
}
