/* SPDX-License-Identifier: MIT */
/* Page sets: membership, walking, clearing, and their wire form in
 * chunks; malformed runs refused whole; runs across words, decoded onto
 * pages already there, and unions, against a reference bitmap. */
#include "check.h"
#include "pageset.h"

#include <stdlib.h>
#include <string.h>

#define NPAGES 100000u

static uint64_t next_random(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 20;
}

/* s holds exactly the pages ref marks, and walks and encodes them so. */
static void check_same(const struct pageset *s, const uint8_t *ref, uint32_t npages)
{
	uint32_t count = 0;

	for (uint32_t p = 0; p < npages; p++) {
		CHECK_EQ(pageset_has(s, p), (bool)ref[p]);
		count += ref[p];
	}
	CHECK_EQ(s->count, count);

	/* Each run a maximal one: starts after a page not in the set and
	 * ends before one (or at the end of the heap). */
	uint8_t buf[8 * 64];
	uint32_t from = 0, runs = 0;

	while (from != PAGESET_NONE) {
		size_t n = pageset_encode(s, &from, buf, sizeof(buf));

		for (size_t i = 0; i < n; i += PAGESET_RUN_BYTES) {
			uint32_t first, len;

			memcpy(&first, buf + i, 4);     /* little-endian hosts */
			memcpy(&len, buf + i + 4, 4);
			CHECK(first == 0 || !ref[first - 1]);
			CHECK(first + len == npages || !ref[first + len]);
			for (uint32_t q = first; q < first + len; q++)
				CHECK(ref[q]);
			runs++;
		}
	}
	CHECK(count == 0 || runs > 0);
}

/* Runs of up to 300 pages (across words, whole words, the last page),
 * added and taken out by decoding, and unions of two sets. */
static void test_runs_and_unions(void)
{
	enum { N = 4096 + 37 };
	static uint8_t ra[N], rb[N], rc[N];
	struct pageset a, b;
	uint64_t x = 99;

	CHECK_EQ(pageset_init(&a, N), 0);
	CHECK_EQ(pageset_init(&b, N), 0);
	for (int round = 0; round < 200; round++) {
		uint32_t len = (uint32_t)(next_random(&x) % 300) + 1;
		uint32_t first = round == 0 ? N - len : (uint32_t)(next_random(&x) % (N - len + 1));
		bool add = round == 0 || next_random(&x) % 3 != 0;
		struct pageset *s = round % 2 ? &a : &b;
		uint8_t *ref = round % 2 ? ra : rb;
		uint8_t run[8];

		for (int i = 0; i < 4; i++) {
			run[i] = (uint8_t)(first >> (8 * i));
			run[4 + i] = (uint8_t)(len >> (8 * i));
		}
		CHECK_EQ(add ? pageset_decode(s, run, 8) : pageset_decode_del(s, run, 8), 0);
		memset(ref + first, add, len);
		check_same(s, ref, N);
	}
	CHECK(rb[N - 1]);       /* round 0's run ends at the last page */
	pageset_union(&a, &b);
	for (uint32_t p = 0; p < N; p++)
		ra[p] |= rb[p];
	check_same(&a, ra, N);
	check_same(&b, rb, N);
	/* Into an empty set, and from one. */
	struct pageset c;

	CHECK_EQ(pageset_init(&c, N), 0);
	pageset_union(&c, &b);
	check_same(&c, rb, N);
	memcpy(rc, rb, N);
	pageset_clear(&b);
	memset(rb, 0, N);
	pageset_union(&c, &b);
	check_same(&c, rc, N);
	check_same(&b, rb, N);
	pageset_fini(&a);
	pageset_fini(&b);
	pageset_fini(&c);
}

int main(void)
{
	test_runs_and_unions();

	struct pageset a, b;

	CHECK_EQ(pageset_init(&a, NPAGES), 0);
	CHECK_EQ(pageset_init(&b, NPAGES), 0);
	CHECK_EQ(pageset_next(&a, 0), PAGESET_NONE);

	/* A reference bitmap beside the set. */
	static uint8_t ref[NPAGES];
	uint64_t x = 12345;
	uint32_t count = 0;

	for (int i = 0; i < 20000; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t p = (uint32_t)(x >> 33) % NPAGES;
		uint32_t len = (uint32_t)(x >> 20) % 5 + 1;

		for (uint32_t q = p; q < p + len && q < NPAGES; q++) {
			bool added = pageset_add(&a, q);

			CHECK_EQ(added, !ref[q]);
			count += !ref[q];
			ref[q] = 1;
		}
	}
	CHECK_EQ(a.count, count);
	CHECK(!pageset_add(&a, NPAGES));        /* beyond: refused */

	/* Walking gives exactly the members, in order. */
	uint32_t seen = 0, prev = 0;

	for (uint32_t p = pageset_next(&a, 0); p != PAGESET_NONE; p = pageset_next(&a, p + 1)) {
		CHECK(ref[p]);
		CHECK(seen == 0 || p > prev);
		prev = p;
		seen++;
	}
	CHECK_EQ(seen, count);

	/* Encoded in small chunks and decoded: the same set. */
	uint8_t buf[8 * 7];
	uint32_t from = 0;
	int chunks = 0;

	while (from != PAGESET_NONE) {
		size_t n = pageset_encode(&a, &from, buf, sizeof(buf));

		CHECK(n > 0 && n % PAGESET_RUN_BYTES == 0);
		CHECK_EQ(pageset_decode(&b, buf, n), 0);
		chunks++;
	}
	CHECK(chunks > 1);
	CHECK_EQ(b.count, count);
	for (uint32_t p = 0; p < NPAGES; p++)
		CHECK_EQ(pageset_has(&b, p), (bool)ref[p]);

	/* The same runs taken out again (UNSUBSCRIBE): nothing left; a
	 * malformed buffer takes nothing out. */
	uint8_t bad[8] = { 1, 0, 0, 0, 0, 0, 0, 0 };    /* an empty run */

	CHECK_EQ(pageset_decode_del(&b, bad, 8), -EINVAL);
	CHECK_EQ(b.count, count);
	for (from = 0; from != PAGESET_NONE;) {
		size_t n = pageset_encode(&a, &from, buf, sizeof(buf));

		CHECK_EQ(pageset_decode_del(&b, buf, n), 0);
	}
	CHECK_EQ(b.count, 0);
	CHECK_EQ(pageset_next(&b, 0), PAGESET_NONE);

	/* Delete, clear. */
	uint32_t first = pageset_next(&a, 0);

	pageset_del(&a, first);
	CHECK(!pageset_has(&a, first));
	CHECK_EQ(a.count, count - 1);
	pageset_clear(&a);
	CHECK_EQ(a.count, 0);
	CHECK_EQ(pageset_next(&a, 0), PAGESET_NONE);

	/* Malformed: a partial run, a run past the end, an empty run. */
	uint8_t past[8] = { 0x9f, 0x86, 0x01, 0, 2, 0, 0, 0 };  /* 99999 + 2 */
	uint8_t zero[8] = { 1, 0, 0, 0, 0, 0, 0, 0 };

	CHECK_EQ(pageset_decode(&a, past, 7), -EINVAL);
	CHECK_EQ(pageset_decode(&a, past, 8), -EINVAL);
	CHECK_EQ(pageset_decode(&a, zero, 8), -EINVAL);
	CHECK_EQ(a.count, 0);

	pageset_fini(&a);
	pageset_fini(&b);
	return 0;
}
