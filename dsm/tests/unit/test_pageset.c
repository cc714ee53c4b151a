/* SPDX-License-Identifier: MIT */
/* Page sets: membership, walking, clearing, and their wire form in
 * chunks; malformed runs refused whole. */
#include "check.h"
#include "pageset.h"

#include <stdlib.h>
#include <string.h>

#define NPAGES 100000u

int main(void)
{
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
