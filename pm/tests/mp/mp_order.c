/* SPDX-License-Identifier: MIT */
/*
 * mp_order.c - ordering per pair with many peers.
 *
 * Every rank sends N messages to every rank (itself included), interleaved
 * over the destinations, while receiving.  Each message carries its sender,
 * destination and sequence number, and a payload whose length and bytes
 * follow from them.  The receiver checks, per sender, that the sequence
 * numbers come 0, 1, 2, ... with nothing lost, doubled or damaged.  Small
 * rings (16 KiB) make the senders wrap and wait often.  Some messages are
 * held and released out of order.
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>

#define MAGIC 0x4f524452u       /* "ORDR" */
#define HOLD 6

struct hdr {
	uint32_t magic;
	uint32_t src;
	uint32_t dst;
	uint32_t _pad;
	uint64_t seq;
};

static uint64_t seed_of(uint32_t src, uint32_t dst, uint64_t seq)
{
	return ((uint64_t)src << 56) ^ ((uint64_t)dst << 48) ^ seq;
}

static size_t len_of(uint64_t seed, size_t max)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull;

	x ^= x >> 29;
	/* Mostly small, sometimes up to the largest message. */
	size_t span = x % 10 == 0 ? max - sizeof(struct hdr) : 300;

	return sizeof(struct hdr) + (size_t)((x >> 8) % (span + 1));
}

int main(int argc, char **argv)
{
	struct pm_open_attr attr = { .shm_ring_kib = 16 };
	struct mp m;
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 20000;

	mp_open(&m, &attr, 0, 20);
	CHECK(m.size >= 2);

	int size = m.size;
	uint64_t *next_send = calloc((size_t)size, sizeof(uint64_t));
	uint64_t *next_recv = calloc((size_t)size, sizeof(uint64_t));
	uint64_t bytes_sent = 0, bytes_recv = 0, sent = 0, received = 0;
	uint64_t total = n * (uint64_t)size;
	struct pm_msg held[HOLD];
	int nheld = 0;
	int dst = m.rank;       /* start with ourselves, then round-robin */

	CHECK(next_send && next_recv);
	for (int r = 0; r < size; r++)
		CHECK_MSG(pm_max_message(m.ctx, r) == 4096,
			  "max message to %d is %zu", r, pm_max_message(m.ctx, r));

	while (sent < total || received < total) {
		bool progress = false;

		/* One send attempt per destination per round. */
		for (int k = 0; k < size && sent < total; k++) {
			int d = (dst + k) % size;

			if (next_send[d] == n)
				continue;

			uint64_t seq = next_send[d];
			uint64_t seed = seed_of((uint32_t)m.rank, (uint32_t)d, seq);
			size_t len = len_of(seed, pm_max_message(m.ctx, d));
			void *buf;
			int err = pm_send_buffer(m.ctx, d, len, &buf);

			if (err == -EAGAIN)
				continue;
			CHECK_MSG(err == 0, "pm_send_buffer to %d: %s", d, check_errname(err));
			struct hdr h = { MAGIC, (uint32_t)m.rank, (uint32_t)d, 0, seq };

			memcpy(buf, &h, sizeof(h));
			check_fill((uint8_t *)buf + sizeof(h), len - sizeof(h), seed);
			CHECK_OK(pm_send(m.ctx, d, len));
			next_send[d]++;
			sent++;
			bytes_sent += len;
			progress = true;
		}
		dst = (dst + 1) % size;

		/* Everything that is there. */
		struct pm_msg msg;

		while (mp_try_recv(&m, &msg)) {
			struct hdr h;

			CHECK_U64(msg.len, >=, sizeof(h));
			memcpy(&h, msg.data, sizeof(h));
			CHECK_EQ(h.magic, MAGIC);
			CHECK_EQ(h.src, msg.peer);
			CHECK_EQ(h.dst, m.rank);
			CHECK_MSG(h.seq == next_recv[msg.peer],
				  "from rank %d: message %llu, expected %llu", msg.peer,
				  (unsigned long long)h.seq,
				  (unsigned long long)next_recv[msg.peer]);
			uint64_t seed = seed_of(h.src, h.dst, h.seq);

			CHECK_EQ(msg.len, len_of(seed, pm_max_message(m.ctx, msg.peer)));
			CHECK_PATTERN((const uint8_t *)msg.data + sizeof(h), msg.len - sizeof(h),
				      seed);
			next_recv[msg.peer]++;
			received++;
			bytes_recv += msg.len;
			progress = true;
			/* Hold some, release them newest first. */
			held[nheld++] = msg;
			if (nheld == HOLD || h.seq % 7 == 0) {
				while (nheld)
					mp_release(&m, &held[--nheld]);
			}
		}
		while (nheld)
			mp_release(&m, &held[--nheld]);
		if (!progress)
			mp_progress(&m, "exchanging");
	}
	for (int r = 0; r < size; r++) {
		CHECK_EQ(next_send[r], n);
		CHECK_EQ(next_recv[r], n);
	}

	struct pm_stats st;

	CHECK_OK(pm_stats_get(m.ctx, &st));
	CHECK_EQ(st.msgs_sent, total);
	CHECK_EQ(st.msgs_recv, total + m.barrier_msgs_recv);
	CHECK_EQ(st.bytes_sent, bytes_sent);
	CHECK_EQ(st.bytes_recv, bytes_recv + m.barrier_msgs_recv * 24);
	if (m.rank == 0)
		printf("%d ranks x %llu messages to each: in order, intact "
		       "(rank 0: %llu send retries, %llu blocking waits)\n",
		       size, (unsigned long long)n, (unsigned long long)st.send_eagain,
		       (unsigned long long)st.waits_blocked);
	free(next_send);
	free(next_recv);
	mp_close(&m);
	return 0;
}
