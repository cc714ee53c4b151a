/* SPDX-License-Identifier: MIT */
/*
 * mp_fairness.c - no sender starves another.
 *
 * Ranks 0 and 1 send to rank 2.  Each message carries the time its
 * sender's previous pm_send() returned (CLOCK_MONOTONIC, one clock for all
 * processes): from then on that message was surely in the ring.  (A time
 * taken before pm_send would date a message that a sender descheduled
 * between the stamp and the send had not yet published: on a loaded
 * machine that reported thousands of "unfair" turns that were the sender's
 * absence.)  Rank 2 records when it took each one.  Afterwards it finds the
 * longest run of messages taken from one sender while the other had a
 * message waiting (published more than a millisecond before).  pm_recv() starts after the ring it served last, so
 * with both rings non-empty the senders alternate; a run of more than 2
 * fails the test.  Two phases: (1) both rings filled before rank 2 starts
 * taking, (2) both senders sending continuously while rank 2 takes.
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N1 300          /* phase 1: queued (64-byte records, 64 KiB rings) */
#define N2 5000         /* phase 2: continuous */
#define LEN 40
#define MARGIN_NS 1000000u

struct stamp {
	uint64_t prev_sent_ns;  /* when pm_send of the sender's previous message returned */
	uint64_t seq;
};

struct rec {
	int peer;
	uint64_t recv_ns;
};

static void send_stamped(struct mp *m, uint64_t n, uint64_t base)
{
	uint64_t prev_sent = 0;

	for (uint64_t i = 0; i < n; i++) {
		uint8_t *buf;
		int err;

		while ((err = pm_send_buffer(m->ctx, 2, LEN, (void **)&buf)) == -EAGAIN)
			mp_progress(m, "waiting for send space");
		CHECK_OK(err);
		struct stamp s = { prev_sent, base + i };

		memcpy(buf, &s, sizeof(s));
		check_fill(buf + sizeof(s), LEN - sizeof(s), base + i);
		CHECK_OK(pm_send(m->ctx, 2, LEN));
		prev_sent = check_now_ns();
	}
}

static int longest_unfair_run(struct mp *m, uint64_t n, uint64_t base, const char *what)
{
	struct rec *r = calloc(2 * n, sizeof(*r));
	uint64_t *sent[2] = { calloc(n, 8), calloc(n, 8) };
	uint64_t next[2] = { 0, 0 };

	CHECK(r && sent[0] && sent[1]);
	for (uint64_t i = 0; i < 2 * n; i++) {
		struct pm_msg msg;
		struct stamp s;

		mp_recv(m, &msg);
		int p = msg.peer;

		r[i].recv_ns = check_now_ns();
		CHECK(p == 0 || p == 1);
		CHECK_EQ(msg.len, LEN);
		memcpy(&s, msg.data, sizeof(s));
		CHECK_EQ(s.seq, base + ((uint64_t)p << 32) + next[p]);
		CHECK_PATTERN((const uint8_t *)msg.data + sizeof(s), LEN - sizeof(s), s.seq);
		r[i].peer = p;
		/* This message dates the previous one; it is dated by the next. */
		if (next[p] > 0)
			sent[p][next[p] - 1] = s.prev_sent_ns;
		next[p]++;
		mp_release(m, &msg);
	}
	CHECK_EQ(next[0], n);
	CHECK_EQ(next[1], n);
	/* The last message of each sender has no date: never "waiting". */
	sent[0][n - 1] = sent[1][n - 1] = UINT64_MAX - MARGIN_NS;

	/* Replay: was the other sender's next message waiting? */
	uint64_t idx[2] = { 0, 0 };
	int longest = 0, run = 0, last = -1;

	for (uint64_t i = 0; i < 2 * n; i++) {
		int p = r[i].peer, o = 1 - p;
		bool waiting = idx[o] < n && sent[o][idx[o]] + MARGIN_NS < r[i].recv_ns;

		idx[p]++;
		if (!waiting) {
			run = 0;
		} else {
			run = p == last ? run + 1 : 1;
			if (run > longest)
				longest = run;
		}
		last = p;
	}
	printf("%s: longest run from one sender while the other waited: %d\n", what,
	       longest);
	free(r);
	free(sent[0]);
	free(sent[1]);
	return longest;
}

int main(void)
{
	struct pm_open_attr attr = { .shm_ring_kib = 64 };
	struct mp m;

	mp_open(&m, &attr, 3, 20);

	/* Phase 1: both rings fill before rank 2 takes anything. */
	if (m.rank < 2) {
		send_stamped(&m, N1, (uint64_t)m.rank << 32);
	} else {
		usleep(300 * 1000);
		int run = longest_unfair_run(&m, N1, 0, "rings filled first");

		CHECK_MSG(run <= 2, "one sender was served %d times in a row while the "
			  "other's message waited", run);
	}
	mp_barrier(&m);

	/* Phase 2: rank 2 says when (so that nothing waits in a barrier). */
	if (m.rank < 2) {
		struct pm_msg go;

		mp_recv(&m, &go);
		CHECK_EQ(go.peer, 2);
		mp_release(&m, &go);
		send_stamped(&m, N2, (1ull << 40) + ((uint64_t)m.rank << 32));
	} else {
		mp_send(&m, 0, "go", 2);
		mp_send(&m, 1, "go", 2);
		int run = longest_unfair_run(&m, N2, 1ull << 40, "continuous senders");

		CHECK_MSG(run <= 2, "one sender was served %d times in a row while the "
			  "other's message waited", run);
	}
	mp_close(&m);
	return 0;
}
