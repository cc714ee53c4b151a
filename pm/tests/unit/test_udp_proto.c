/* SPDX-License-Identifier: MIT */
/*
 * test_udp_proto.c - the udp protocol core driven without sockets.
 *
 * Two endpoints (ranks 0 and 1, src/udp/testing.h) talk through a
 * simulated network: whatever one puts into its output queue becomes
 * packets in flight, which the network drops, delays or reorders as a test
 * asks, and delivers to the other endpoint's udp_proto_input.  The clock is
 * the simulation's; a "pass" of an endpoint is what the device's progress
 * does: take in what has arrived, run the timers, flush.
 *
 *   order      exactly-once, in-order delivery both ways through loss,
 *              delay and reordering
 *   poll_ack   a timeout sends a POLL (type 8), not data; a POLL for a
 *              packet that arrived is answered with an ACK: no resend
 *   poll_lose  a POLL for a lost packet is answered with LOSE, and only
 *              then is the packet sent again
 *   stop_go    a full receive ring refuses (STOP); the sender sends no data
 *              until GO, after the application released; and when what it
 *              sends again after GO is lost, the POLL's answer (GO again)
 *              makes it send it once more
 *   atomics    fetch-adds through loss, delay and reordering, several in
 *              flight: each applied exactly once, in order; an unknown op,
 *              a misaligned word and one out of range answered with errors
 *
 * Protocol: docs/pm/wire.md.
 */
#include "check.h"
#include "udp/testing.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define JOBKEY 0x7e57ab1e00c0ffeeull
#define PKT_BYTES 1500                  /* testing.h's MTU */
#define NET_MAX 4096                    /* packets in flight at most */
#define LOG_MAX 65536                   /* packets remembered (the first ones) */
#define STEP_NS 200000ull               /* simulated time per round */
#define T0_NS 1000000000ull

struct pkt {
	uint8_t buf[PKT_BYTES];
	size_t len;
	uint32_t src, dst;
	uint64_t due;
};

/* One packet as it was sent (dropped or not). */
struct sent {
	uint32_t src;
	struct wire_hdr h;
	bool dropped;
};

struct sim;

struct end {
	struct udp_proto pr;
	struct pm_stats st;
	struct sim *sim;
	uint32_t rank;
	/* the application */
	uint32_t to_send, sent, received;
};

/* The network's verdict on a packet: drop it (true), or deliver it after
 * *delay_ns. */
typedef bool policy_fn(struct sim *s, const struct sent *p, uint64_t *delay_ns);

struct sim {
	struct end e[2];
	uint64_t now;
	uint64_t rng;
	policy_fn *policy;
	unsigned drop_pct, delay_pct, reorder_pct;
	uint32_t block_from;            /* a rank whose packets are all lost, or 2 */
	uint32_t drop_data_seq;         /* the first DATA packet with this seq is lost */
	struct pkt pool[NET_MAX];
	int free_[NET_MAX], nfree;
	int order[NET_MAX], nq;         /* in flight, in the order sent */
	struct sent log[LOG_MAX];
	int nlog;
	uint64_t by_type[2][WIRE_POLL + 1];
};

static struct sim sim;

static uint64_t rnd(struct sim *s)
{
	s->rng ^= s->rng << 13;
	s->rng ^= s->rng >> 7;
	s->rng ^= s->rng << 17;
	return s->rng;
}

static bool chance(struct sim *s, unsigned pct)
{
	return pct && rnd(s) % 100 < pct;
}

/* ---- the network ---- */

static bool random_policy(struct sim *s, const struct sent *p, uint64_t *delay_ns)
{
	(void)p;
	if (chance(s, s->drop_pct))
		return true;
	if (chance(s, s->delay_pct))
		*delay_ns = rnd(s) % 3000000;
	return false;
}

static bool targeted_policy(struct sim *s, const struct sent *p, uint64_t *delay_ns)
{
	(void)delay_ns;
	if (p->src == s->block_from)
		return true;
	if (p->h.type == WIRE_DATA && s->drop_data_seq && p->h.seq == s->drop_data_seq) {
		s->drop_data_seq = 0;
		return true;
	}
	return false;
}

/* The drain of both endpoints: their packets go on the wire. */
static void to_wire(void *arg, int nic, struct udp_out *out, int n)
{
	struct end *e = arg;
	struct sim *s = e->sim;

	CHECK_EQ(nic, 0);
	for (int i = 0; i < n; i++) {
		struct sent rec = { .src = e->rank };
		uint8_t buf[PKT_BYTES];
		size_t len = 0;

		for (int v = 0; v < out[i].niov; v++) {
			CHECK(len + out[i].iov[v].iov_len <= sizeof(buf));
			memcpy(buf + len, out[i].iov[v].iov_base, out[i].iov[v].iov_len);
			len += out[i].iov[v].iov_len;
		}
		/* What the protocol makes must pass its own validation. */
		CHECK_EQ(wire_decode(buf, len, JOBKEY, 2, (uint32_t)out[i].peer, &rec.h), WIRE_OK);
		CHECK_EQ(rec.h.src, e->rank);

		uint64_t delay = 0;

		rec.dropped = s->policy(s, &rec, &delay);
		s->by_type[e->rank][rec.h.type]++;
		if (s->nlog < LOG_MAX)
			s->log[s->nlog++] = rec;
		if (rec.dropped)
			continue;
		CHECK_MSG(s->nfree > 0, "more than %d packets in flight", NET_MAX);

		int k = s->free_[--s->nfree];
		struct pkt *p = &s->pool[k];

		memcpy(p->buf, buf, len);
		p->len = len;
		p->src = e->rank;
		p->dst = (uint32_t)out[i].peer;
		p->due = s->now + delay;
		s->order[s->nq++] = k;
	}
}

/* Hand endpoint d what is due for it: in the order sent, or now and then
 * another due packet first. */
static void deliver(struct sim *s, uint32_t d)
{
	struct end *e = &s->e[d];

	e->pr.now_ns = s->now;
	for (;;) {
		int due[NET_MAX], n = 0;

		for (int i = 0; i < s->nq; i++) {
			const struct pkt *p = &s->pool[s->order[i]];

			if (p->dst == d && p->due <= s->now)
				due[n++] = i;
		}
		if (n == 0)
			return;

		int pick = chance(s, s->reorder_pct) ? due[rnd(s) % (uint64_t)n] : due[0];
		int k = s->order[pick];
		struct pkt *p = &s->pool[k];
		struct sockaddr_in from = udp_testing_addr(p->src);

		memmove(&s->order[pick], &s->order[pick + 1],
			(size_t)(s->nq - pick - 1) * sizeof(s->order[0]));
		s->nq--;
		udp_proto_input(&e->pr, 0, p->buf, p->len, &from);
		s->free_[s->nfree++] = k;
	}
}

/* One progress pass of endpoint d, as the device makes it. */
static void pass(struct sim *s, uint32_t d)
{
	struct end *e = &s->e[d];

	deliver(s, d);
	e->pr.now_ns = s->now;
	udp_proto_timers(&e->pr);
	udp_outq_flush(&e->pr.out);
}

static void tick(struct sim *s)
{
	pass(s, 0);
	pass(s, 1);
	s->now += STEP_NS;
}

static void sim_open(struct sim *s, uint32_t ring_bytes, uint32_t wnd, policy_fn *policy)
{
	memset(s, 0, sizeof(*s));
	s->rng = 0x9e3779b97f4a7c15ull;
	s->now = T0_NS;
	s->policy = policy;
	s->block_from = 2;
	for (int i = 0; i < NET_MAX; i++)
		s->free_[i] = NET_MAX - 1 - i;
	s->nfree = NET_MAX;
	for (uint32_t r = 0; r < 2; r++) {
		struct end *e = &s->e[r];
		struct udp_proto_conf conf = {
			.jobkey = JOBKEY, .me = r, .size = 2, .ring_bytes = ring_bytes,
			.wnd = wnd, .stats = &e->st, .drain = to_wire, .drain_arg = e,
		};

		e->sim = s;
		e->rank = r;
		CHECK_OK(udp_testing_open(&e->pr, &conf));
		e->pr.now_ns = s->now;
	}
}

static void sim_close(struct sim *s)
{
	for (int r = 0; r < 2; r++)
		udp_proto_fini(&s->e[r].pr);
}

/* The packets sent since log entry `from` by src (of type, or any: 0). */
static int count_sent(const struct sim *s, int from, uint32_t src, uint8_t type)
{
	int n = 0;

	for (int i = from; i < s->nlog; i++)
		n += s->log[i].src == src && (!type || s->log[i].h.type == type);
	return n;
}

/* The next packet sent by src from log entry *at on; NULL when none. */
static const struct sent *next_sent(const struct sim *s, int *at, uint32_t src)
{
	for (; *at < s->nlog; (*at)++)
		if (s->log[*at].src == src)
			return &s->log[(*at)++];
	return NULL;
}

/* ---- the application ---- */

static size_t msg_len(uint32_t idx, size_t max)
{
	uint64_t h = (idx + 1) * 0x9e3779b97f4a7c15ull;

	return 4 + (size_t)((h >> 33) % (max - 3));
}

static uint8_t msg_byte(uint32_t idx, size_t i)
{
	return (uint8_t)(idx * 31u + i * 7u);
}

/* Send the next messages while the send ring takes them. */
static void app_send(struct sim *s, uint32_t r, size_t max)
{
	struct end *e = &s->e[r];
	struct udp_peer *p = udp_peer_of(&e->pr, (int)(1 - r));

	e->pr.now_ns = s->now;
	while (e->sent < e->to_send) {
		size_t len = msg_len(e->sent, max);
		uint8_t *buf;

		if (udp_tx_buffer(p, len, (void **)&buf) != 0)
			break;
		memcpy(buf, &e->sent, 4);
		for (size_t i = 4; i < len; i++)
			buf[i] = msg_byte(e->sent, i);
		CHECK_OK(udp_tx_send(&e->pr, p, len));
		e->sent++;
	}
	udp_outq_flush(&e->pr.out);
}

/* Take every delivered message: each exactly once, in order, intact. */
static void app_recv(struct sim *s, uint32_t r, size_t max)
{
	struct end *e = &s->e[r];
	struct pm_msg m;

	e->pr.now_ns = s->now;
	while (udp_proto_recv(&e->pr, &m) == 0) {
		const uint8_t *d = m.data;
		uint32_t idx;

		CHECK_EQ(m.peer, 1 - r);
		CHECK_U64(m.len, >=, 4);
		memcpy(&idx, d, 4);
		CHECK_MSG(idx == e->received, "rank %u got message %u, expected %u", r, idx,
			  e->received);
		CHECK_EQ(m.len, msg_len(idx, max));
		for (size_t i = 4; i < m.len; i++)
			CHECK_MSG(d[i] == msg_byte(idx, i), "message %u byte %zu", idx, i);
		e->received++;
		CHECK_OK(udp_proto_release(&e->pr, &m));
	}
	udp_outq_flush(&e->pr.out);
}

static bool idle(struct sim *s)
{
	return udp_proto_idle(&s->e[0].pr) && udp_proto_idle(&s->e[1].pr) && s->nq == 0;
}

/* ---- the tests ---- */

struct order_case {
	const char *name;
	unsigned drop_pct, delay_pct, reorder_pct;
	uint32_t ring_bytes, wnd;
	uint64_t seed;
};

static void test_order(const struct order_case *c)
{
	const size_t max = 4000;        /* up to three packets a message */
	const uint32_t n = 2000;
	struct sim *s = &sim;
	int rounds = 0;

	sim_open(s, c->ring_bytes, c->wnd, random_policy);
	s->rng = c->seed;
	s->drop_pct = c->drop_pct;
	s->delay_pct = c->delay_pct;
	s->reorder_pct = c->reorder_pct;
	s->e[0].to_send = s->e[1].to_send = n;
	while (s->e[0].received < n || s->e[1].received < n) {
		CHECK_MSG(++rounds < 1000000, "%s: stuck: received %u and %u of %u", c->name,
			  s->e[0].received, s->e[1].received, n);
		for (uint32_t r = 0; r < 2; r++) {
			app_send(s, r, max);
			app_recv(s, r, max);
		}
		tick(s);
	}
	/* Everything acknowledged in the end, and no message beyond. */
	s->drop_pct = s->delay_pct = s->reorder_pct = 0;
	for (int i = 0; i < 10000 && !idle(s); i++)
		tick(s);
	CHECK(idle(s));
	app_recv(s, 0, max);
	app_recv(s, 1, max);
	CHECK_EQ(s->e[0].received, n);
	CHECK_EQ(s->e[1].received, n);
	if (c->drop_pct)
		CHECK_U64(s->e[0].st.retransmits + s->e[1].st.retransmits, >, 0);
	printf("order (%s): 2 x %u messages in %.3f s simulated; retransmits %" PRIu64
	       " and %" PRIu64 ", polls %" PRIu64 " and %" PRIu64 ", loses %" PRIu64
	       ", dups %" PRIu64 "\n", c->name, n, (double)(s->now - T0_NS) / 1e9,
	       s->e[0].st.retransmits, s->e[1].st.retransmits, s->e[0].st.rto_polls,
	       s->e[1].st.rto_polls, s->e[0].st.loses + s->e[1].st.loses,
	       s->e[0].st.dups + s->e[1].st.dups);
	sim_close(s);
}

/* Run passes until src has sent something more (at most max_ns), and stop
 * right after that pass, before the packets are delivered. */
static void until_sent_by(struct sim *s, uint32_t src, uint64_t max_ns)
{
	int before = count_sent(s, 0, src, 0);
	uint64_t end = s->now + max_ns;

	for (;;) {
		for (uint32_t d = 0; d < 2; d++) {
			pass(s, d);
			if (count_sent(s, 0, src, 0) != before)
				return;
		}
		CHECK_MSG(s->now < end, "rank %u sent nothing in %" PRIu64 " ms", src,
			  max_ns / 1000000);
		s->now += STEP_NS;
	}
}

/* What src sends next (within 10 ms). */
static const struct sent *next_packet(struct sim *s, uint32_t src)
{
	int at = s->nlog;

	until_sent_by(s, src, 10000000);
	return next_sent(s, &at, src);
}

/* Rank 0's retransmission timeout for packet 1: a POLL for it on its
 * path, and nothing else (nothing resent). */
static void expect_poll(struct sim *s)
{
	int at = s->nlog;

	until_sent_by(s, 0, 100000000);
	const struct sent *poll = next_sent(s, &at, 0);

	CHECK_EQ(poll->h.type, WIRE_POLL);
	CHECK_EQ(poll->h.seq, 1);
	CHECK(!next_sent(s, &at, 0));
	CHECK_EQ(s->e[0].st.rto_polls, 1);
	CHECK_EQ(s->e[0].st.retransmits, 0);
}

static void test_poll_ack(void)
{
	struct sim *s = &sim;
	const size_t max = 100;

	sim_open(s, 64 * 1024, 64, targeted_policy);
	s->block_from = 1;              /* every ACK of rank 1 is lost */
	s->e[0].to_send = 1;
	app_send(s, 0, max);
	CHECK_EQ(count_sent(s, 0, 0, WIRE_DATA), 1);

	/* The receiver has the message; its acknowledgement is lost. */
	for (int i = 0; i < 5; i++)
		tick(s);
	app_recv(s, 1, max);
	CHECK_EQ(s->e[1].received, 1);
	CHECK_U64(count_sent(s, 0, 1, WIRE_ACK), >=, 1);

	expect_poll(s);

	/* The answer: packet 1 came, so an ACK of it, and no resend.  Taking
	 * the POLL in leaves the answer due at the end of the pass, which is
	 * what makes the device run the timers within their tick. */
	s->block_from = 2;
	deliver(s, 1);
	CHECK(s->e[1].pr.answer_due);
	const struct sent *ans = next_packet(s, 1);

	CHECK(!s->e[1].pr.answer_due);

	CHECK_EQ(ans->h.type, WIRE_ACK);
	CHECK(ans->h.flags & WIRE_F_ACK);
	CHECK_EQ(ans->h.ack, 1);
	for (int i = 0; i < 2000; i++)  /* 400 ms: past any timer */
		tick(s);
	CHECK(idle(s));
	CHECK_EQ(count_sent(s, 0, 0, WIRE_DATA), 1);
	CHECK_EQ(s->e[0].st.retransmits, 0);
	CHECK_EQ(s->e[0].st.rto_polls, 1);
	CHECK_EQ(s->e[1].st.dups, 0);
	CHECK_EQ(s->e[1].st.loses, 0);
	printf("poll_ack: timeout -> POLL(1) -> ACK(1), nothing resent\n");
	sim_close(s);
}

static void test_poll_lose(void)
{
	struct sim *s = &sim;
	const size_t max = 100;

	sim_open(s, 64 * 1024, 64, targeted_policy);
	s->drop_data_seq = 1;           /* the only DATA packet is lost */
	s->e[0].to_send = 1;
	app_send(s, 0, max);
	expect_poll(s);

	/* The answer: LOSE(0), "I have everything up to 0", then the resend. */
	const struct sent *ans = next_packet(s, 1);

	CHECK_EQ(ans->h.type, WIRE_LOSE);
	CHECK_EQ(ans->h.seq, 0);
	CHECK_EQ(s->e[1].st.loses, 1);
	const struct sent *again = next_packet(s, 0);

	CHECK_EQ(again->h.type, WIRE_DATA);
	CHECK_EQ(again->h.seq, 1);
	CHECK_EQ(s->e[0].st.retransmits, 1);

	for (int i = 0; i < 2000; i++)
		tick(s);
	app_recv(s, 1, max);
	CHECK_EQ(s->e[1].received, 1);
	CHECK(idle(s));
	CHECK_EQ(count_sent(s, 0, 0, WIRE_DATA), 2);
	CHECK_EQ(s->e[0].st.retransmits, 1);
	CHECK_EQ(s->e[1].st.dups, 0);
	printf("poll_lose: timeout -> POLL(1) -> LOSE(0) -> DATA(1) again, delivered once\n");
	sim_close(s);
}

/* lose_resend: the refused packet, sent again after GO, is lost too. */
static void test_stop_go(bool lose_resend)
{
	struct sim *s = &sim;
	const size_t max = 1000;        /* 4 KiB rings: a quarter is 1 KiB */
	const uint32_t n = 40;
	int rounds = 0;

	sim_open(s, 4096, 64, targeted_policy);
	s->e[0].to_send = n;

	/* Rank 1's application reads nothing: its ring fills and it refuses. */
	struct udp_peer *to1 = udp_peer_of(&s->e[0].pr, 1);

	while (!to1->stopped) {
		CHECK_MSG(++rounds < 1000, "no STOP");
		app_send(s, 0, max);
		tick(s);
	}
	CHECK_U64(count_sent(s, 0, 1, WIRE_STOP), >=, 1);
	CHECK_EQ(s->e[1].st.stops, 1);

	/* Stopped: no data for 500 ms, only POLLs that rank 1 answers with
	 * STOP again while it still has no room. */
	int at = s->nlog;

	for (int i = 0; i < 2500; i++) {
		app_send(s, 0, max);
		tick(s);
	}
	CHECK_EQ(count_sent(s, at, 0, WIRE_DATA), 0);
	CHECK_U64(count_sent(s, at, 0, WIRE_POLL), >=, 1);
	CHECK_U64(count_sent(s, at, 1, WIRE_STOP), >=, 1);
	CHECK_EQ(count_sent(s, at, 1, WIRE_GO), 0);
	CHECK(to1->stopped);

	/* The application reads: GO, and the rest follows, in order.  When
	 * the resent packet is lost as well, the sender's POLL is answered
	 * with GO again (the receiver still waits for it), which makes the
	 * sender resend it once more. */
	if (lose_resend)
		s->drop_data_seq = to1->stop_seq;
	rounds = 0;
	while (s->e[1].received < n) {
		CHECK_MSG(++rounds < 100000, "received %u of %u after GO", s->e[1].received, n);
		app_recv(s, 1, max);
		app_send(s, 0, max);
		tick(s);
	}
	for (int i = 0; i < 2000 && !idle(s); i++)
		tick(s);
	CHECK(idle(s));
	CHECK_U64(count_sent(s, at, 1, WIRE_GO), >=, 1);
	CHECK_U64(s->e[1].st.gos, >=, 1);
	CHECK_U64(s->e[0].st.refused_resends, >=, 1);
	if (lose_resend)
		CHECK_U64(s->e[0].st.retransmits, >=, 1);
	else
		CHECK_EQ(s->e[0].st.retransmits, 0);   /* refused, never lost */
	printf("stop_go%s: %u messages through a 4 KiB ring: stops %" PRIu64 ", gos %" PRIu64
	       ", refused resends %" PRIu64 ", retransmits %" PRIu64 "\n",
	       lose_resend ? " (the resend after GO lost)" : "", n, s->e[1].st.stops,
	       s->e[1].st.gos, s->e[0].st.refused_resends, s->e[0].st.retransmits);
	sim_close(s);
}

#define ATOMIC_N 600
#define ATOMIC_INFLIGHT 8

/* Endpoint 0 runs atomics on endpoint 1's words over a lossy network. */
static void test_atomics(void)
{
	struct sim *s = &sim;
	static uint64_t words[4] __attribute__((aligned(8)));
	const uint64_t key = (3ull << 16) | 2;
	struct pm_op ops[ATOMIC_INFLIGHT];
	uint64_t olds[ATOMIC_INFLIGHT];
	bool busy[ATOMIC_INFLIGHT] = { false }, seen[ATOMIC_N] = { false };
	uint32_t started = 0, done = 0;

	sim_open(s, 64 * 1024, 64, random_policy);
	s->drop_pct = 10;
	s->delay_pct = 20;
	s->reorder_pct = 20;
	memset(words, 0, sizeof(words));
	udp_proto_expose(&s->e[1].pr, 2, key, words, sizeof(words));

	struct udp_peer *p = udp_peer_of(&s->e[0].pr, 1);

	for (int round = 0; done < ATOMIC_N; round++) {
		CHECK_MSG(round < 200000, "atomics stuck at %u of %u", done, ATOMIC_N);
		s->e[0].pr.now_ns = s->now;
		for (int i = 0; i < ATOMIC_INFLIGHT; i++) {
			if (busy[i] && ops[i].status != 1) {
				CHECK_OK(ops[i].status);
				CHECK_U64(olds[i], <, ATOMIC_N);
				CHECK_MSG(!seen[olds[i]], "old value %" PRIu64 " twice", olds[i]);
				seen[olds[i]] = true;
				busy[i] = false;
				done++;
			}
			if (!busy[i] && started < ATOMIC_N &&
			    udp_proto_atomic(&s->e[0].pr, p, PM_ATOMIC_ADD, 1, 0, &olds[i], key, 8,
					     &ops[i]) == 0) {
				busy[i] = true;
				started++;
			}
		}
		udp_outq_flush(&s->e[0].pr.out);
		tick(s);
	}
	CHECK_U64(words[1], ==, ATOMIC_N);
	CHECK_U64(words[0], ==, 0);
	CHECK_U64(words[2], ==, 0);
	for (uint32_t i = 0; i < ATOMIC_N; i++)
		CHECK_MSG(seen[i], "old value %u never seen", i);

	/* Errors, each answered by the target. */
	static const struct { uint32_t op; uint64_t off; int status; } bad[] = {
		{ 9, 0, -EINVAL }, { 0, 0, -EINVAL }, { PM_ATOMIC_ADD, 4, -EINVAL },
		{ PM_ATOMIC_ADD, 28, -ERANGE }, { PM_ATOMIC_ADD, 32, -ERANGE },
	};

	for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
		uint64_t res = 7;
		struct pm_op op;

		s->e[0].pr.now_ns = s->now;
		CHECK_OK(udp_proto_atomic(&s->e[0].pr, p, bad[b].op, 1, 0, &res, key, bad[b].off,
					  &op));
		udp_outq_flush(&s->e[0].pr.out);
		for (int round = 0; op.status == 1; round++) {
			CHECK_MSG(round < 100000, "error case %zu never answered", b);
			tick(s);
		}
		CHECK_EQ(op.status, bad[b].status);
		CHECK_U64(res, ==, 7);
	}
	CHECK_U64(words[1], ==, ATOMIC_N);
	printf("atomics: %u fetch-adds, %d in flight, 10%% loss: each once; errors answered; "
	       "retransmits %" PRIu64 "\n", ATOMIC_N, ATOMIC_INFLIGHT, s->e[0].st.retransmits);
	sim_close(s);
}

int main(void)
{
	test_atomics();
	test_poll_ack();
	test_poll_lose();
	test_stop_go(false);
	test_stop_go(true);

	static const struct order_case cases[] = {
		{ "loss", 10, 0, 0, 64 * 1024, 64, 0x9e3779b97f4a7c15ull },
		{ "delay", 0, 30, 0, 64 * 1024, 64, 0x2545f4914f6cdd1dull },
		{ "loss, delay, reordering", 3, 20, 20, 64 * 1024, 64, 0x9e3779b97f4a7c15ull },
		{ "small ring and window", 5, 10, 5, 16 * 1024, 8, 0x853c49e6748fea9bull },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		test_order(&cases[i]);
	return 0;
}
