/* SPDX-License-Identifier: MIT */
/*
 * mp_quiesce.c - quiesce and resume with traffic in flight.
 *
 * Both ranks stream numbered messages to each other through small rings.
 * Rank 0 quiesces many times mid-stream (with messages of its own still
 * unread by rank 1, and at moments when its ring is full): while quiesced
 * its sends and remote operations are refused with -EAGAIN, but it keeps
 * receiving rank 1's stream.  It then resumes.  Each side checks that the
 * other's stream arrives exactly once, in order, intact; rank 0 checks
 * the quiesce count and time in its statistics.
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define M 20000
#define QUIESCE_EVERY 997

static size_t len_of(uint64_t seq)
{
	uint64_t x = (seq + 3) * 0x9E3779B97F4A7C15ull;

	return 8 + (size_t)((x >> 40) % 700);
}

struct stream {
	uint64_t sent, received;
	uint64_t base_out, base_in;
};

/* Take whatever is there; false when nothing was. */
static bool drain(struct mp *m, struct stream *s, int peer)
{
	struct pm_msg msg;
	bool any = false;

	while (mp_try_recv(m, &msg)) {
		CHECK_EQ(msg.peer, peer);
		CHECK_U64(s->received, <, M);
		CHECK_MSG(msg.len == len_of(s->received),
			  "message %llu: %zu bytes, expected %zu (lost, doubled or reordered)",
			  (unsigned long long)s->received, msg.len, len_of(s->received));
		CHECK_PATTERN(msg.data, msg.len, s->base_in + s->received);
		mp_release(m, &msg);
		s->received++;
		any = true;
	}
	return any;
}

/* Send the next message if there is room: 0, -EAGAIN. */
static int try_send(struct mp *m, struct stream *s, int peer)
{
	void *buf;
	size_t len = len_of(s->sent);
	int err = pm_send_buffer(m->ctx, peer, len, &buf);

	if (err == -EAGAIN)
		return err;
	CHECK_MSG(err == 0, "pm_send_buffer: %s", check_errname(err));
	check_fill(buf, len, s->base_out + s->sent);
	CHECK_OK(pm_send(m->ctx, peer, len));
	s->sent++;
	return 0;
}

int main(void)
{
	struct pm_open_attr attr = { .shm_ring_kib = 16 };
	struct mp m;

	mp_open(&m, &attr, 2, 20);

	int peer = 1 - m.rank;
	struct stream s = {
		.base_out = (uint64_t)(m.rank + 1) << 40,
		.base_in = (uint64_t)(peer + 1) << 40,
	};
	uint8_t region[256], x[8] = { 0 };
	pm_mr_t *mr;

	/* A region for remote operations that must be refused when quiesced. */
	CHECK_OK(pm_mr_register(m.ctx, region, sizeof(region), &mr));
	mp_send(&m, peer, &(uint64_t){ pm_mr_key(mr) }, 8);

	struct pm_msg kmsg;

	mp_recv(&m, &kmsg);
	CHECK_EQ(kmsg.len, 8);
	uint64_t rkey;

	memcpy(&rkey, kmsg.data, 8);
	mp_release(&m, &kmsg);

	struct pm_stats st0, st;
	uint64_t quiesces = 0, quiesced_ns = 0, refused_while_quiesced = 0;
	uint64_t full_quiesces = 0, next_pause = 1500;

	CHECK_OK(pm_stats_get(m.ctx, &st0));
	while (s.sent < M || s.received < M) {
		/* Rank 1 stops receiving now and then: rank 0's ring fills. */
		if (m.rank == 1 && s.received >= next_pause) {
			usleep(20000);
			next_pause += 1500;
		}
		bool progress = drain(&m, &s, peer);
		int err = s.sent < M ? try_send(&m, &s, peer) : -EAGAIN;

		progress |= err == 0;
		/* Rank 0 quiesces every so often, and sometimes just when its
		 * ring is full (the receiver still has its messages). */
		bool full = err == -EAGAIN && s.sent < M;

		if (m.rank == 0 && s.sent < M &&
		    ((err == 0 && s.sent % QUIESCE_EVERY == 0) ||
		     (full && full_quiesces < 5 && s.sent > 1000 * (full_quiesces + 1)))) {
			full_quiesces += full;
			uint64_t t0 = check_now_ns();

			CHECK_OK(pm_quiesce(m.ctx));
			uint64_t took = check_now_ns() - t0;

			quiesces++;
			quiesced_ns += took;
			CHECK_OK(pm_quiesce(m.ctx));    /* idempotent */
			CHECK_OK(pm_stats_get(m.ctx, &st));
			CHECK_EQ(st.quiesces - st0.quiesces, quiesces);
			CHECK_U64(st.quiesce_ns - st0.quiesce_ns, <=, quiesced_ns);

			/* Refused while quiesced, and counted. */
			uint64_t eagain = st.send_eagain;
			void *buf;
			struct pm_op op;

			for (int i = 0; i < 3; i++) {
				CHECK_ERR(pm_send_buffer(m.ctx, peer, 8, &buf), -EAGAIN);
				CHECK_ERR(try_send(&m, &s, peer), -EAGAIN);
				refused_while_quiesced += 2;
			}
			CHECK_ERR(pm_write(m.ctx, peer, x, 8, rkey, 0, &op), -EAGAIN);
			CHECK_ERR(pm_read(m.ctx, peer, x, 8, rkey, 0, &op), -EAGAIN);
			CHECK_OK(pm_stats_get(m.ctx, &st));
			CHECK_EQ(st.send_eagain - eagain, 6);

			/* Receiving goes on meanwhile. */
			uint64_t until = check_now_ns() + 2000000;

			while (check_now_ns() < until)
				if (!drain(&m, &s, peer))
					usleep(100);
			CHECK_ERR(try_send(&m, &s, peer), -EAGAIN);
			CHECK_OK(pm_resume(m.ctx));
			CHECK_OK(pm_resume(m.ctx));     /* idempotent */
			struct pm_op op2;

			CHECK_OK(pm_write(m.ctx, peer, x, 8, rkey, 0, &op2));
			CHECK_EQ(pm_test(m.ctx, &op2), 1);
			CHECK_EQ(op2.status, 0);
			progress = true;
		}
		if (!progress)
			mp_progress(&m, "streaming");
	}
	CHECK_EQ(s.sent, M);
	CHECK_EQ(s.received, M);
	CHECK_OK(pm_stats_get(m.ctx, &st));
	if (m.rank == 0) {
		CHECK(quiesces >= M / QUIESCE_EVERY);
		CHECK(full_quiesces > 0);
		CHECK_EQ(st.quiesces - st0.quiesces, quiesces);
		CHECK_U64(st.quiesce_ns - st0.quiesce_ns, <=, quiesced_ns);
		CHECK_U64(st.send_eagain - st0.send_eagain, >=, refused_while_quiesced);
		printf("rank 0 quiesced %llu times (%llu with a full ring), %llu ns in "
		       "quiesce; %d messages each way arrived once, in order\n",
		       (unsigned long long)quiesces, (unsigned long long)full_quiesces,
		       (unsigned long long)(st.quiesce_ns - st0.quiesce_ns), M);
	} else {
		CHECK_EQ(st.quiesces, 0);
	}
	mp_barrier(&m);
	CHECK_OK(pm_mr_deregister(m.ctx, mr));
	mp_close(&m);
	return 0;
}
