/* SPDX-License-Identifier: MIT */
/*
 * mp_recv_queued.c - pm_recv_queued() takes what has arrived and never
 * looks at the network.
 *
 * Round after round, rank 1 asks rank 0 for a burst of BURST messages and
 * then makes no PM call for a while, so the burst waits where it landed:
 * in rank 1's ring on shm, in its socket on udp.  Then:
 *
 *  - pm_recv_queued() must come back empty on udp (nothing progressed the
 *    device since the burst was sent), and must find the first message on
 *    shm (its ring is what has arrived) once rank 0 has written it;
 *  - the burst is drained the way the provider pm and the DSM drain: one
 *    pm_recv() (with progress), then pm_recv_queued() until it is empty,
 *    and again; every message comes exactly once, in order, intact, and
 *    some of them come from pm_recv_queued().
 *
 * A udp round only counts when the pm_recv() that follows the empty
 * pm_recv_queued() finds a message at once, i.e. the burst really was in
 * the socket: most rounds must count, so the test cannot pass on a rank 0
 * that was merely late.
 */
#include "mp.h"

#include <string.h>
#include <time.h>

#define ROUNDS 12
#define BURST 8
#define QUIET_MS 50
#define MAGIC 0x52435651u       /* "RCVQ" */

struct note {
	uint32_t magic;
	uint32_t round;
	uint32_t seq;           /* BURST for rank 1's request */
	uint32_t _pad;
};

static void send_note(struct mp *m, int peer, uint32_t round, uint32_t seq)
{
	struct note n = { .magic = MAGIC, .round = round, .seq = seq };

	mp_send(m, peer, &n, sizeof(n));
}

static void check_note(const struct pm_msg *msg, int from, uint32_t round, uint32_t seq)
{
	struct note n;

	CHECK_EQ(msg->peer, from);
	CHECK_EQ(msg->len, sizeof(n));
	memcpy(&n, msg->data, sizeof(n));
	CHECK_EQ(n.magic, MAGIC);
	CHECK_MSG(n.round == round && n.seq == seq,
		  "round %u: got message %u of round %u, expected %u", round, n.seq, n.round, seq);
}

static void quiet(void)
{
	struct timespec ts = { .tv_nsec = QUIET_MS * 1000000L };

	nanosleep(&ts, NULL);
}

int main(void)
{
	struct mp m;
	int counted = 0, by_queued = 0;

	mp_open(&m, NULL, 2, 60);

	const char *dev = pm_peer_device(m.ctx, m.rank == 0 ? 1 : 0);
	bool udp = dev && strcmp(dev, "udp") == 0;

	CHECK_MSG(dev != NULL, "no device reaches the peer");
	for (uint32_t round = 0; round < ROUNDS; round++) {
		struct pm_msg msg;

		if (m.rank == 0) {
			mp_recv(&m, &msg);
			check_note(&msg, 1, round, BURST);
			mp_release(&m, &msg);
			for (uint32_t s = 0; s < BURST; s++)
				send_note(&m, 1, round, s);
			continue;
		}
		send_note(&m, 0, round, BURST);
		quiet();

		int q = pm_recv_queued(m.ctx, &msg);
		uint32_t next = 0;

		if (udp) {
			CHECK_MSG(q == -EAGAIN,
				  "round %u: pm_recv_queued() gave %s on udp: it looked at the network",
				  round, check_errname(q));
			q = pm_recv(m.ctx, &msg);
			counted += q == 0;
		} else {
			CHECK_MSG(q == 0 || q == -EAGAIN, "pm_recv_queued: %s", check_errname(q));
			counted += q == 0;
			by_queued += q == 0;
		}
		if (q == 0) {
			check_note(&msg, 0, round, next++);
			mp_release(&m, &msg);
		}
		/* Drain: a pm_recv(), then pm_recv_queued() until empty. */
		while (next < BURST) {
			int err = pm_recv(m.ctx, &msg);

			if (err == -EAGAIN) {
				mp_progress(&m, "the burst");
				continue;
			}
			CHECK_MSG(err == 0, "pm_recv: %s", check_errname(err));
			check_note(&msg, 0, round, next++);
			mp_release(&m, &msg);
			while (next < BURST && (err = pm_recv_queued(m.ctx, &msg)) == 0) {
				check_note(&msg, 0, round, next++);
				mp_release(&m, &msg);
				by_queued++;
			}
			CHECK_MSG(err == 0 || err == -EAGAIN, "pm_recv_queued: %s",
				  check_errname(err));
		}
		CHECK_EQ(pm_recv_queued(m.ctx, &msg), -EAGAIN);
	}
	if (m.rank == 1) {
		printf("%s: %d of %d rounds found the burst waiting, %d messages taken by "
		       "pm_recv_queued()\n", dev, counted, ROUNDS, by_queued);
		CHECK_MSG(counted >= ROUNDS / 2, "only %d of %d rounds found the burst waiting",
			  counted, ROUNDS);
		CHECK_MSG(by_queued > 0, "pm_recv_queued() never returned a message");
	}
	mp_close(&m);
	return 0;
}
