/* SPDX-License-Identifier: MIT */
/* Diffs: exactly the changed bytes, merged without loss when several
 * writers change disjoint bytes of one page; malformed diffs refused. */
#include "check.h"
#include "diff.h"

#include <stdlib.h>
#include <string.h>

static uint8_t twin[DIFF_PAGE], page[DIFF_PAGE], home[DIFF_PAGE], buf[DIFF_MAX];

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void random_page(uint8_t *p)
{
	for (unsigned i = 0; i < DIFF_PAGE; i++)
		p[i] = (uint8_t)next();
}

int main(void)
{
	/* Unchanged: an empty diff. */
	random_page(twin);
	memcpy(page, twin, DIFF_PAGE);
	CHECK_EQ(dsm_diff_make(page, twin, buf), 0);

	/* Random edits: applying the diff to the twin gives the page. */
	for (int round = 0; round < 2000; round++) {
		random_page(twin);
		memcpy(page, twin, DIFF_PAGE);
		int edits = (int)(next() % 64);

		for (int e = 0; e < edits; e++) {
			unsigned at = (unsigned)(next() % DIFF_PAGE), len = (unsigned)(next() % 40);

			for (unsigned i = at; i < at + len && i < DIFF_PAGE; i++)
				page[i] = (uint8_t)(page[i] + 1 + next() % 255);
		}
		size_t n = dsm_diff_make(page, twin, buf);

		CHECK(n <= DIFF_MAX);
		memcpy(home, twin, DIFF_PAGE);
		CHECK_EQ(dsm_diff_apply(home, buf, n), 0);
		CHECK(memcmp(home, page, DIFF_PAGE) == 0);
	}

	/* The worst case, every other byte, fits DIFF_MAX. */
	memset(twin, 0, DIFF_PAGE);
	for (unsigned i = 0; i < DIFF_PAGE; i++)
		page[i] = (uint8_t)(i % 2);
	CHECK_EQ(dsm_diff_make(page, twin, buf), DIFF_MAX);

	/* False sharing: 8 writers each change their own bytes (interleaved
	 * byte by byte) of copies of one page; their diffs applied at home
	 * in any order give every writer's bytes. */
	random_page(home);
	memcpy(twin, home, DIFF_PAGE);
	for (int w = 7; w >= 0; w--) {
		memcpy(page, twin, DIFF_PAGE);
		for (unsigned i = (unsigned)w; i < DIFF_PAGE; i += 8)
			page[i] = (uint8_t)(twin[i] ^ (0x11u * (unsigned)(w + 1)));
		size_t n = dsm_diff_make(page, twin, buf);

		CHECK_EQ(dsm_diff_apply(home, buf, n), 0);
	}
	for (unsigned i = 0; i < DIFF_PAGE; i++)
		CHECK_EQ(home[i], (uint8_t)(twin[i] ^ (0x11u * (i % 8 + 1))));

	/* Malformed: refused whole, nothing applied. */
	uint8_t bad[8] = { 0xfe, 0x0f, 0x10, 0x00, 1, 2, 3, 4 };   /* 4094 + 16 */

	memcpy(page, twin, DIFF_PAGE);
	CHECK_EQ(dsm_diff_apply(page, bad, sizeof(bad)), -EINVAL);
	uint8_t truncated[6] = { 0, 0, 8, 0, 1, 2 };

	CHECK_EQ(dsm_diff_apply(page, truncated, sizeof(truncated)), -EINVAL);
	uint8_t empty_run[4] = { 0, 0, 0, 0 };

	CHECK_EQ(dsm_diff_apply(page, empty_run, sizeof(empty_run)), -EINVAL);
	uint8_t partial[3] = { 0, 0, 1 };

	CHECK_EQ(dsm_diff_apply(page, partial, sizeof(partial)), -EINVAL);
	CHECK(memcmp(page, twin, DIFF_PAGE) == 0);
	return 0;
}
