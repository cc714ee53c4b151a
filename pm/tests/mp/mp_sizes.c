/* SPDX-License-Identifier: MIT */
/*
 * mp_sizes.c - every message size boundary, between two processes.
 *
 * Sizes 0, 1, 15, 16, 17, 63, 64, 65, max-1 and max (max =
 * pm_max_message()) go from one rank to the other many times over, with
 * fillers of varying size in between so that each boundary size lands at
 * many ring offsets (and across the ring's end).  Every byte is checked.
 * max+1 and larger are refused with -EMSGSIZE, and leave nothing
 * outstanding.  Then the roles swap.  The ring size comes from
 * PM_SHM_RING_KIB (meson runs this test with the smallest ring and with
 * the default).
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>

#define ROUNDS 40

static size_t sizes(size_t max, size_t *out)
{
	const size_t fixed[] = { 0, 1, 15, 16, 17, 63, 64, 65 };
	size_t n = 0;

	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		out[n++] = fixed[i];
	out[n++] = max - 1;
	out[n++] = max;
	return n;
}

/* The sequence both sides agree on: boundary sizes with fillers. */
static size_t len_at(uint64_t i, size_t max)
{
	size_t s[16];
	size_t n = sizes(max, s);
	uint64_t k = i / 2;

	if (i % 2 == 1)
		return (size_t)((k * 37) % 300);       /* filler */
	return s[k % n];
}

static void misuse(struct mp *m, int peer, size_t max)
{
	void *buf, *buf2;

	CHECK_ERR(pm_send_buffer(m->ctx, peer, max + 1, &buf), -EMSGSIZE);
	CHECK_ERR(pm_send_buffer(m->ctx, peer, max + 64, &buf), -EMSGSIZE);
	CHECK_ERR(pm_send_buffer(m->ctx, peer, SIZE_MAX, &buf), -EMSGSIZE);
	CHECK_ERR(pm_send_buffer(m->ctx, peer, (size_t)UINT32_MAX + 1, &buf), -EMSGSIZE);
	/* Refusals leave no buffer outstanding. */
	CHECK_ERR(pm_send(m->ctx, peer, 0), -EINVAL);
	/* Wrong peers. */
	CHECK_ERR(pm_send_buffer(m->ctx, m->size, 1, &buf), -EINVAL);
	CHECK_ERR(pm_send_buffer(m->ctx, -1, 1, &buf), -EINVAL);
	CHECK_EQ(pm_max_message(m->ctx, m->size), 0);
	CHECK_EQ(pm_max_message(m->ctx, -1), 0);
	/* One buffer per peer at a time; sending more than asked is refused;
	 * sending less shrinks the message (the receiver sees 17 bytes). */
	int err;

	while ((err = pm_send_buffer(m->ctx, peer, max, &buf)) == -EAGAIN)
		mp_progress(m, "waiting for send space");
	CHECK_OK(err);
	CHECK_ERR(pm_send_buffer(m->ctx, peer, 1, &buf2), -EBUSY);
	CHECK_ERR(pm_send(m->ctx, peer, max + 1), -EMSGSIZE);
	check_fill(buf, 17, 4242);
	CHECK_OK(pm_send(m->ctx, peer, 17));
	CHECK_ERR(pm_send(m->ctx, peer, 17), -EINVAL);
}

static void send_all(struct mp *m, int peer, uint64_t base)
{
	size_t max = pm_max_message(m->ctx, peer);
	size_t s[16];
	uint64_t count = 2 * ROUNDS * sizes(max, s);

	misuse(m, peer, max);
	for (uint64_t i = 0; i < count; i++)
		mp_send_pattern(m, peer, len_at(i, max), base + i);
}

static void recv_all(struct mp *m, int peer, uint64_t base)
{
	size_t max = pm_max_message(m->ctx, peer);
	size_t s[16];
	uint64_t count = 2 * ROUNDS * sizes(max, s);
	struct pm_msg msg;

	mp_recv(m, &msg);
	CHECK_EQ(msg.peer, peer);
	CHECK_EQ(msg.len, 17);
	CHECK_PATTERN(msg.data, 17, 4242);
	mp_release(m, &msg);
	for (uint64_t i = 0; i < count; i++) {
		mp_recv(m, &msg);
		CHECK_EQ(msg.peer, peer);
		CHECK_MSG(msg.len == len_at(i, max), "message %llu: %zu bytes, expected %zu",
			  (unsigned long long)i, msg.len, len_at(i, max));
		CHECK_PATTERN(msg.data, msg.len, base + i);
		mp_release(m, &msg);
	}
}

int main(void)
{
	struct mp m;

	mp_open(&m, NULL, 2, 20);

	int peer = 1 - m.rank;
	size_t max = pm_max_message(m.ctx, peer);
	const char *kib = getenv("PM_SHM_RING_KIB");
	size_t ring = (kib && *kib ? strtoull(kib, NULL, 10) : 512) * 1024;

	CHECK_MSG(max == ring / 4, "max message %zu with a ring of %zu bytes", max, ring);
	/* Itself too: the same limit. */
	CHECK_EQ(pm_max_message(m.ctx, m.rank), max);

	for (int round = 0; round < 2; round++) {
		uint64_t base = (uint64_t)(round + 1) << 40;

		if (m.rank == round)
			send_all(&m, peer, base);
		else
			recv_all(&m, peer, base);
		mp_barrier(&m);
	}
	if (m.rank == 0)
		printf("sizes 0..%zu at many ring offsets, both ways: intact\n", max);
	mp_close(&m);
	return 0;
}
