/* SPDX-License-Identifier: MIT */
/*
 * pmcheck - prove that PM delivers: every message exactly once, in order,
 * with the right bytes, under whatever the network does.
 *
 * Every rank sends --count messages to each of its destinations (pairs,
 * ring or all-to-all) while receiving.  A message's length and bytes derive
 * from (sender, sequence number), so the receiver recomputes and compares
 * all of it.  A slow receiver (--hold-ms) exercises flow control; --rma adds
 * remote writes and reads checked the same way.  Prints one JSON object per
 * rank with the counters, exits non-zero on the first wrong message or when
 * --timeout passes.  A rank ends only when every other rank has said, by a
 * one-byte DONE message, that it has all of its messages: a message PM still
 * holds for a receiver that refused it (STOP) is not in flight, so
 * pm_quiesce() does not wait for it, and pm_close() would lose it.
 *
 *   mpirun -n 2 pmcheck --count 1000000 --sizes 1-9000
 */
#include "pm.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum pattern { PAIRS, RING, ALL };

struct opts {
	uint64_t count;
	size_t min_size, max_size;
	enum pattern pattern;
	unsigned hold_ms, hold_every;
	bool rma;
	unsigned timeout_s;
	bool quiet;
};

struct hdr {
	uint32_t src;
	uint32_t len;
	uint64_t seq;
};

static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t seed_of(uint32_t src, uint64_t seq)
{
	return ((uint64_t)src << 40) ^ seq ^ 0x5ca1ab1eull;
}

static size_t length_of(const struct opts *o, uint32_t src, uint64_t seq, size_t max)
{
	uint64_t s = seed_of(src, seq);
	size_t hi = o->max_size < max ? o->max_size : max;
	size_t lo = o->min_size < sizeof(struct hdr) ? sizeof(struct hdr) : o->min_size;

	if (hi < sizeof(struct hdr))
		hi = sizeof(struct hdr);       /* every message carries its header */
	if (lo > hi)
		lo = hi;
	return lo + (size_t)(splitmix(&s) % (hi - lo + 1));
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = splitmix(&s);

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static bool same(const uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t s = seed;

	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = splitmix(&s);

		if (memcmp(p + i, &v, n - i < 8 ? n - i : 8) != 0)
			return false;
	}
	return true;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int parse_size(const char *s, size_t *v)
{
	char *end;
	unsigned long long x = strtoull(s, &end, 10);

	if (end == s)
		return -1;
	if (*end == 'K' || *end == 'k')
		x <<= 10, end++;
	else if (*end == 'M' || *end == 'm')
		x <<= 20, end++;
	*v = (size_t)x;
	return *end ? -1 : 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: pmcheck [OPTION]...   (under a PMIx launcher: mpirun, scrun, srun)\n"
		"Send messages between the processes of a job and verify every one:\n"
		"exactly once, in order, with the right length and bytes.\n"
		"\n"
		"  -c, --count N        messages per (sender, destination) (default 10000)\n"
		"  -s, --sizes MIN-MAX  message sizes, e.g. 1-9000 or 8K-64K (default 8-4096;\n"
		"                       at least the 16-byte check header, at most each\n"
		"                       peer's maximum message)\n"
		"  -p, --pattern P      pairs (0<->1, 2<->3, ...), ring (to rank+1), all\n"
		"                       (all-to-all) (default pairs)\n"
		"  -H, --hold-ms MS     slow receiver: every --hold-every messages, for MS ms\n"
		"                       take messages but release none (flow control must\n"
		"                       stop the senders), then release them all\n"
		"  -e, --hold-every K   (default 1000)\n"
		"  -r, --rma            also write into and read back from each partner's\n"
		"                       registered region, verifying the bytes\n"
		"  -t, --timeout S      fail after S seconds (default 300)\n"
		"  -q, --quiet          only the JSON result line\n"
		"  -h, --help\n"
		"\n"
		"Output: one JSON object per rank on stdout with what it sent and received and\n"
		"its PM counters.  Exit status 0 when every message was right, 1 otherwise.\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
		{ "count", required_argument, NULL, 'c' },
		{ "sizes", required_argument, NULL, 's' },
		{ "pattern", required_argument, NULL, 'p' },
		{ "hold-ms", required_argument, NULL, 'H' },
		{ "hold-every", required_argument, NULL, 'e' },
		{ "rma", no_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 't' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int c;

	*o = (struct opts){ .count = 10000, .min_size = 8, .max_size = 4096,
			    .hold_every = 1000, .timeout_s = 300 };
	while ((c = getopt_long(argc, argv, "c:s:p:H:e:rt:qh", lo, NULL)) != -1) {
		char *dash;

		switch (c) {
		case 'c': o->count = strtoull(optarg, NULL, 10); break;
		case 's':
			dash = strchr(optarg, '-');
			if (!dash) {
				fprintf(stderr, "pmcheck: --sizes wants MIN-MAX, got '%s'\n", optarg);
				return 2;
			}
			*dash = '\0';
			if (parse_size(optarg, &o->min_size) || parse_size(dash + 1, &o->max_size) ||
			    o->min_size > o->max_size) {
				fprintf(stderr, "pmcheck: bad --sizes\n");
				return 2;
			}
			break;
		case 'p':
			if (!strcmp(optarg, "pairs")) o->pattern = PAIRS;
			else if (!strcmp(optarg, "ring")) o->pattern = RING;
			else if (!strcmp(optarg, "all")) o->pattern = ALL;
			else {
				fprintf(stderr, "pmcheck: unknown pattern '%s' (pairs, ring, all)\n", optarg);
				return 2;
			}
			break;
		case 'H': o->hold_ms = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'e': o->hold_every = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'r': o->rma = true; break;
		case 't': o->timeout_s = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'q': o->quiet = true; break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pmcheck: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (o->count == 0 || o->hold_every == 0) {
		fprintf(stderr, "pmcheck: --count and --hold-every must be positive\n");
		return 2;
	}
	return 0;
}

/* Does rank `from` send to rank `to`? */
static bool sends_to(const struct opts *o, int from, int to, int size)
{
	if (from == to)
		return false;
	switch (o->pattern) {
	case PAIRS: return (from ^ 1) == to;
	case RING: return (from + 1) % size == to;
	default: return true;
	}
}

struct state {
	pm_context_t *ctx;
	const struct opts *o;
	int rank, size;
	uint64_t *next_send;            /* per destination */
	uint64_t *next_recv;            /* per source */
	uint64_t to_send, to_recv, sent, received, bad;
	double deadline;
	/* The partner's region key may arrive while messages from others are
	 * still due: it comes after all the partner's messages, so it is the
	 * first message from a peer whose messages are complete. */
	struct pm_msg early;
	bool have_early;
	bool *done;                     /* per rank: its DONE came */
};

static int fail(struct state *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct state *st, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pmcheck[%d]: ", st->rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	st->bad++;
	return -1;
}

static int check_msg(struct state *st, const struct pm_msg *m)
{
	struct hdr h;

	if (m->len < sizeof(h))
		return fail(st, "message of %zu bytes from rank %d: shorter than its header",
			    m->len, m->peer);
	memcpy(&h, m->data, sizeof(h));
	if (h.src != (uint32_t)m->peer)
		return fail(st, "message from rank %d claims rank %u", m->peer, h.src);
	if (!sends_to(st->o, m->peer, st->rank, st->size))
		return fail(st, "unexpected message from rank %d", m->peer);
	if (h.seq != st->next_recv[m->peer])
		return fail(st, "from rank %d: sequence %" PRIu64 ", expected %" PRIu64
			    " (lost, duplicated or reordered)", m->peer, h.seq,
			    st->next_recv[m->peer]);
	size_t want = length_of(st->o, h.src, h.seq, pm_max_message(st->ctx, m->peer));

	if (m->len != want || h.len != want)
		return fail(st, "from rank %d seq %" PRIu64 ": %zu bytes, expected %zu",
			    m->peer, h.seq, m->len, want);
	if (!same((const uint8_t *)m->data + sizeof(h), m->len - sizeof(h), seed_of(h.src, h.seq)))
		return fail(st, "from rank %d seq %" PRIu64 ": payload differs", m->peer, h.seq);
	st->next_recv[m->peer]++;
	return 0;
}

/* Try to send one message to each destination that still needs some. */
static int send_some(struct state *st)
{
	int progress = 0;

	for (int d = 0; d < st->size; d++) {
		if (!sends_to(st->o, st->rank, d, st->size) || st->next_send[d] == st->o->count)
			continue;

		uint64_t seq = st->next_send[d];
		size_t len = length_of(st->o, (uint32_t)st->rank, seq, pm_max_message(st->ctx, d));
		void *buf;
		int err = pm_send_buffer(st->ctx, d, len, &buf);

		if (err == -EAGAIN)
			continue;
		if (err)
			return fail(st, "pm_send_buffer to %d: %s", d, pm_strerror(err));

		struct hdr h = { .src = (uint32_t)st->rank, .len = (uint32_t)len, .seq = seq };

		memcpy(buf, &h, sizeof(h));
		fill((uint8_t *)buf + sizeof(h), len - sizeof(h), seed_of(h.src, seq));
		if ((err = pm_send(st->ctx, d, len)))
			return fail(st, "pm_send to %d: %s", d, pm_strerror(err));
		st->next_send[d]++;
		st->sent++;
		progress++;
	}
	return progress;
}

#define HOLD_MAX 4096

/* Take one message if there is one: 1 taken, 0 none, -1 wrong. */
static int take(struct state *st, struct pm_msg *m)
{
	if (st->received >= st->to_recv || pm_recv(st->ctx, m) != 0)
		return 0;
	if (m->len == 1) {
		/* A DONE (data messages carry a header): its sender is finished,
		 * so everything it had for us came before it (in order). */
		if (sends_to(st->o, m->peer, st->rank, st->size) &&
		    st->next_recv[m->peer] != st->o->count)
			return fail(st, "DONE from rank %d after %" PRIu64 " of its %" PRIu64
				    " messages", m->peer, st->next_recv[m->peer], st->o->count);
		st->done[m->peer] = true;
		pm_release(st->ctx, m);
		return 0;
	}
	if (!st->have_early && st->next_recv[m->peer] == st->o->count &&
	    sends_to(st->o, m->peer, st->rank, st->size)) {
		st->early = *m;
		st->have_early = true;
		return 0;
	}
	if (check_msg(st, m))
		return -1;
	st->received++;
	return 1;
}

/* DONE to every other rank, then every other rank's DONE: when this
 * returns, every message of ours has been taken by its receiver.  The
 * partner's region key (--rma) may come meanwhile: kept for rma_check. */
static int finish(struct state *st)
{
	void *buf;
	struct pm_msg m;
	int err;

	for (int p = 0; p < st->size; p++) {
		if (p == st->rank)
			continue;
		while ((err = pm_send_buffer(st->ctx, p, 1, &buf)) == -EAGAIN)
			if (now_s() > st->deadline)
				return fail(st, "timed out sending DONE to rank %d", p);
			else
				pm_wait(st->ctx, 100);
		if (err)
			return fail(st, "DONE to rank %d: %s", p, pm_strerror(err));
		*(uint8_t *)buf = 'D';
		pm_send(st->ctx, p, 1);
	}
	for (int p = 0; p < st->size; p++) {
		while (p != st->rank && !st->done[p]) {
			if (pm_recv(st->ctx, &m) == -EAGAIN) {
				if (now_s() > st->deadline)
					return fail(st, "timed out waiting for rank %d's DONE", p);
				pm_wait(st->ctx, 100);
			} else if (m.len == 1) {
				st->done[m.peer] = true;
				pm_release(st->ctx, &m);
			} else if (st->o->rma && !st->have_early && m.peer == (st->rank ^ 1)) {
				st->early = m;
				st->have_early = true;
			} else {
				return fail(st, "%zu bytes from rank %d while waiting for DONEs",
					    m.len, m.peer);
			}
		}
	}
	return 0;
}

/*
 * A slow receiver: for hold_ms, keep taking (and checking) messages but
 * release none, so the senders' space runs out and flow control must act;
 * then release them all, newest first (any order is allowed).
 */
static int hold(struct state *st)
{
	static struct pm_msg held[HOLD_MAX];
	int n = 0, r = 0;
	double until = now_s() + st->o->hold_ms / 1000.0;

	while (now_s() < until && n < HOLD_MAX) {
		r = take(st, &held[n]);
		if (r < 0)
			break;
		if (r > 0)
			n++;
		else
			pm_wait(st->ctx, 1);
	}
	while (n)
		pm_release(st->ctx, &held[--n]);
	return r < 0 ? -1 : 0;
}

static int recv_some(struct state *st)
{
	struct pm_msg m;
	int got = 0, r;

	while (got < 64 && (r = take(st, &m)) != 0) {
		if (r < 0)
			return -1;
		pm_release(st->ctx, &m);
		got++;
		if (st->o->hold_ms && st->received % st->o->hold_every == 0 && hold(st))
			return -1;
	}
	return got;
}

static int rma_check(struct state *st)
{
	/* Each rank exposes a region; its partner writes a pattern at several
	 * offsets, reads it back and compares. */
	size_t len = 1 << 20;
	uint8_t *region = calloc(1, len), *local = malloc(len), *back = malloc(len);
	int partner = st->rank ^ 1;
	pm_mr_t *mr;
	int err;

	if (!region || !local || !back)
		return fail(st, "out of memory");
	if (partner >= st->size) {
		free(region); free(local); free(back);
		return 0;
	}
	if ((err = pm_mr_register(st->ctx, region, len, &mr)))
		return fail(st, "pm_mr_register: %s", pm_strerror(err));

	uint64_t key = pm_mr_key(mr), peer_key = 0;
	void *buf;

	while ((err = pm_send_buffer(st->ctx, partner, sizeof(key), &buf)) == -EAGAIN)
		pm_wait(st->ctx, 100);
	memcpy(buf, &key, sizeof(key));
	pm_send(st->ctx, partner, sizeof(key));

	struct pm_msg m;

	if (st->have_early) {
		m = st->early;
		st->have_early = false;
	} else {
		while (pm_recv(st->ctx, &m) == -EAGAIN)
			if (now_s() > st->deadline)
				return fail(st, "timed out waiting for the partner's key");
			else
				pm_wait(st->ctx, 100);
	}
	if (m.peer != partner || m.len != sizeof(peer_key))
		return fail(st, "expected the region key of rank %d, got %zu bytes from rank %d",
			    partner, m.len, m.peer);
	memcpy(&peer_key, m.data, sizeof(peer_key));
	pm_release(st->ctx, &m);

	static const size_t offs[] = { 0, 1, 4095, 65536, (1 << 20) - 100000 };
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		size_t n = i == 0 ? len : 100000;
		struct pm_op op;

		fill(local, n, seed_of((uint32_t)st->rank, 1000 + i));
		if ((err = pm_write(st->ctx, partner, local, n, peer_key, offs[i], &op)))
			return fail(st, "pm_write: %s", pm_strerror(err));
		while (!pm_test(st->ctx, &op))
			if (now_s() > st->deadline)
				return fail(st, "remote write timed out");
		if (op.status)
			return fail(st, "remote write: %s", pm_strerror(op.status));
		memset(back, 0, n);
		if ((err = pm_read(st->ctx, partner, back, n, peer_key, offs[i], &op)))
			return fail(st, "pm_read: %s", pm_strerror(err));
		while (!pm_test(st->ctx, &op))
			if (now_s() > st->deadline)
				return fail(st, "remote read timed out");
		if (op.status)
			return fail(st, "remote read: %s", pm_strerror(op.status));
		if (memcmp(back, local, n))
			return fail(st, "remote write then read at offset %zu: bytes differ", offs[i]);
	}
	/* Both sides done before the region goes away. */
	while ((err = pm_send_buffer(st->ctx, partner, 1, &buf)) == -EAGAIN)
		pm_wait(st->ctx, 100);
	pm_send(st->ctx, partner, 1);
	while (pm_recv(st->ctx, &m) == -EAGAIN)
		if (now_s() > st->deadline)
			return fail(st, "timed out at the end of the remote memory check");
		else
			pm_wait(st->ctx, 100);
	pm_release(st->ctx, &m);
	pm_mr_deregister(st->ctx, mr);
	free(region);
	free(local);
	free(back);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse(argc, argv, &o);

	if (rc)
		return rc;

	pm_context_t *ctx;
	int err = pm_open(&ctx, NULL);

	if (err) {
		fprintf(stderr, "pmcheck: pm_open: %s\n", pm_strerror(err));
		return 1;
	}

	struct state st = { .ctx = ctx, .o = &o, .rank = pm_rank(ctx), .size = pm_size(ctx) };

	st.next_send = calloc((size_t)st.size, sizeof(uint64_t));
	st.next_recv = calloc((size_t)st.size, sizeof(uint64_t));
	st.done = calloc((size_t)st.size, sizeof(bool));
	if (!st.next_send || !st.next_recv || !st.done) {
		fprintf(stderr, "pmcheck: out of memory\n");
		return 1;
	}
	for (int p = 0; p < st.size; p++) {
		st.to_send += sends_to(&o, st.rank, p, st.size) ? o.count : 0;
		st.to_recv += sends_to(&o, p, st.rank, st.size) ? o.count : 0;
	}

	double start = now_s();

	st.deadline = start + o.timeout_s;
	while ((st.sent < st.to_send || st.received < st.to_recv) && !st.bad) {
		int s = st.sent < st.to_send ? send_some(&st) : 0;
		int r = recv_some(&st);

		if (s < 0 || r < 0)
			break;
		if (now_s() > st.deadline) {
			fail(&st, "timed out after %u s: sent %" PRIu64 "/%" PRIu64 ", received %"
			     PRIu64 "/%" PRIu64, o.timeout_s, st.sent, st.to_send, st.received,
			     st.to_recv);
			break;
		}
		if (s == 0 && r == 0) {
			err = pm_wait(ctx, 100);
			if (err && err != -ETIMEDOUT) {
				fail(&st, "pm_wait: %s", pm_strerror(err));
				break;
			}
		}
	}
	if (!st.bad)
		finish(&st);
	if (!st.bad && o.rma)
		rma_check(&st);

	double secs = now_s() - start;
	struct pm_stats s;

	/* Let the last acknowledgements out before the counters are read. */
	pm_quiesce(ctx);
	pm_stats_get(ctx, &s);
	printf("{\"rank\":%d,\"size\":%d,\"device\":\"%s\",\"ok\":%s,\"sent\":%" PRIu64
	       ",\"received\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"seconds\":%.3f,"
	       "\"retransmits\":%" PRIu64 ",\"loses\":%" PRIu64 ",\"stops\":%" PRIu64
	       ",\"gos\":%" PRIu64 ",\"drops\":%" PRIu64 ",\"send_eagain\":%" PRIu64
	       ",\"bytes_sent\":%" PRIu64 ",\"rma_writes\":%" PRIu64 ",\"rma_reads\":%" PRIu64
	       ",\"rto_polls\":%" PRIu64 ",\"dups\":%" PRIu64 ",\"refused_resends\":%" PRIu64 "}\n",
	       st.rank, st.size, pm_peer_device(ctx, (st.rank ^ 1) < st.size ? (st.rank ^ 1) : 0),
	       st.bad ? "false" : "true", st.sent, st.received, st.bad, secs, s.retransmits,
	       s.loses, s.stops, s.gos, s.drops, s.send_eagain, s.bytes_sent, s.rma_writes,
	       s.rma_reads, s.rto_polls, s.dups, s.refused_resends);
	fflush(stdout);
	pm_close(ctx);
	free(st.done);
	free(st.next_send);
	free(st.next_recv);
	return st.bad ? 1 : 0;
}
