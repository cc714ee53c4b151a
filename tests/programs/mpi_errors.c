/* SPDX-License-Identifier: MIT */
/*
 * mpi_errors.c - what an MPI program sees of the transport's edge cases,
 * on 2 ranks; nothing of PM in it.  Rank 0 sends, rank 1 checks:
 *
 *   truncate   a message longer than the receive buffer (eager and large
 *              sizes) fails the receive with MPI_ERR_TRUNCATE, and the
 *              next message still arrives intact;
 *   cancel     a posted receive that nothing matches is cancelled
 *              (MPI_Test_cancelled says so), and a later one still works;
 *   probe      MPI_Iprobe finds nothing before the message and the right
 *              source, tag and count after; MPI_Mprobe + MPI_Mrecv take it;
 *   ssend      MPI_Ssend of small and large messages completes.
 *
 * Prints "mpi_errors: passed" from rank 1; exits non-zero on any failure.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "mpi_errors: rank %d: line %d: ", rank, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		failures++; \
	} \
} while (0)

static const int sizes[] = { 64, 100000 };  /* eager, and large (rendezvous) */

static void truncate_case(char *buf)
{
	for (int i = 0; i < 2; i++) {
		int n = sizes[i];

		if (rank == 0) {
			memset(buf, 'a' + i, (size_t)n);
			MPI_Send(buf, n, MPI_CHAR, 1, 10 + i, MPI_COMM_WORLD);
			MPI_Send(buf, 8, MPI_CHAR, 1, 20 + i, MPI_COMM_WORLD);
		} else {
			MPI_Status st;
			int err = MPI_Recv(buf, n / 2, MPI_CHAR, 0, 10 + i, MPI_COMM_WORLD, &st);
			int cls = -1;

			MPI_Error_class(err, &cls);
			CHECK(cls == MPI_ERR_TRUNCATE, "size %d: error class %d, want MPI_ERR_TRUNCATE",
			      n, cls);
			memset(buf, 0, 8);
			err = MPI_Recv(buf, 8, MPI_CHAR, 0, 20 + i, MPI_COMM_WORLD, &st);
			CHECK(err == MPI_SUCCESS && buf[0] == 'a' + i && buf[7] == 'a' + i,
			      "size %d: the message after the truncated one: err %d, '%c'", n, err,
			      buf[0]);
		}
	}
}

static void cancel_case(void)
{
	if (rank == 1) {
		int v = 0, cancelled = 0;
		MPI_Request rq;
		MPI_Status st;

		MPI_Irecv(&v, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, &rq);
		MPI_Cancel(&rq);
		MPI_Wait(&rq, &st);
		MPI_Test_cancelled(&st, &cancelled);
		CHECK(cancelled, "the receive was not cancelled");
	}
	MPI_Barrier(MPI_COMM_WORLD);
	int v = 41;

	if (rank == 0) {
		v = 42;
		MPI_Send(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD);
	} else {
		MPI_Recv(&v, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		CHECK(v == 42, "after a cancel: got %d", v);
	}
}

static void probe_case(char *buf)
{
	for (int i = 0; i < 2; i++) {
		int n = sizes[i], flag = 1, count = -1;
		MPI_Status st;

		if (rank == 1) {
			MPI_Iprobe(0, 30 + i, MPI_COMM_WORLD, &flag, &st);
			CHECK(!flag, "size %d: Iprobe found a message not yet sent", n);
		}
		MPI_Barrier(MPI_COMM_WORLD);
		if (rank == 0) {
			memset(buf, 'p', (size_t)n);
			MPI_Send(buf, n, MPI_CHAR, 1, 30 + i, MPI_COMM_WORLD);
			MPI_Send(buf, n, MPI_CHAR, 1, 40 + i, MPI_COMM_WORLD);
		} else {
			MPI_Probe(MPI_ANY_SOURCE, 30 + i, MPI_COMM_WORLD, &st);
			MPI_Get_count(&st, MPI_CHAR, &count);
			CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 30 + i && count == n,
			      "size %d: probe saw source %d tag %d count %d", n, st.MPI_SOURCE,
			      st.MPI_TAG, count);
			MPI_Recv(buf, n, MPI_CHAR, 0, 30 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

			MPI_Message msg;

			MPI_Mprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &msg, &st);
			MPI_Get_count(&st, MPI_CHAR, &count);
			CHECK(st.MPI_TAG == 40 + i && count == n, "size %d: mprobe tag %d count %d", n,
			      st.MPI_TAG, count);
			memset(buf, 0, (size_t)n);
			MPI_Mrecv(buf, n, MPI_CHAR, &msg, &st);
			CHECK(buf[0] == 'p' && buf[n - 1] == 'p', "size %d: mrecv data", n);
		}
	}
}

static void ssend_case(char *buf)
{
	for (int i = 0; i < 2; i++) {
		if (rank == 0)
			MPI_Ssend(buf, sizes[i], MPI_CHAR, 1, 50 + i, MPI_COMM_WORLD);
		else
			MPI_Recv(buf, sizes[i], MPI_CHAR, 0, 50 + i, MPI_COMM_WORLD,
				 MPI_STATUS_IGNORE);
	}
}

int main(int argc, char **argv)
{
	int size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_errors: run with 2 ranks\n");
		MPI_Finalize();
		return 2;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

	char *buf = malloc(200000);

	truncate_case(buf);
	cancel_case();
	probe_case(buf);
	ssend_case(buf);

	int total;

	MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 1 && total == 0)
		printf("mpi_errors: passed\n");
	free(buf);
	MPI_Finalize();
	return total ? 1 : 0;
}
