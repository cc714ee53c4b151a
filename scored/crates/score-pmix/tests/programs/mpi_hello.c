/* SPDX-License-Identifier: MIT */
/*
 * mpi_hello: the smallest real MPI job for score-pmix's tests.  Every rank
 * prints one line; rank 0 checks an allreduce and a ring exchange.
 *
 *   mpi_hello           normal run, exit 0 when everything checked out
 *   mpi_hello abort N   rank 1 (or 0 alone) calls MPI_Abort(MPI_COMM_WORLD, N)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	int rank, size, sum = 0, left, right, got = -1, ok;
	char host[MPI_MAX_PROCESSOR_NAME];
	int hlen;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Get_processor_name(host, &hlen);

	if (argc > 2 && strcmp(argv[1], "abort") == 0) {
		if (rank == (size > 1 ? 1 : 0)) {
			fprintf(stderr, "mpi_hello: rank %d aborting\n", rank);
			MPI_Abort(MPI_COMM_WORLD, atoi(argv[2]));
		}
		/* The others wait in a collective until the launcher kills them. */
		MPI_Barrier(MPI_COMM_WORLD);
		MPI_Finalize();
		return 0;
	}

	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	right = (rank + 1) % size;
	left = (rank + size - 1) % size;
	MPI_Sendrecv(&rank, 1, MPI_INT, right, 7, &got, 1, MPI_INT, left, 7, MPI_COMM_WORLD,
		     MPI_STATUS_IGNORE);
	ok = sum == size * (size - 1) / 2 && got == left;
	printf("mpi_hello rank %d of %d on %s: allreduce %d ring from %d %s\n", rank, size, host,
	       sum, got, ok ? "ok" : "WRONG");
	fflush(stdout);
	MPI_Finalize();
	return ok ? 0 : 1;
}
