/* SPDX-License-Identifier: MIT */
/*
 * mpi_peerdeath.c - a rank that dies must not leave another waiting for
 * ever.  2 ranks on one node: rank 1 exits at once without MPI_Finalize
 * (as a crash would, for the transport: nothing is closed); rank 0, with
 * MPI_ERRORS_RETURN, waits in MPI_Recv from rank 1 and must get an error.
 * Run under mpirun with `--mca orte_allowed_exit_without_sync 1` so that
 * mpirun itself lets rank 0 finish.  Rank 0 prints
 * "mpi_peerdeath: the receive failed (class N)" and exits 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, size, v = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		fprintf(stderr, "mpi_peerdeath: run with 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	/* Both have talked once, so the transport knows its peer. */
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 1)
		_exit(0);

	int err = MPI_Recv(&v, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE), cls = 0;

	MPI_Error_class(err, &cls);
	if (err == MPI_SUCCESS) {
		fprintf(stderr, "mpi_peerdeath: a receive from a dead rank succeeded\n");
		return 1;
	}
	printf("mpi_peerdeath: the receive failed (class %d)\n", cls);
	fflush(stdout);
	_exit(0);       /* MPI_Finalize would wait for the dead rank */
}
