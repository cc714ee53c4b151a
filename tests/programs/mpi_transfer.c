/* SPDX-License-Identifier: MIT */
/*
 * mpi_transfer.c - an ordinary MPI program, nothing of PM in it: a token goes
 * round the ring of ranks, then every rank exchanges messages of growing
 * sizes (eager and rendezvous) with its neighbours and checks every byte,
 * then a few collectives.  Prints "mpi_transfer: N ranks passed" from rank 0
 * and exits non-zero on any mismatch.
 *
 *   mpi_transfer [--laps N] [--rounds N] [--max-size BYTES] [--linger-ms MS]
 *
 * --rounds repeats the exchange of every size (a longer job).
 * --linger-ms keeps every rank alive that long before MPI_Finalize, so that
 * a test can look at the transport's counters (pminfo) while they exist.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "mpi_transfer: rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fputc('\n', stderr); \
		failures++; \
	} \
} while (0)

static unsigned char pattern(int from, size_t i, size_t len)
{
	return (unsigned char)(from * 31 + i * 7 + len);
}

int main(int argc, char **argv)
{
	int rank, size, laps = 10, rounds = 1, linger_ms = 0;
	size_t max_size = 4u << 20;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--laps") && i + 1 < argc)
			laps = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--max-size") && i + 1 < argc)
			max_size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--linger-ms") && i + 1 < argc)
			linger_ms = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: mpi_transfer [--laps N] [--rounds N] [--max-size BYTES] [--linger-ms MS]\n");
			return 2;
		}
	}
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);

	int next = (rank + 1) % size, prev = (rank + size - 1) % size;

	/* 1. The token: each rank adds its rank, laps times round. */
	long token = 0;

	for (int lap = 0; lap < laps; lap++) {
		if (rank == 0) {
			MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
			MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			token += rank;
			MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
		}
	}
	if (rank == 0)
		CHECK(token == (long)laps * size * (size - 1) / 2, "token %ld", token);

	/* 2. Every size from 0 to max_size (powers of two and their neighbours),
	 * to the next rank and from the previous one at once. */
	unsigned char *out = malloc(max_size + 1), *in = malloc(max_size + 1);

	for (int round = 0; round < rounds; round++)
	for (size_t len = 0; len <= max_size; len = len < 4 ? len + 1 : len * 2) {
		size_t lens[3] = { len ? len - 1 : 0, len, len + 1 <= max_size ? len + 1 : len };

		for (int k = 0; k < 3; k++) {
			size_t n = lens[k];
			MPI_Request rq[2];
			MPI_Status st;
			int count;

			for (size_t i = 0; i < n; i++)
				out[i] = pattern(rank, i, n);
			memset(in, 0xee, n + 1);
			MPI_Irecv(in, (int)n + 1, MPI_BYTE, prev, 100 + k, MPI_COMM_WORLD, &rq[0]);
			MPI_Isend(out, (int)n, MPI_BYTE, next, 100 + k, MPI_COMM_WORLD, &rq[1]);
			MPI_Wait(&rq[1], MPI_STATUS_IGNORE);
			MPI_Wait(&rq[0], &st);
			MPI_Get_count(&st, MPI_BYTE, &count);
			CHECK((size_t)count == n, "size %zu: received %d bytes", n, count);
			CHECK(st.MPI_SOURCE == prev, "size %zu: source %d", n, st.MPI_SOURCE);
			for (size_t i = 0; i < n; i++)
				if (in[i] != pattern(prev, i, n)) {
					CHECK(0, "size %zu: byte %zu is %u", n, i, in[i]);
					break;
				}
			CHECK(in[n] == 0xee, "size %zu: wrote past the message", n);
		}
	}

	/* 2b. Persistent requests, started twice, of 0 and 1 bytes (MPICH
	 * posts these sends with fi_tsend, where it injects a plain empty
	 * send). */
	for (int n = 0; n <= 1; n++) {
		unsigned char o = (unsigned char)(rank + 1), i = 0xee;
		MPI_Request rq[2];
		MPI_Status st[2];
		int count;

		MPI_Recv_init(&i, 1, MPI_BYTE, prev, 200 + n, MPI_COMM_WORLD, &rq[0]);
		MPI_Send_init(&o, n, MPI_BYTE, next, 200 + n, MPI_COMM_WORLD, &rq[1]);
		for (int start = 0; start < 2; start++) {
			MPI_Startall(2, rq);
			MPI_Waitall(2, rq, st);
			MPI_Get_count(&st[0], MPI_BYTE, &count);
			CHECK(count == n, "persistent, %d bytes: received %d", n, count);
			CHECK(i == (n ? (unsigned char)(prev + 1) : 0xee),
			      "persistent, %d bytes: got %u", n, i);
		}
		MPI_Request_free(&rq[0]);
		MPI_Request_free(&rq[1]);
	}

	/* 3. Any-source receives: everyone sends to rank 0. */
	if (rank == 0) {
		long seen = 0;

		for (int i = 1; i < size; i++) {
			int v;
			MPI_Status st;

			MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &st);
			CHECK(v == st.MPI_SOURCE * 1000, "any-source: %d from %d", v, st.MPI_SOURCE);
			seen += st.MPI_SOURCE;
		}
		CHECK(seen == (long)size * (size - 1) / 2, "any-source: sum of sources %ld", seen);
	} else {
		int v = rank * 1000;

		MPI_Send(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD);
	}

	/* 4. Collectives over the same transport. */
	long sum = 0, mine = rank + 1;

	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	CHECK(sum == (long)size * (size + 1) / 2, "allreduce %ld", sum);
	MPI_Barrier(MPI_COMM_WORLD);

	int total;

	MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0 && total == 0)
		printf("mpi_transfer: %d ranks passed\n", size);
	fflush(stdout);
	if (linger_ms > 0)
		nanosleep(&(struct timespec){ linger_ms / 1000, (linger_ms % 1000) * 1000000L }, NULL);
	free(out);
	free(in);
	MPI_Finalize();
	return total ? 1 : 0;
}
