/* SPDX-License-Identifier: MIT */
/*
 * ring_pass.c - the example of docs/pm/guide.md.
 *
 * Every rank passes a token to its right neighbour, ROUNDS times round the
 * ring, with PM's zero-copy messages; then every rank writes its rank into
 * rank 0's registered table with one-sided remote writes.  It ends as every
 * PM program must (docs/pm/guide.md): pm_close() does not wait for what
 * this rank sent to be taken, so rank 0 answers each writer's "done" with a
 * "bye", and a rank closes only once it has heard from the peers it sent
 * to and pm_quiesce() has seen its own last messages acknowledged.
 *
 *   mpirun -n 4 build/bin/pm-ring-pass        (or scrun, srun --mpi=pmix)
 */
#include <pm.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 1000
#define TIMEOUT_MS 10000

static void die(const char *what, int err)
{
	fprintf(stderr, "ring_pass: %s: %s\n", what, pm_strerror(err));
	exit(1);
}

/* Send len bytes to peer, waiting while its ring is full. */
static void send_bytes(pm_context_t *ctx, int peer, const void *data, size_t len)
{
	void *buf;
	int err;

	while ((err = pm_send_buffer(ctx, peer, len, &buf)) == -EAGAIN)
		if ((err = pm_wait(ctx, TIMEOUT_MS)) < 0)
			die("waiting for send space", err);
	if (err)
		die("pm_send_buffer", err);
	memcpy(buf, data, len);         /* fill it where the receiver reads it */
	if ((err = pm_send(ctx, peer, len)) < 0)
		die("pm_send", err);
}

/* Take the next message; the caller releases it. */
static void recv_msg(pm_context_t *ctx, struct pm_msg *msg)
{
	int err;

	while ((err = pm_recv(ctx, msg)) == -EAGAIN)
		if ((err = pm_wait(ctx, TIMEOUT_MS)) < 0)
			die("waiting for a message", err);
	if (err)
		die("pm_recv", err);
}

int main(void)
{
	pm_context_t *ctx;
	int err = pm_open(&ctx, NULL);

	if (err)
		die("pm_open", err);

	int rank = pm_rank(ctx), size = pm_size(ctx);
	int right = (rank + 1) % size;
	uint64_t token = 0;
	struct pm_msg msg;

	/* 1. Messages: rank 0 starts the token; everyone adds one and passes it. */
	for (int round = 0; round < ROUNDS; round++) {
		if (rank == 0) {
			send_bytes(ctx, right, &token, sizeof(token));
		}
		recv_msg(ctx, &msg);
		memcpy(&token, msg.data, sizeof(token));   /* read in place ... */
		pm_release(ctx, &msg);                     /* ... then give it back */
		token++;
		if (rank != 0)
			send_bytes(ctx, right, &token, sizeof(token));
	}
	if (rank == 0 && token != (uint64_t)ROUNDS * size) {
		fprintf(stderr, "ring_pass: token %llu, expected %llu\n",
			(unsigned long long)token, (unsigned long long)ROUNDS * size);
		return 1;
	}

	/* 2. Remote memory: rank 0 registers a table and sends its key to all. */
	int32_t *table = calloc((size_t)size, sizeof(*table));
	pm_mr_t *mr = NULL;
	uint64_t key;

	if (!table)
		die("calloc", -ENOMEM);
	if (rank == 0) {
		if ((err = pm_mr_register(ctx, table, (size_t)size * sizeof(*table), &mr)))
			die("pm_mr_register", err);
		key = pm_mr_key(mr);
		for (int peer = 1; peer < size; peer++)
			send_bytes(ctx, peer, &key, sizeof(key));
		table[0] = 0;
		/* Each writer says "done" with a message after its write. */
		for (int peer = 1; peer < size; peer++) {
			recv_msg(ctx, &msg);
			pm_release(ctx, &msg);
		}
		for (int i = 0; i < size; i++) {
			if (table[i] != i) {
				fprintf(stderr, "ring_pass: table[%d] = %d\n", i, table[i]);
				return 1;
			}
		}
		printf("ring_pass: %d ranks, token %llu after %d rounds, table complete\n",
		       size, (unsigned long long)token, ROUNDS);
		pm_mr_deregister(ctx, mr);
		/* Every "done" came: each writer may close once it has its bye. */
		for (int peer = 1; peer < size; peer++)
			send_bytes(ctx, peer, "", 1);
	} else {
		struct pm_op op;
		int32_t me = rank;

		recv_msg(ctx, &msg);
		memcpy(&key, msg.data, sizeof(key));
		pm_release(ctx, &msg);
		err = pm_write(ctx, 0, &me, sizeof(me), key, (uint64_t)rank * sizeof(me), &op);
		if (err)
			die("pm_write", err);
		while (!pm_test(ctx, &op))
			;
		if (op.status)
			die("remote write", op.status);
		send_bytes(ctx, 0, &me, sizeof(me));
		recv_msg(ctx, &msg);            /* the bye: rank 0 has our "done" */
		pm_release(ctx, &msg);
	}
	free(table);
	/* Until our last messages are acknowledged (nobody refuses them now:
	 * their receivers are waiting for them). */
	if ((err = pm_quiesce(ctx)) < 0)
		die("pm_quiesce", err);
	pm_close(ctx);
	return 0;
}
