/* SPDX-License-Identifier: MIT */
/*
 * test_match.c - tag matching (mpi/src/match.c, design §5) on its own:
 * posted receives and unexpected messages built by hand, no endpoint and
 * no PM.
 *
 * A receive takes a message when (its source, a peer and one of its
 * endpoints, is the sender's, or it takes any) and
 * ((tag ^ want) & ~ignore) == 0; tagged and untagged traffic have separate
 * queues; within a queue the first posted receive, and the first arrived
 * message, wins.
 */
#include "check.h"
#include "pmfi.h"

#include <stdlib.h>

#define ANY (-1)

static struct pmfi_match m;
static int ctx[16];     /* distinct addresses for contexts */

static struct pmfi_req *post(bool tagged, int peer, uint64_t tag, uint64_t ignore,
			     void *context)
{
	struct pmfi_req *r = calloc(1, sizeof(*r));

	CHECK(r);
	pmfi_list_init(&r->link);
	r->kind = REQ_RECV;
	r->tagged = tagged;
	r->peer = peer;
	r->tag = tag;
	r->ignore = ignore;
	r->context = context;
	pmfi_list_add_tail(&m.posted[tagged], &r->link);
	return r;
}

/* A receive that is not queued: the question asked of the unexpected queue. */
static struct pmfi_req *recv_req(bool tagged, int peer, uint64_t tag, uint64_t ignore)
{
	struct pmfi_req *r = calloc(1, sizeof(*r));

	CHECK(r);
	pmfi_list_init(&r->link);
	r->kind = REQ_RECV;
	r->tagged = tagged;
	r->peer = peer;
	r->tag = tag;
	r->ignore = ignore;
	return r;
}

static struct pmfi_unexp *arrive(bool tagged, int peer, uint64_t tag, size_t len)
{
	struct pmfi_unexp *u = calloc(1, sizeof(*u) + len);

	CHECK(u);
	pmfi_list_init(&u->link);
	u->peer = peer;
	u->op = PMFI_OP_EAGER;
	u->tagged = tagged;
	u->tag = tag;
	u->len = len;
	pmfi_list_add_tail(&m.unexp[tagged], &u->link);
	return u;
}

static size_t count(const struct pmfi_list *q)
{
	size_t n = 0;

	for (const struct pmfi_list *l = q->next; l != q; l = l->next)
		n++;
	return n;
}

static void check_empty(void)
{
	for (int t = 0; t < 2; t++) {
		CHECK(pmfi_list_empty(&m.posted[t]));
		CHECK(pmfi_list_empty(&m.unexp[t]));
	}
}

/* A taken element is unlinked and points at itself. */
static void check_unlinked(const struct pmfi_list *l)
{
	CHECK(l->next == l && l->prev == l);
}

static void test_tag_matches(void)
{
	CHECK(pmfi_tag_matches(0x1234, 0, 0x1234));
	CHECK(!pmfi_tag_matches(0x1234, 0, 0x1235));
	CHECK(pmfi_tag_matches(0x1200, 0xff, 0x12ab));
	CHECK(pmfi_tag_matches(0x12ff, 0xff, 0x1200));
	CHECK(!pmfi_tag_matches(0x1200, 0xff, 0x1300));
	CHECK(pmfi_tag_matches(0, ~(uint64_t)0, 0xdeadbeefcafef00dull));
	CHECK(pmfi_tag_matches(0x8000000000000000ull, 0, 0x8000000000000000ull));
	CHECK(!pmfi_tag_matches(0x8000000000000000ull, 0x7fffffffffffffffull, 0));
}

/* Two receives that both match: the first posted takes the first message. */
static void test_posted_order(void)
{
	pmfi_match_init(&m);
	struct pmfi_req *a = post(true, ANY, 5, 0, &ctx[0]);
	struct pmfi_req *b = post(true, ANY, 5, 0, &ctx[1]);

	CHECK(pmfi_match_posted(&m, true, 3, 0, 5) == a);
	check_unlinked(&a->link);
	CHECK_EQ(count(&m.posted[1]), 1);
	CHECK(pmfi_match_posted(&m, true, 3, 0, 5) == b);
	CHECK(pmfi_match_posted(&m, true, 3, 0, 5) == NULL);
	check_empty();
	free(a);
	free(b);

	/* A non-matching receive ahead of the match does not block it and stays. */
	struct pmfi_req *c = post(true, ANY, 7, 0, &ctx[2]);
	struct pmfi_req *d = post(true, ANY, 5, 0, &ctx[3]);

	CHECK(pmfi_match_posted(&m, true, 0, 0, 5) == d);
	CHECK(pmfi_match_posted(&m, true, 0, 0, 5) == NULL);
	CHECK(pmfi_match_posted(&m, true, 0, 0, 7) == c);
	check_empty();
	free(c);
	free(d);
}

static void test_posted_source(void)
{
	pmfi_match_init(&m);
	/* Any source takes every peer. */
	struct pmfi_req *a = post(true, ANY, 1, 0, &ctx[0]);

	CHECK(pmfi_match_posted(&m, true, 0, 0, 1) == a);
	pmfi_list_add_tail(&m.posted[1], &a->link);
	CHECK(pmfi_match_posted(&m, true, 1000, 0, 1) == a);

	/* A directed receive is skipped for other peers, in favour of later ones. */
	struct pmfi_req *d = post(true, 2, 1, 0, &ctx[1]);
	struct pmfi_req *any = post(true, ANY, 1, 0, &ctx[2]);

	CHECK(pmfi_match_posted(&m, true, 3, 0, 1) == any);
	CHECK(pmfi_match_posted(&m, true, 3, 0, 1) == NULL);
	CHECK(pmfi_match_posted(&m, true, 2, 0, 1) == d);
	check_empty();

	/* A directed receive ahead of a wildcard one takes its peer's message first. */
	pmfi_list_add_tail(&m.posted[1], &d->link);
	pmfi_list_add_tail(&m.posted[1], &any->link);
	CHECK(pmfi_match_posted(&m, true, 2, 0, 1) == d);
	CHECK(pmfi_match_posted(&m, true, 2, 0, 1) == any);
	check_empty();
	free(a);
	free(d);
	free(any);
}

static void test_posted_ignore(void)
{
	pmfi_match_init(&m);
	struct pmfi_req *a = post(true, ANY, 0x1200, 0xff, &ctx[0]);

	CHECK(pmfi_match_posted(&m, true, 0, 0, 0x1300) == NULL);
	CHECK(pmfi_match_posted(&m, true, 0, 0, 0x12) == NULL);
	CHECK(pmfi_match_posted(&m, true, 0, 0, 0x12ab) == a);
	check_empty();

	/* Everything ignored: any tag. */
	a->tag = 0;
	a->ignore = ~(uint64_t)0;
	pmfi_list_add_tail(&m.posted[1], &a->link);
	CHECK(pmfi_match_posted(&m, true, 9, 0, 0xffffffffffffffffull) == a);
	check_empty();
	free(a);
}

/* Tagged and untagged traffic never meet; untagged matching ignores tags. */
static void test_queues_separate(void)
{
	pmfi_match_init(&m);
	struct pmfi_req *u = post(false, ANY, 0, 0, &ctx[0]);

	CHECK(pmfi_match_posted(&m, true, 0, 0, 0) == NULL);
	CHECK_EQ(count(&m.posted[0]), 1);
	CHECK(pmfi_match_posted(&m, false, 0, 0, 0x77) == u);
	check_empty();

	struct pmfi_req *t = post(true, ANY, 0, 0, &ctx[1]);

	CHECK(pmfi_match_posted(&m, false, 0, 0, 0) == NULL);
	CHECK(pmfi_match_posted(&m, true, 0, 0, 0) == t);
	check_empty();

	/* The same on the unexpected side. */
	struct pmfi_unexp *mu = arrive(false, 1, 0, 8);
	struct pmfi_req *rt = recv_req(true, ANY, 0, ~(uint64_t)0);
	struct pmfi_req *ru = recv_req(false, ANY, 0x55, 0);

	CHECK(pmfi_match_unexp(&m, rt, false) == NULL);
	CHECK(pmfi_match_unexp(&m, ru, false) == mu);
	check_empty();

	struct pmfi_unexp *mt = arrive(true, 1, 0, 8);

	CHECK(pmfi_match_unexp(&m, ru, false) == NULL);
	CHECK(pmfi_match_unexp(&m, rt, false) == mt);
	check_empty();
	free(u);
	free(t);
	free(mu);
	free(mt);
	free(rt);
	free(ru);
}

/* Unexpected messages: arrival order, source and tag rules as for posting. */
static void test_unexp_match(void)
{
	pmfi_match_init(&m);
	struct pmfi_unexp *m1 = arrive(true, 1, 0x10, 4);
	struct pmfi_unexp *m2 = arrive(true, 2, 0x11, 4);
	struct pmfi_unexp *m3 = arrive(true, 1, 0x11, 4);
	struct pmfi_req *r = recv_req(true, ANY, 0x10, 0x1);

	/* First arrived first: m1, then m2 (another peer), then m3. */
	CHECK(pmfi_match_unexp(&m, r, false) == m1);
	check_unlinked(&m1->link);
	CHECK(pmfi_match_unexp(&m, r, false) == m2);
	CHECK(pmfi_match_unexp(&m, r, false) == m3);
	CHECK(pmfi_match_unexp(&m, r, false) == NULL);
	check_empty();

	/* Directed: only that peer's, in its order. */
	pmfi_list_add_tail(&m.unexp[1], &m1->link);
	pmfi_list_add_tail(&m.unexp[1], &m2->link);
	pmfi_list_add_tail(&m.unexp[1], &m3->link);
	r->peer = 2;
	r->ignore = 0;
	r->tag = 0x10;
	CHECK(pmfi_match_unexp(&m, r, false) == NULL);
	r->tag = 0x11;
	CHECK(pmfi_match_unexp(&m, r, false) == m2);
	CHECK(pmfi_match_unexp(&m, r, false) == NULL);
	r->peer = 1;
	CHECK(pmfi_match_unexp(&m, r, false) == m3);
	r->tag = 0x10;
	CHECK(pmfi_match_unexp(&m, r, false) == m1);
	check_empty();
	free(m1);
	free(m2);
	free(m3);
	free(r);
}

/* FI_PEEK leaves the message where it is; a receive then takes it. */
static void test_peek_take(void)
{
	pmfi_match_init(&m);
	struct pmfi_unexp *m1 = arrive(true, 4, 9, 16);
	struct pmfi_unexp *m2 = arrive(true, 4, 9, 16);
	struct pmfi_req *r = recv_req(true, 4, 9, 0);

	CHECK(pmfi_match_unexp(&m, r, true) == m1);
	CHECK(pmfi_match_unexp(&m, r, true) == m1);
	CHECK_EQ(count(&m.unexp[1]), 2);
	CHECK(m.unexp[1].next == &m1->link);
	CHECK(pmfi_match_unexp(&m, r, false) == m1);
	check_unlinked(&m1->link);
	CHECK_EQ(count(&m.unexp[1]), 1);
	CHECK(pmfi_match_unexp(&m, r, true) == m2);
	CHECK(pmfi_match_unexp(&m, r, false) == m2);
	CHECK(pmfi_match_unexp(&m, r, true) == NULL);
	check_empty();
	free(m1);
	free(m2);
	free(r);
}

/* fi_cancel: only a posted receive is found, by its context, and unlinked. */
static void test_cancel(void)
{
	pmfi_match_init(&m);
	struct pmfi_req *a = post(true, ANY, 1, 0, &ctx[0]);
	struct pmfi_req *b = post(false, 3, 0, 0, &ctx[1]);
	struct pmfi_req *c = post(true, 3, 2, 0, &ctx[2]);
	struct pmfi_unexp *u = arrive(true, 3, 1, 0);

	/* Nothing posted with that context (an unexpected message has none). */
	CHECK(pmfi_match_cancel(&m, &ctx[5]) == NULL);
	CHECK(pmfi_match_cancel(&m, NULL) == NULL);

	CHECK(pmfi_match_cancel(&m, &ctx[1]) == b);
	check_unlinked(&b->link);
	CHECK(pmfi_list_empty(&m.posted[0]));
	CHECK(pmfi_match_cancel(&m, &ctx[1]) == NULL);

	/* Matched (taken from the queue), a receive can no longer be cancelled. */
	CHECK(pmfi_match_posted(&m, true, 3, 0, 1) == a);
	CHECK(pmfi_match_cancel(&m, &ctx[0]) == NULL);

	/* The others stay, in order. */
	CHECK_EQ(count(&m.posted[1]), 1);
	CHECK_EQ(count(&m.unexp[1]), 1);
	CHECK(pmfi_match_cancel(&m, &ctx[2]) == c);
	CHECK(pmfi_list_empty(&m.posted[1]));
	CHECK(m.unexp[1].next == &u->link);

	pmfi_list_del(&u->link);
	check_empty();
	free(a);
	free(b);
	free(c);
	free(u);
}

/* A source is an endpoint: a receive directed at endpoint 1 of peer 3
 * takes neither endpoint 0's message nor another peer's endpoint 1's,
 * posted or unexpected; a receive from any source takes either. */
static void test_source_endpoint(void)
{
	pmfi_match_init(&m);
	struct pmfi_req *ep1 = post(true, 3, 5, 0, &ctx[0]);

	ep1->peer_ep = 1;
	CHECK(pmfi_match_posted(&m, true, 3, 0, 5) == NULL);
	CHECK(pmfi_match_posted(&m, true, 2, 1, 5) == NULL);
	CHECK(pmfi_match_posted(&m, true, 3, 1, 5) == ep1);
	check_empty();

	struct pmfi_unexp *from0 = arrive(true, 3, 5, 0);
	struct pmfi_unexp *from1 = arrive(true, 3, 5, 0);
	struct pmfi_req *want = recv_req(true, 3, 5, 0);
	struct pmfi_req *any = recv_req(true, ANY, 5, 0);

	from1->peer_ep = 1;
	want->peer_ep = 1;
	CHECK(pmfi_match_unexp(&m, want, false) == from1);
	CHECK(pmfi_match_unexp(&m, want, false) == NULL);
	CHECK(pmfi_match_unexp(&m, any, false) == from0);
	check_empty();
	free(ep1);
	free(from0);
	free(from1);
	free(want);
	free(any);
}

int main(void)
{
	test_tag_matches();
	test_posted_order();
	test_posted_source();
	test_source_endpoint();
	test_posted_ignore();
	test_queues_separate();
	test_unexp_match();
	test_peek_take();
	test_cancel();
	printf("match tests passed\n");
	return 0;
}
