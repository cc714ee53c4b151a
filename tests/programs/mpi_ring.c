/* SPDX-License-Identifier: MIT */
/*
 * mpi_ring.c - a small MPI program for the launch tests (tests/scored).
 *
 * Every rank checks what MPI tells it against what the launcher promised
 * (SCORE_RANK and SCORE_SIZE when scrun started it), adds up rank+1 over
 * all ranks with MPI_Allreduce, passes its rank to its right neighbour with
 * MPI_Sendrecv and prints one line:
 *
 *   mpi_ring rank=3 size=8 sum=36 left=2 host=n2 ok=1
 *
 * Exit status 0 when every check holds on this rank, 3 otherwise.
 * With "--abort R S", rank R calls MPI_Abort(MPI_COMM_WORLD, S) after the
 * allreduce, while the other ranks wait in a barrier.
 * Build: mpicc -O1 -o mpi_ring mpi_ring.c
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char *name, int fallback)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : fallback;
}

int main(int argc, char **argv)
{
	int rank, size, sum = 0, mine, left = -1, ok = 1, abort_rank = -1, abort_status = 0;
	char host[256] = "?";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	gethostname(host, sizeof host - 1);
	if (argc == 4 && strcmp(argv[1], "--abort") == 0) {
		abort_rank = atoi(argv[2]);
		abort_status = atoi(argv[3]);
	}

	if (env_int("SCORE_RANK", rank) != rank || env_int("SCORE_SIZE", size) != size)
		ok = 0;

	mine = rank + 1;
	MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (sum != size * (size + 1) / 2)
		ok = 0;

	if (rank == abort_rank) {
		fprintf(stderr, "mpi_ring rank=%d: aborting with status %d\n", rank, abort_status);
		MPI_Abort(MPI_COMM_WORLD, abort_status);
	}
	if (abort_rank >= 0)
		MPI_Barrier(MPI_COMM_WORLD);  /* never passes: the job is aborted */

	MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 7,
		     &left, 1, MPI_INT, (rank + size - 1) % size, 7,
		     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	if (left != (rank + size - 1) % size)
		ok = 0;

	MPI_Barrier(MPI_COMM_WORLD);
	printf("mpi_ring rank=%d size=%d sum=%d left=%d host=%s ok=%d\n",
	       rank, size, sum, left, host, ok);
	fflush(stdout);
	MPI_Finalize();
	return ok ? 0 : 3;
}
