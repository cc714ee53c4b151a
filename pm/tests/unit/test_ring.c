/* SPDX-License-Identifier: MIT */
/*
 * test_ring.c - the SPSC message ring (pm/src/ring.[ch]).
 *
 * The expected positions come from a model written here from the layout in
 * ring.h (records of 16 + len bytes rounded up to 64, a PAD record in front
 * of one that would straddle the end), not from the code under test.
 * Rings are allocated at their exact footprint so that AddressSanitizer
 * catches any access outside them.
 */
#include "check.h"
#include "core/ring.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define SMALL 4096u     /* the smallest ring: max message 1024 */

struct ring {
	void *mem;
	uint64_t size;
	struct ring_producer p;
	struct ring_consumer c;
};

/* What the ring's header says, as another process sees it. */
struct rec_hdr {
	uint32_t len;
	uint32_t flags;
	uint64_t mark;          /* position + 1 once published */
};

static void ring_new(struct ring *r, uint64_t size)
{
	CHECK(ring_size_valid(size));
	r->size = size;
	r->mem = aligned_alloc(64, ring_footprint(size));
	CHECK(r->mem);
	/* Garbage first: ring_init must not rely on zeroed memory. */
	memset(r->mem, 0xa5, ring_footprint(size));
	ring_init(r->mem, size);
	ring_producer_attach(&r->p, r->mem, size);
	ring_consumer_attach(&r->c, r->mem, size);
}

static void ring_free(struct ring *r)
{
	free(r->mem);
	memset(r, 0, sizeof(*r));
}

static struct ring_shared *shared(struct ring *r)
{
	return r->mem;
}

static uint8_t *data_area(struct ring *r)
{
	return (uint8_t *)r->mem + RING_HDR_BYTES;
}

static struct rec_hdr *hdr_at(struct ring *r, uint64_t pos)
{
	return (struct rec_hdr *)(data_area(r) + (pos & (r->size - 1)));
}

static uint64_t model_rec(uint64_t len)
{
	return (16 + len + 63) / 64 * 64;
}

static uint64_t shared_head(struct ring *r)
{
	return atomic_load(&shared(r)->head);
}

static uint64_t shared_tail(struct ring *r)
{
	return atomic_load(&shared(r)->tail);
}

/* Reserve, fill with the pattern of seed and publish; returns the buffer. */
static void *send_one(struct ring *r, size_t len, uint64_t seed)
{
	void *buf = NULL;

	CHECK_OK(ring_reserve(&r->p, len, &buf));
	CHECK(buf);
	check_fill(buf, len, seed);
	CHECK_OK(ring_publish(&r->p, len));
	return buf;
}

struct got {
	const void *data;
	size_t len;
	uint64_t cookie;
};

static struct got peek_one(struct ring *r)
{
	struct got g = { 0 };

	CHECK_OK(ring_peek(&r->c, &g.data, &g.len, &g.cookie));
	/* A delivered payload lies wholly inside the data area. */
	CHECK((const uint8_t *)g.data >= data_area(r) + RING_REC_HDR);
	CHECK((const uint8_t *)g.data + g.len <= data_area(r) + r->size);
	return g;
}

/*
 * Move producer and consumer to position `at` (a multiple of 64) through
 * ordinary traffic, never padding on the way.
 */
static void advance_to(struct ring *r, uint64_t at)
{
	while (shared_head(r) < at) {
		uint64_t head = shared_head(r);
		uint64_t chunk = at - head;
		uint64_t room = r->size - (head & (r->size - 1));

		if (chunk > room)
			chunk = room;
		if (chunk > 1024)
			chunk = 1024;
		send_one(r, (size_t)(chunk - RING_REC_HDR), head);

		struct got g;

		CHECK_OK(ring_peek(&r->c, &g.data, &g.len, &g.cookie));
		CHECK_OK(ring_release(&r->c, g.cookie));
	}
	CHECK_EQ(shared_head(r), at);
	CHECK_EQ(shared_tail(r), at);
}

/* ---- the basics ---- */

static void test_constants(void)
{
	CHECK(!ring_size_valid(0));
	CHECK(!ring_size_valid(2048));
	CHECK(!ring_size_valid(4096 + 64));
	CHECK(!ring_size_valid(3 * 4096));
	CHECK(ring_size_valid(4096));
	CHECK(ring_size_valid(512 * 1024));
	CHECK(ring_size_valid(1ull << 31));
	CHECK(!ring_size_valid(1ull << 32));
	CHECK_EQ(ring_footprint(4096), 4096 + RING_HDR_BYTES);
	CHECK_EQ(ring_max_message(4096), 1024);
	CHECK_EQ(ring_max_message(512 * 1024), 128 * 1024);
	CHECK_EQ(offsetof(struct ring_shared, head), 0);
	CHECK_EQ(offsetof(struct ring_shared, tail), 64);
}

static void test_in_order(void)
{
	struct ring r;
	uint64_t pos = 0;

	ring_new(&r, SMALL);
	CHECK_EQ(shared_head(&r), 0);
	CHECK_EQ(shared_tail(&r), 0);
	CHECK(!ring_readable(&r.c));

	struct got g;

	CHECK_ERR(ring_peek(&r.c, &g.data, &g.len, &g.cookie), -EAGAIN);
	for (uint64_t i = 0; i < 40; i++) {
		size_t len = (size_t)(i * 13 % 200);

		if ((pos & (SMALL - 1)) + model_rec(len) > SMALL)
			pos += SMALL - (pos & (SMALL - 1));     /* PAD to the end */
		void *buf = send_one(&r, len, i);

		/* The payload follows its 16-byte header at the model's place. */
		CHECK(buf == data_area(&r) + (pos & (SMALL - 1)) + RING_REC_HDR);
		pos += model_rec(len);
		CHECK_EQ(shared_head(&r), pos);
		CHECK(ring_readable(&r.c));

		g = peek_one(&r);
		CHECK(g.data == buf);
		CHECK_EQ(g.len, len);
		CHECK_PATTERN(g.data, g.len, i);
		CHECK_EQ(shared_tail(&r), pos - model_rec(len));   /* not yet released */
		CHECK_OK(ring_release(&r.c, g.cookie));
		CHECK_EQ(shared_tail(&r), pos);
		CHECK(!ring_readable(&r.c));
		CHECK_ERR(ring_peek(&r.c, &g.data, &g.len, &g.cookie), -EAGAIN);
	}
	/* Several queued, then taken in order. */
	for (uint64_t i = 0; i < 10; i++)
		send_one(&r, 20 + i, 100 + i);
	for (uint64_t i = 0; i < 10; i++) {
		g = peek_one(&r);
		CHECK_EQ(g.len, 20 + i);
		CHECK_PATTERN(g.data, g.len, 100 + i);
		CHECK_OK(ring_release(&r.c, g.cookie));
	}
	CHECK_EQ(shared_tail(&r), shared_head(&r));
	ring_free(&r);
}

static void test_out_of_order_release(void)
{
	struct ring r;
	struct got g[4];

	ring_new(&r, SMALL);
	send_one(&r, 10, 1);    /* [0, 64) */
	send_one(&r, 100, 2);   /* [64, 192) */
	send_one(&r, 48, 3);    /* [192, 256) */
	send_one(&r, 49, 4);    /* [256, 384) */
	for (int i = 0; i < 4; i++)
		g[i] = peek_one(&r);
	CHECK_EQ(g[0].cookie, 0);
	CHECK_EQ(g[1].cookie, 64);
	CHECK_EQ(g[2].cookie, 192);
	CHECK_EQ(g[3].cookie, 256);

	/* Releasing past the first unreleased record does not move the tail. */
	CHECK_OK(ring_release(&r.c, g[2].cookie));
	CHECK_EQ(shared_tail(&r), 0);
	CHECK_OK(ring_release(&r.c, g[1].cookie));
	CHECK_EQ(shared_tail(&r), 0);
	/* The data of unreleased messages stays intact meanwhile. */
	CHECK_PATTERN(g[0].data, g[0].len, 1);
	CHECK_PATTERN(g[3].data, g[3].len, 4);
	/* Releasing the first moves it over the whole released prefix. */
	CHECK_OK(ring_release(&r.c, g[0].cookie));
	CHECK_EQ(shared_tail(&r), 256);
	CHECK_OK(ring_release(&r.c, g[3].cookie));
	CHECK_EQ(shared_tail(&r), 384);

	/* The producer reuses exactly the freed space: fill the ring again
	 * with 64-byte records and count them. */
	int n = 0;
	void *buf;

	while (ring_reserve(&r.p, 48, &buf) == 0) {
		CHECK_OK(ring_publish(&r.p, 48));
		n++;
		CHECK(n <= (int)(SMALL / 64));
	}
	CHECK_EQ(n, SMALL / 64);
	ring_free(&r);
}

/*
 * Sizes walk from 0 to the largest message and back while the head goes
 * round the ring many times, so every record length meets every start
 * offset, and PAD records appear at every alignment.  Positions are
 * checked against the model after each step, with 0..3 messages held back.
 */
static void test_wrap_model(uint64_t size, int held)
{
	struct ring r;
	uint64_t head = 0, max = ring_max_message(size);
	/* held records, the padding and the new record must fit together, so
	 * that the producer never waits and the model stays exact. */
	uint64_t cap = size / (uint64_t)(held + 2) - 80;

	if (max > cap)
		max = cap;
	uint64_t pads = 0, pad_offsets[64] = { 0 };
	struct got queue[4];
	uint64_t seeds[4];
	int nq = 0;
	uint64_t seed = 1;

	ring_new(&r, size);
	for (uint64_t step = 0; step < 6 * (max + 1); step++) {
		uint64_t phase = step % (2 * (max + 1));
		size_t len = (size_t)(phase <= max ? phase : 2 * max + 1 - phase);
		uint64_t rec = model_rec(len);
		uint64_t off = head & (size - 1);
		void *buf;

		if (off + rec > size) {
			/* The model says: a PAD to the end, then the record at 0. */
			pads++;
			pad_offsets[(off / 64) % 64]++;
			head += size - off;
		}
		int err = ring_reserve(&r.p, len, &buf);

		CHECK_MSG(err == 0, "step %llu len %zu: %s", (unsigned long long)step, len,
			  check_errname(err));
		CHECK_MSG(buf == data_area(&r) + (head & (size - 1)) + RING_REC_HDR,
			  "step %llu len %zu: record at offset %td, model says %llu",
			  (unsigned long long)step, len,
			  (uint8_t *)buf - data_area(&r) - (ptrdiff_t)RING_REC_HDR,
			  (unsigned long long)(head & (size - 1)));
		CHECK((uint8_t *)buf + len <= data_area(&r) + size);
		check_fill(buf, len, seed);
		CHECK_OK(ring_publish(&r.p, len));
		head += rec;
		CHECK_EQ(shared_head(&r), head);

		queue[nq] = peek_one(&r);
		seeds[nq] = seed++;
		CHECK(queue[nq].data == buf);
		CHECK_EQ(queue[nq].len, len);
		nq++;
		if (nq > held) {
			CHECK_PATTERN(queue[0].data, queue[0].len, seeds[0]);
			CHECK_OK(ring_release(&r.c, queue[0].cookie));
			memmove(queue, queue + 1, (size_t)(nq - 1) * sizeof(queue[0]));
			memmove(seeds, seeds + 1, (size_t)(nq - 1) * sizeof(seeds[0]));
			nq--;
		}
	}
	/* The walk must really have padded, at many different offsets. */
	CHECK(pads > 10);
	int distinct = 0;

	for (int i = 0; i < 64; i++)
		distinct += pad_offsets[i] != 0;
	CHECK_MSG(distinct >= 8, "PADs at only %d offsets", distinct);
	while (nq) {
		CHECK_PATTERN(queue[nq - 1].data, queue[nq - 1].len, seeds[nq - 1]);
		CHECK_OK(ring_release(&r.c, queue[nq - 1].cookie));
		nq--;
	}
	CHECK_EQ(shared_tail(&r), head);
	ring_free(&r);
}

/*
 * Every start offset, with the lengths around the end of the ring: the one
 * that ends exactly at the end (no PAD), one byte more (PAD, record at 0),
 * and the small and largest ones.
 */
static void test_pad_every_offset(uint64_t size)
{
	struct ring r;
	uint64_t max = ring_max_message(size), seed = 0;
	int padded = 0;

	ring_new(&r, size);
	for (uint64_t off = 0; off < size; off += 64) {
		uint64_t to_end = size - off - RING_REC_HDR;
		uint64_t lens[] = { 0, 1, 47, 48, 49, to_end - 1, to_end, to_end + 1,
				    max - 1, max };

		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			uint64_t len = lens[k];

			if (len > max)
				continue;
			uint64_t head = shared_head(&r);
			uint64_t at = head + ((off - (head & (size - 1))) & (size - 1));

			advance_to(&r, at);
			bool pad = off + model_rec(len) > size;
			uint64_t rec_pos = pad ? at + (size - off) : at;
			void *buf = send_one(&r, (size_t)len, ++seed);

			padded += pad;
			CHECK_MSG(buf == data_area(&r) + (rec_pos & (size - 1)) + RING_REC_HDR,
				  "offset %llu len %llu: record at %td, expected %llu",
				  (unsigned long long)off, (unsigned long long)len,
				  (uint8_t *)buf - data_area(&r) - (ptrdiff_t)RING_REC_HDR,
				  (unsigned long long)(rec_pos & (size - 1)));
			CHECK_EQ(shared_head(&r), rec_pos + model_rec(len));
			if (pad) {
				struct rec_hdr *h = hdr_at(&r, at);

				CHECK_EQ(h->flags, 1);  /* PAD */
				CHECK_EQ(model_rec(h->len), size - off);
			}
			struct got g = peek_one(&r);

			CHECK(g.data == buf);
			CHECK_EQ(g.cookie, rec_pos);
			CHECK_EQ(g.len, len);
			CHECK_PATTERN(g.data, g.len, seed);
			CHECK_OK(ring_release(&r.c, g.cookie));
			CHECK_EQ(shared_tail(&r), shared_head(&r));
		}
	}
	/* A PAD is possible wherever the largest record does not fit. */
	CHECK(padded >= (int)((model_rec(max) - 64) / 64));
	ring_free(&r);
}

/* A PAD with no message after it (the sender gave up) is skipped too. */
static void test_pad_alone(void)
{
	struct ring r;
	void *buf;

	ring_new(&r, SMALL);
	/* Three 1088-byte records: 3264 used, 832 left before the end. */
	for (int i = 0; i < 3; i++)
		send_one(&r, 1024, (uint64_t)i);
	/* A fourth does not fit: the PAD is published alone, then -EAGAIN. */
	CHECK_ERR(ring_reserve(&r.p, 1024, &buf), -EAGAIN);
	CHECK_EQ(shared_head(&r), SMALL);
	CHECK_EQ(hdr_at(&r, 3264)->flags & 1u, 1u);
	/* The consumer sees three messages, skips the PAD, then nothing. */
	struct got g[3];

	for (int i = 0; i < 3; i++) {
		g[i] = peek_one(&r);
		CHECK_EQ(g[i].len, 1024);
		CHECK_PATTERN(g[i].data, 1024, (uint64_t)i);
	}
	struct got none;

	CHECK_ERR(ring_peek(&r.c, &none.data, &none.len, &none.cookie), -EAGAIN);
	/* Releasing the first makes room for exactly one 1024 at offset 0. */
	CHECK_OK(ring_release(&r.c, g[0].cookie));
	CHECK_EQ(shared_tail(&r), 1088);
	CHECK_OK(ring_reserve(&r.p, 1024, &buf));
	CHECK(buf == data_area(&r) + RING_REC_HDR);
	check_fill(buf, 1024, 9);
	CHECK_OK(ring_publish(&r.p, 1024));
	CHECK_ERR(ring_reserve(&r.p, 0, &buf), -EAGAIN);
	/* Releasing the rest moves the tail over the PAD as well. */
	CHECK_OK(ring_release(&r.c, g[2].cookie));
	CHECK_EQ(shared_tail(&r), 1088);
	CHECK_OK(ring_release(&r.c, g[1].cookie));
	CHECK_EQ(shared_tail(&r), SMALL);
	struct got last = peek_one(&r);

	CHECK_EQ(last.len, 1024);
	CHECK_PATTERN(last.data, 1024, 9);
	CHECK_OK(ring_release(&r.c, last.cookie));
	CHECK_EQ(shared_tail(&r), SMALL + 1088);
	ring_free(&r);
}

static void test_full(void)
{
	struct ring r;
	struct got g[SMALL / 64];
	void *buf;
	int n = 0;

	ring_new(&r, SMALL);
	/* 64-byte records (len <= 48) fill the ring exactly. */
	while (n < (int)(SMALL / 64)) {
		send_one(&r, (size_t)(n % 49), (uint64_t)n + 1000);
		n++;
	}
	CHECK_EQ(ring_free_bytes(&r.p), 0);
	/* Full: every size is refused, again and again, and nothing moves. */
	for (int i = 0; i < 100; i++) {
		CHECK_ERR(ring_reserve(&r.p, (size_t)(i * 10 % 1025), &buf), -EAGAIN);
		CHECK_EQ(shared_head(&r), SMALL);
	}
	for (int i = 0; i < n; i++) {
		g[i] = peek_one(&r);
		CHECK_EQ(g[i].len, i % 49);
		CHECK_PATTERN(g[i].data, g[i].len, (uint64_t)i + 1000);
	}
	/* Read but not released: still full. */
	CHECK_ERR(ring_reserve(&r.p, 0, &buf), -EAGAIN);
	/* Releasing the second does not help (the tail stays at the first). */
	CHECK_OK(ring_release(&r.c, g[1].cookie));
	CHECK_ERR(ring_reserve(&r.p, 0, &buf), -EAGAIN);
	CHECK_EQ(ring_free_bytes(&r.p), 0);
	/* Releasing the first frees both records: two 64-byte messages or one
	 * 112-byte message fit, not more. */
	CHECK_OK(ring_release(&r.c, g[0].cookie));
	CHECK_EQ(ring_free_bytes(&r.p), 128);
	CHECK_ERR(ring_reserve(&r.p, 113, &buf), -EAGAIN);
	CHECK_OK(ring_reserve(&r.p, 112, &buf));
	check_fill(buf, 112, 7);
	CHECK_OK(ring_publish(&r.p, 112));
	CHECK_ERR(ring_reserve(&r.p, 0, &buf), -EAGAIN);
	/* The other messages were not touched by any of it. */
	for (int i = 2; i < n; i++)
		CHECK_PATTERN(g[i].data, g[i].len, (uint64_t)i + 1000);
	for (int i = 2; i < n; i++)
		CHECK_OK(ring_release(&r.c, g[i].cookie));
	struct got x = peek_one(&r);

	CHECK_EQ(x.len, 112);
	CHECK_PATTERN(x.data, 112, 7);
	CHECK_OK(ring_release(&r.c, x.cookie));
	CHECK_EQ(ring_free_bytes(&r.p), SMALL);
	ring_free(&r);
}

static void test_sizes_and_misuse(void)
{
	struct ring r;
	void *buf, *buf2;
	uint64_t sizes[] = { SMALL, 64 * 1024, 512 * 1024 };

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		uint64_t size = sizes[k];
		size_t max = ring_max_message(size);

		ring_new(&r, size);
		CHECK_ERR(ring_reserve(&r.p, max + 1, &buf), -EMSGSIZE);
		CHECK_ERR(ring_reserve(&r.p, SIZE_MAX, &buf), -EMSGSIZE);
		CHECK_ERR(ring_reserve(&r.p, (size_t)UINT32_MAX + 1, &buf), -EMSGSIZE);
		/* The largest message fits however the ring has wrapped: place
		 * the head half a message before the end, so it needs a PAD. */
		advance_to(&r, size - max / 2);

		struct got g;

		for (int i = 0; i < 3; i++) {
			send_one(&r, max, 2 + (uint64_t)i);
			g = peek_one(&r);
			CHECK_EQ(g.len, max);
			CHECK_PATTERN(g.data, max, 2 + (uint64_t)i);
			CHECK_OK(ring_release(&r.c, g.cookie));
		}
		ring_free(&r);
	}

	ring_new(&r, SMALL);
	/* Publishing with nothing reserved. */
	CHECK_ERR(ring_publish(&r.p, 0), -EINVAL);
	/* One reservation at a time. */
	CHECK_OK(ring_reserve(&r.p, 100, &buf));
	CHECK_ERR(ring_reserve(&r.p, 10, &buf2), -EBUSY);
	/* Publishing more than was reserved is refused; the reservation stays. */
	CHECK_ERR(ring_publish(&r.p, 101), -EMSGSIZE);
	CHECK_EQ(shared_head(&r), 0);
	/* Publishing less: the record shrinks to fit what was sent. */
	check_fill(buf, 17, 5);
	CHECK_OK(ring_publish(&r.p, 17));
	CHECK_EQ(shared_head(&r), model_rec(17));
	CHECK_ERR(ring_publish(&r.p, 17), -EINVAL);
	void *next = send_one(&r, 30, 6);

	CHECK(next == data_area(&r) + model_rec(17) + RING_REC_HDR);
	struct got a = peek_one(&r), b = peek_one(&r);

	CHECK_EQ(a.len, 17);
	CHECK_PATTERN(a.data, 17, 5);
	CHECK_EQ(b.len, 30);
	CHECK_PATTERN(b.data, 30, 6);
	CHECK_OK(ring_release(&r.c, a.cookie));
	CHECK_OK(ring_release(&r.c, b.cookie));
	/* Publishing zero bytes of a large reservation. */
	CHECK_OK(ring_reserve(&r.p, 1024, &buf));
	CHECK_OK(ring_publish(&r.p, 0));
	a = peek_one(&r);
	CHECK_EQ(a.len, 0);
	CHECK_OK(ring_release(&r.c, a.cookie));
	CHECK_EQ(shared_tail(&r), shared_head(&r));
	ring_free(&r);
}

static void test_bad_cookies(void)
{
	struct ring r;
	void *buf;

	ring_new(&r, SMALL);
	send_one(&r, 10, 1);    /* 0 */
	send_one(&r, 100, 2);   /* 64 */
	send_one(&r, 10, 3);    /* 192: published, not yet peeked */
	struct got a = peek_one(&r), b = peek_one(&r);

	CHECK_ERR(ring_release(&r.c, 192), -EINVAL);    /* not delivered yet */
	CHECK_ERR(ring_release(&r.c, 256), -EINVAL);    /* beyond the head */
	CHECK_ERR(ring_release(&r.c, 1u << 20), -EINVAL);
	CHECK_ERR(ring_release(&r.c, UINT64_MAX), -EINVAL);
	CHECK_ERR(ring_release(&r.c, 32), -EINVAL);     /* misaligned */
	CHECK_ERR(ring_release(&r.c, 65), -EINVAL);
	/* Double release while the tail is still behind it. */
	CHECK_OK(ring_release(&r.c, b.cookie));
	CHECK_ERR(ring_release(&r.c, b.cookie), -EINVAL);
	/* Double release once the tail has passed it. */
	CHECK_OK(ring_release(&r.c, a.cookie));
	CHECK_EQ(shared_tail(&r), 192);
	CHECK_ERR(ring_release(&r.c, a.cookie), -EINVAL);
	CHECK_ERR(ring_release(&r.c, b.cookie), -EINVAL);
	/* The bad releases changed nothing: the third message comes intact. */
	struct got c = peek_one(&r);

	CHECK_EQ(c.cookie, 192);
	CHECK_PATTERN(c.data, 10, 3);
	CHECK_OK(ring_release(&r.c, c.cookie));
	CHECK_EQ(shared_tail(&r), 256);

	/* A PAD skipped by the consumer is not a message: its position is not
	 * a cookie that can be released. */
	send_one(&r, 1024, 4);  /* 256..1344 */
	send_one(&r, 1024, 5);  /* 1344..2432 */
	send_one(&r, 1024, 6);  /* 2432..3520: 576 left to the end */
	struct got m[3];

	for (int i = 0; i < 3; i++)
		m[i] = peek_one(&r);
	for (int i = 0; i < 3; i++)
		CHECK_OK(ring_release(&r.c, m[i].cookie));
	send_one(&r, 1024, 7);  /* PAD at 3520, record at 4096 */
	struct got d = peek_one(&r);

	CHECK_EQ(d.cookie, SMALL);
	CHECK_ERR(ring_release(&r.c, 3520), -EINVAL);
	CHECK_OK(ring_release(&r.c, d.cookie));
	CHECK_EQ(shared_tail(&r), SMALL + 1088);
	CHECK_OK(ring_reserve(&r.p, 0, &buf));
	ring_free(&r);
}

/* ---- a misbehaving producer ---- */

enum corruption {
	C_LEN_OVER_MAX,
	C_LEN_HUGE,
	C_STRADDLE,
	C_FLAGS_UNKNOWN,
	C_FLAGS_RELEASED,
	C_PAD_SHORT,
	C_PAD_LONG,
	C_COUNT
};

static const char *const corruption_name[C_COUNT] = {
	"len over max message", "len 0xffffffff", "record straddles the end",
	"unknown flags", "released flag set", "PAD short of the end", "PAD past the end",
};

/* Publish the header at pos as a producer does: its mark, last. */
static void mark_published(struct ring *r, uint64_t pos)
{
	__atomic_store_n(&hdr_at(r, pos)->mark, pos + 1, __ATOMIC_RELEASE);
}

/*
 * Write the corruption into the shared memory the way a broken or hostile
 * sender could, with the consumer at read position `at` (0 or near the
 * end), and publish it.  ring_peek must say -EPROTO, and keep saying it.
 */
static void test_corruption(enum corruption what, uint64_t at)
{
	struct ring r;
	struct got g;

	ring_new(&r, SMALL);
	advance_to(&r, at);

	struct rec_hdr *h = hdr_at(&r, at);
	uint64_t off = at & (SMALL - 1);

	switch (what) {
	case C_LEN_OVER_MAX:
		h->len = 2000;  /* fits in the data area, over max */
		h->flags = 0;
		break;
	case C_LEN_HUGE:
		h->len = UINT32_MAX;
		h->flags = 0;
		break;
	case C_STRADDLE:
		h->len = (uint32_t)(SMALL - off);       /* 16 bytes too long */
		h->flags = 0;
		break;
	case C_FLAGS_UNKNOWN:
		h->len = 10;
		h->flags = 4;
		break;
	case C_FLAGS_RELEASED:
		h->len = 10;
		h->flags = 2;
		break;
	case C_PAD_SHORT: {
		/* A PAD that stops 64 bytes short of the end, followed by a
		 * well-formed record in those 64 bytes: a PAD must reach the
		 * end, so this is refused rather than delivered. */
		h->len = (uint32_t)(SMALL - off - 16 - 64);
		h->flags = 1;

		uint64_t t_pos = at + (SMALL - off) - 64;
		struct rec_hdr *t = hdr_at(&r, t_pos);

		t->len = 10;
		t->flags = 0;
		mark_published(&r, t_pos);
		break;
	}
	case C_PAD_LONG:
		h->len = (uint32_t)(SMALL - off - 16 + 64);
		h->flags = 1;
		break;
	case C_COUNT:
		break;
	}
	mark_published(&r, at);
	for (int i = 0; i < 3; i++) {
		int err = ring_peek(&r.c, &g.data, &g.len, &g.cookie);

		CHECK_MSG(err == -EPROTO, "%s at %llu: ring_peek said %s, expected -EPROTO",
			  corruption_name[what], (unsigned long long)at, check_errname(err));
	}
	ring_free(&r);
}

/*
 * A record is published by its mark alone.  A well-formed header whose mark
 * is another position's (a lap behind or ahead, or one off) is not
 * published: nothing is delivered and the ring stays usable.
 */
static void test_wrong_marks(void)
{
	const uint64_t at = 2 * SMALL + 512;
	const uint64_t wrong[] = {
		0,                      /* never published */
		at,                     /* the position, not position + 1 */
		at + 1 - SMALL,         /* a lap behind */
		at + 1 + SMALL,         /* a lap ahead */
		at + 1 + 64,            /* the next slot's */
		UINT64_MAX,
	};

	for (size_t k = 0; k < sizeof(wrong) / sizeof(wrong[0]); k++) {
		struct ring r;
		struct got g;

		ring_new(&r, SMALL);
		advance_to(&r, at);

		struct rec_hdr *h = hdr_at(&r, at);

		h->len = 10;
		h->flags = 0;
		__atomic_store_n(&h->mark, wrong[k], __ATOMIC_RELEASE);
		CHECK(!ring_readable(&r.c));
		CHECK_ERR(ring_peek(&r.c, &g.data, &g.len, &g.cookie), -EAGAIN);
		/* The producer's own publication is still taken. */
		send_one(&r, 10, 5);
		CHECK(ring_readable(&r.c));
		g = peek_one(&r);
		CHECK_EQ(g.cookie, at);
		CHECK_EQ(g.len, 10);
		CHECK_PATTERN(g.data, g.len, 5);
		ring_free(&r);
	}
}

/*
 * Old payload that reads as the next record's mark.  Every word of each
 * payload holds the mark the slot it lies in would carry one lap later, so
 * that when the producer wraps, the word at the consumer's next read
 * position, if it were still there, would say "published".  The producer
 * clears the next slot's mark as it publishes (ring.c, publish()): the
 * consumer must see exactly the messages sent, in order, and never one
 * more.
 */
static void test_no_phantom_records(void)
{
	struct ring r;
	uint64_t sent = 0, got_count = 0;

	ring_new(&r, SMALL);
	for (int round = 0; round < 40; round++) {
		/* Sizes walk so that record boundaries of one lap fall inside
		 * the payloads of the last. */
		size_t len = 16 + (size_t)(round * 72) % 900;
		void *buf;

		if (ring_reserve(&r.p, len, &buf) == 0) {
			uint64_t pos = r.p.reserved_pos;
			uint8_t *p = buf;

			for (size_t i = 0; i + 8 <= len; i += 8) {
				uint64_t word_pos = pos + RING_REC_HDR + i;
				uint64_t slot = word_pos & ~(uint64_t)63;
				uint64_t forged = slot + SMALL + 1;

				memcpy(p + i, &forged, 8);
			}
			CHECK_OK(ring_publish(&r.p, len));
			sent++;
		}
		/* Drain all but nothing extra. */
		struct got g;

		while (ring_peek(&r.c, &g.data, &g.len, &g.cookie) == 0) {
			got_count++;
			CHECK_U64(got_count, <=, sent);
			CHECK_OK(ring_release(&r.c, g.cookie));
		}
		CHECK_EQ(got_count, sent);
		CHECK(!ring_readable(&r.c));
	}
	CHECK_U64(sent, >, 30);
	ring_free(&r);
}

/*
 * A sender that rewrites a record's length after it was delivered must not
 * throw the consumer's tail past what the consumer has read (the tail then
 * says space is free that holds unreleased messages).
 */
static void test_len_rewritten_after_peek(void)
{
	struct ring r;

	ring_new(&r, SMALL);
	send_one(&r, 10, 1);
	send_one(&r, 10, 2);
	struct got a = peek_one(&r);

	hdr_at(&r, a.cookie)->len = 3000;
	CHECK_OK(ring_release(&r.c, a.cookie));
	CHECK_MSG(shared_tail(&r) <= r.c.read,
		  "tail %llu passed the read position %llu",
		  (unsigned long long)shared_tail(&r), (unsigned long long)r.c.read);
	CHECK_U64(shared_tail(&r), <=, shared_head(&r));
	ring_free(&r);
}

/*
 * Random garbage everywhere: the consumer may deliver or refuse, but every
 * delivered payload lies in the data area and nothing crashes (run under
 * ASan, which bounds the allocation exactly).
 */
static void test_fuzz(void)
{
	uint64_t rng = 0x1234567ull;
	struct ring r;

	for (int iter = 0; iter < 3000; iter++) {
		ring_new(&r, SMALL);

		uint8_t *d = data_area(&r);

		for (uint64_t i = 0; i < SMALL; i += 8) {
			uint64_t w = check_rand(&rng);

			memcpy(d + i, &w, 8);
		}
		uint64_t start = (check_rand(&rng) % (SMALL / 64)) * 64 +
				 (check_rand(&rng) % 3) * SMALL;
		uint64_t lap = start / SMALL * SMALL;

		/* Mostly plausible headers, so the checks past the first are
		 * reached: small lengths, flags 0 or PAD, and a mark that
		 * publishes the slot in this lap or the next. */
		for (uint64_t pos = 0; pos < SMALL; pos += 64) {
			struct rec_hdr *h = hdr_at(&r, pos);
			uint64_t x = check_rand(&rng);

			if (x % 4 != 0) {
				h->len = (uint32_t)(x >> 8) % (x % 3 ? 200u : 5000u);
				h->flags = (x >> 40) % 5 == 0 ? 1u : 0u;
				h->mark = lap + ((x >> 48) % 2) * SMALL + pos + 1;
			}
		}
		if (start) {
			atomic_store(&shared(&r)->head, start);
			atomic_store(&shared(&r)->tail, start);
			ring_consumer_attach(&r.c, r.mem, SMALL);
		}
		for (int k = 0; k < 200; k++) {
			struct got g;
			int err = ring_peek(&r.c, &g.data, &g.len, &g.cookie);

			if (err) {
				CHECK(err == -EAGAIN || err == -EPROTO);
				break;
			}
			CHECK((const uint8_t *)g.data >= d + RING_REC_HDR);
			CHECK((const uint8_t *)g.data + g.len <= d + SMALL);
			CHECK(g.len <= ring_max_message(SMALL));
			CHECK_U64(r.c.read, <=, lap + 2 * SMALL);
			if (check_rand(&rng) % 2)
				CHECK_OK(ring_release(&r.c, g.cookie));
		}
		ring_free(&r);
	}
}

/* ---- two threads ---- */

struct stress {
	struct ring r;
	uint64_t count;
	uint64_t seed;
	int hold;               /* consumer keeps up to this many unreleased */
	uint64_t eagain;
};

static size_t stress_len(uint64_t *rng, size_t max)
{
	uint64_t x = check_rand(rng);

	switch (x % 8) {
	case 0:
		return (size_t)((x >> 8) % (max + 1));
	case 1:
	case 2:
		return (size_t)((x >> 8) % 1025);
	default:
		return (size_t)((x >> 8) % 97);
	}
}

static void *stress_producer(void *arg)
{
	struct stress *s = arg;
	uint64_t rng = s->seed;
	size_t max = ring_max_message(s->r.size);

	for (uint64_t i = 0; i < s->count; i++) {
		size_t len = stress_len(&rng, max);
		size_t want = len;
		void *buf;
		int err;

		/* Sometimes reserve more than is sent. */
		if (len < max && check_rand(&rng) % 16 == 0)
			want = len + (size_t)(check_rand(&rng) % (max - len + 1));
		while ((err = ring_reserve(&s->r.p, want, &buf)) == -EAGAIN) {
			s->eagain++;
			sched_yield();
		}
		CHECK_OK(err);
		/* The pattern's seed is the sequence number: a message out of
		 * order or overwritten does not match its expected pattern. */
		check_fill(buf, len, i);
		CHECK_OK(ring_publish(&s->r.p, len));
	}
	return NULL;
}

static void stress_run(uint64_t size, uint64_t count, int hold)
{
	struct stress s = { .count = count, .seed = 42 + size + (uint64_t)hold, .hold = hold };
	pthread_t th;
	uint64_t rng = s.seed;
	uint64_t crng = s.seed ^ 0xabcdefull;
	size_t max = ring_max_message(size);
	struct got held[65];     /* hold, plus the one just taken */
	int nheld = 0;
	uint64_t deadline = check_now_ns() + 120ull * 1000000000u;

	CHECK(hold <= 64);
	ring_new(&s.r, size);
	CHECK_EQ(pthread_create(&th, NULL, stress_producer, &s), 0);
	for (uint64_t i = 0; i < count; i++) {
		size_t len = stress_len(&rng, max);

		if (len < max && check_rand(&rng) % 16 == 0)
			(void)check_rand(&rng);
		struct got g;
		int err;

		while ((err = ring_peek(&s.r.c, &g.data, &g.len, &g.cookie)) == -EAGAIN) {
			CHECK_MSG(check_now_ns() < deadline, "stuck at message %llu",
				  (unsigned long long)i);
			/* The producer may wait for space that held messages
			 * occupy: give one back, as a receiver would. */
			if (nheld > 0) {
				int k = (int)(check_rand(&crng) % (uint64_t)nheld);

				CHECK_OK(ring_release(&s.r.c, held[k].cookie));
				held[k] = held[--nheld];
			}
			sched_yield();
		}
		CHECK_OK(err);
		CHECK_MSG(g.len == len, "message %llu: %zu bytes, expected %zu",
			  (unsigned long long)i, g.len, len);
		CHECK_PATTERN(g.data, len, i);
		held[nheld++] = g;
		/* Release a random held message once enough are held. */
		while (nheld > 0 && (nheld > hold || i + 1 == count)) {
			int k = (int)(check_rand(&crng) % (uint64_t)nheld);

			CHECK_OK(ring_release(&s.r.c, held[k].cookie));
			held[k] = held[--nheld];
		}
	}
	CHECK_EQ(pthread_join(th, NULL), 0);
	CHECK_EQ(shared_tail(&s.r), shared_head(&s.r));
	struct got none;

	CHECK_ERR(ring_peek(&s.r.c, &none.data, &none.len, &none.cookie), -EAGAIN);
	printf("stress ring %llu B, %llu messages, hold %d: producer waited %llu times\n",
	       (unsigned long long)size, (unsigned long long)count, hold,
	       (unsigned long long)s.eagain);
	ring_free(&s.r);
}

int main(int argc, char **argv)
{
	uint64_t stress_count = 1000000;

	if (argc > 1)
		stress_count = strtoull(argv[1], NULL, 0);
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_constants();
	test_in_order();
	test_out_of_order_release();
	for (int held = 0; held <= 3; held++)
		test_wrap_model(SMALL, held);
	test_wrap_model(8192, 2);
	test_pad_every_offset(SMALL);
	test_pad_every_offset(8192);
	test_pad_alone();
	test_full();
	test_sizes_and_misuse();
	test_bad_cookies();
	for (int c = 0; c < C_COUNT; c++) {
		test_corruption((enum corruption)c, 0);
		test_corruption((enum corruption)c, SMALL - 128);
		test_corruption((enum corruption)c, 3 * SMALL + 1024);
	}
	test_len_rewritten_after_peek();
	test_wrong_marks();
	test_no_phantom_records();
	test_fuzz();
	printf("single-threaded ring tests passed\n");
	stress_run(SMALL, stress_count / 4, 0);
	stress_run(16 * 1024, stress_count / 2, 8);
	stress_run(64 * 1024, stress_count / 4, 64);
	printf("ring tests passed\n");
	return 0;
}
