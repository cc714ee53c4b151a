/* SPDX-License-Identifier: MIT */
/*
 * mp_backpressure.c - full rings: a fast sender and a slow receiver.
 *
 * Rank 0 streams M messages into an 8 KiB ring to rank 1.  Rank 1 sleeps
 * before taking anything, then takes messages slowly, holding a few and
 * releasing them out of order.  The sender must be refused (-EAGAIN,
 * counted as send_eagain), must block in pm_wait (waits_blocked), and be
 * woken when space is released; the receiver checks that every message
 * arrives once, in order, intact.  Then the roles swap, so that both
 * directions see back-pressure.
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define M 3000
#define HOLD 5

static size_t len_of(uint64_t seq, size_t max)
{
	uint64_t x = (seq + 1) * 0x9E3779B97F4A7C15ull;

	x ^= x >> 31;
	return (size_t)(x % (max + 1));
}

static void sender(struct mp *m, int peer, uint64_t base)
{
	struct pm_stats s0, s1;
	size_t max = pm_max_message(m->ctx, peer);
	uint64_t refused = 0;

	CHECK_OK(pm_stats_get(m->ctx, &s0));
	for (uint64_t seq = 0; seq < M; seq++) {
		size_t len = len_of(seq, max);
		void *buf;
		int err;

		while ((err = pm_send_buffer(m->ctx, peer, len, &buf)) == -EAGAIN) {
			refused++;
			mp_progress(m, "sending into a full ring");
		}
		CHECK_MSG(err == 0, "message %llu: %s", (unsigned long long)seq,
			  check_errname(err));
		check_fill(buf, len, base + seq);
		CHECK_OK(pm_send(m->ctx, peer, len));
	}
	CHECK_OK(pm_stats_get(m->ctx, &s1));
	/* The receiver slept first: the ring filled and the sender was told. */
	CHECK(refused > 0);
	CHECK_EQ(s1.send_eagain - s0.send_eagain, refused);
	CHECK(s1.waits_blocked > s0.waits_blocked);
	CHECK_EQ(s1.msgs_sent - s0.msgs_sent, M);
	printf("rank %d -> %d: %d messages, refused %llu times, blocked %llu times\n",
	       m->rank, peer, M, (unsigned long long)refused,
	       (unsigned long long)(s1.waits_blocked - s0.waits_blocked));
}

static void receiver(struct mp *m, int peer, uint64_t base)
{
	struct pm_msg held[HOLD];
	int nheld = 0;
	size_t max = pm_max_message(m->ctx, peer);
	struct pm_stats s0, s1;
	uint64_t b0 = m->barrier_msgs_recv;

	CHECK_OK(pm_stats_get(m->ctx, &s0));
	/* Let the sender run into the full ring and go to sleep. */
	usleep(400 * 1000);
	for (uint64_t seq = 0; seq < M; seq++) {
		struct pm_msg msg;

		/* Held messages may fill the ring: give them back (newest
		 * first) before waiting, as a receiver must. */
		while (!mp_try_recv(m, &msg)) {
			if (nheld) {
				while (nheld)
					mp_release(m, &held[--nheld]);
			} else {
				mp_progress(m, "waiting for a message");
			}
		}
		CHECK_EQ(msg.peer, peer);
		CHECK_MSG(msg.len == len_of(seq, max),
			  "message %llu: %zu bytes, expected %zu (lost or reordered)",
			  (unsigned long long)seq, msg.len, len_of(seq, max));
		CHECK_PATTERN(msg.data, msg.len, base + seq);
		held[nheld++] = msg;
		if (nheld == HOLD) {
			/* Middle, last, first, ...: out of order. */
			mp_release(m, &held[2]);
			mp_release(m, &held[4]);
			mp_release(m, &held[0]);
			mp_release(m, &held[3]);
			mp_release(m, &held[1]);
			nheld = 0;
		}
		if (seq % 500 == 499)
			usleep(20 * 1000);      /* the receiver is slow */
	}
	while (nheld)
		mp_release(m, &held[--nheld]);
	CHECK_OK(pm_stats_get(m->ctx, &s1));
	CHECK_EQ(s1.msgs_recv - s0.msgs_recv, M + (m->barrier_msgs_recv - b0));
}

int main(void)
{
	struct pm_open_attr attr = { .shm_ring_kib = 8 };
	struct mp m;

	mp_open(&m, &attr, 2, 20);
	CHECK_EQ(pm_max_message(m.ctx, 1 - m.rank), 2048);

	/* 0 -> 1, then 1 -> 0. */
	for (int round = 0; round < 2; round++) {
		int from = round;

		if (m.rank == from)
			sender(&m, 1 - from, (uint64_t)round << 32);
		else
			receiver(&m, from, (uint64_t)round << 32);
		mp_barrier(&m);
	}
	mp_close(&m);
	return 0;
}
