/* SPDX-License-Identifier: MIT */
/*
 * mpi_onesided.c - an ordinary MPI program with one-sided communication,
 * nothing of PM in it: every rank puts blocks into its next neighbour's
 * window (fences between epochs), gets them back from its previous one,
 * and all accumulate into rank 0; every byte is checked.  Under MPICH over
 * a libfabric provider without FI_RMA this all travels as MPICH's active
 * messages (FI_MSG into FI_MULTI_RECV buffers): --rounds sends enough of
 * them (8 KiB each) to use up and repost those buffers several times.  The
 * puts stay below MPICH's 16 KiB active-message eager size: its path for
 * longer ones without FI_RMA crashes inside MPICH 5.0.2, with libfabric's
 * tcp provider as with pm (MPIR_CVAR_CH4_OFI_ENABLE_RMA=0).
 * Then passive target: every rank fetch-and-adds into rank 0 under
 * MPI_Win_lock_all, its fetched values rising, the total exact (under
 * Open MPI's osc rdma over btl ofi these are the provider's atomics).
 * --linger-ms keeps the ranks alive that long before MPI_Finalize, for a
 * look at their PM counters.  Prints "mpi_onesided: N ranks passed" from
 * rank 0; exits non-zero on any mismatch.
 *
 *   mpi_onesided [--rounds N] [--linger-ms MS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 2048              /* ints a put: 8 KiB */
#define BLOCKS 16               /* in a window */

static int rank, failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "mpi_onesided: rank %d: line %d: ", rank, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		failures++; \
	} \
} while (0)

static int value(int from, int round, int i)
{
	return from * 1000003 + round * 7919 + i;
}

int main(int argc, char **argv)
{
	int size, rounds = 40, linger_ms = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc) {
			rounds = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--linger-ms") && i + 1 < argc) {
			linger_ms = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: mpi_onesided [--rounds N] [--linger-ms MS]\n");
			return 2;
		}
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);

	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	int *win_buf = calloc(BLOCK * BLOCKS, sizeof(int));
	int *out = malloc(BLOCK * BLOCKS * sizeof(int)), *back = malloc(BLOCK * sizeof(int));
	long acc = 0;
	MPI_Win win, acc_win;

	MPI_Win_create(win_buf, BLOCK * BLOCKS * sizeof(int), sizeof(int), MPI_INFO_NULL,
		       MPI_COMM_WORLD, &win);
	MPI_Win_create(&acc, sizeof(acc), sizeof(acc), MPI_INFO_NULL, MPI_COMM_WORLD, &acc_win);

	for (int round = 0; round < rounds; round++) {
		/* 1. Puts: BLOCKS blocks into the next rank's window. */
		for (int i = 0; i < BLOCK * BLOCKS; i++)
			out[i] = value(rank, round, i);
		MPI_Win_fence(0, win);
		for (int b = 0; b < BLOCKS; b++)
			MPI_Put(out + b * BLOCK, BLOCK, MPI_INT, next, b * BLOCK, BLOCK, MPI_INT, win);
		MPI_Win_fence(0, win);
		for (int i = 0; i < BLOCK * BLOCKS; i++)
			if (win_buf[i] != value(prev, round, i)) {
				CHECK(0, "round %d: put: int %d is %d", round, i, win_buf[i]);
				break;
			}
		/* 2. A get of one block of the previous rank's window, which
		 * holds what its own previous rank put. */
		int from = (prev + size - 1) % size, b = round % BLOCKS;

		MPI_Get(back, BLOCK, MPI_INT, prev, b * BLOCK, BLOCK, MPI_INT, win);
		MPI_Win_fence(0, win);
		for (int i = 0; i < BLOCK; i++)
			if (back[i] != value(from, round, b * BLOCK + i)) {
				CHECK(0, "round %d: get: int %d is %d", round, i, back[i]);
				break;
			}
		/* 3. Everyone adds its rank + 1 into rank 0. */
		long mine = rank + 1;

		MPI_Win_fence(0, acc_win);
		MPI_Accumulate(&mine, 1, MPI_LONG, 0, 0, 1, MPI_LONG, MPI_SUM, acc_win);
		MPI_Win_fence(0, acc_win);
	}
	if (rank == 0)
		CHECK(acc == (long)rounds * size * (size + 1) / 2, "accumulated %ld", acc);

	/* 4. Passive target: fetch-and-add into rank 0, no fence. */
	long one = 1, got, last = -1;

	MPI_Win_fence(0, acc_win);
	if (rank == 0)
		acc = 0;
	MPI_Win_fence(0, acc_win);
	MPI_Win_lock_all(0, acc_win);
	for (int i = 0; i < rounds; i++) {
		MPI_Fetch_and_op(&one, &got, MPI_LONG, 0, 0, MPI_SUM, acc_win);
		MPI_Win_flush(0, acc_win);
		CHECK(got > last && got < (long)rounds * size, "fetch-and-add %d gave %ld after %ld",
		      i, got, last);
		last = got;
	}
	MPI_Win_unlock_all(acc_win);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Win_fence(0, acc_win);
	if (rank == 0)
		CHECK(acc == (long)rounds * size, "fetched and added %ld", acc);
	if (linger_ms > 0)
		nanosleep(&(struct timespec){ linger_ms / 1000, (linger_ms % 1000) * 1000000L }, NULL);

	MPI_Win_free(&acc_win);
	MPI_Win_free(&win);

	int total;

	MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && total == 0)
		printf("mpi_onesided: %d ranks passed\n", size);
	free(win_buf);
	free(out);
	free(back);
	MPI_Finalize();
	return total ? 1 : 0;
}
