/* SPDX-License-Identifier: MIT */
/* Diffs: exactly the changed bytes, merged without loss when several
 * writers change disjoint bytes of one page; malformed diffs refused;
 * batches of several pages' diffs read back whole or refused. */
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

/* The diff by definition, a byte at a time: the runs of differing bytes. */
static size_t reference_diff(const uint8_t *p, const uint8_t *t, uint8_t *out)
{
	size_t n = 0;

	for (unsigned i = 0; i < DIFF_PAGE;) {
		if (p[i] == t[i]) {
			i++;
			continue;
		}
		unsigned start = i;

		while (i < DIFF_PAGE && p[i] != t[i])
			i++;
		out[n] = (uint8_t)start;
		out[n + 1] = (uint8_t)(start >> 8);
		out[n + 2] = (uint8_t)(i - start);
		out[n + 3] = (uint8_t)((i - start) >> 8);
		memcpy(out + n + 4, p + start, i - start);
		n += 4 + (i - start);
	}
	return n;
}

int main(void)
{
	static uint8_t want[DIFF_MAX], entry[DIFF_ENTRY_MAX], synced[DIFF_ENTRY_MAX];

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
		/* Exactly the runs of differing bytes, however the equal
		 * stretches were skipped (blocks, words). */
		CHECK_EQ(n, reference_diff(page, twin, want));
		CHECK(memcmp(buf, want, n) == 0);
		memcpy(home, twin, DIFF_PAGE);
		CHECK_EQ(dsm_diff_apply(home, buf, n), 0);
		CHECK(memcmp(home, page, DIFF_PAGE) == 0);

		/* The sync form makes the same entry and leaves the twin equal
		 * to the page; a diff against it then is empty. */
		size_t e = dsm_diff_entry_make(9, page, twin, entry);

		CHECK_EQ(dsm_diff_entry_make_sync(9, page, twin, synced), e);
		CHECK(memcmp(entry, synced, e) == 0);
		CHECK(memcmp(twin, page, DIFF_PAGE) == 0);
		CHECK_EQ(dsm_diff_make(page, twin, buf), 0);
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

	/* Batches: entries for several pages, an unchanged page adding
	 * nothing, read back in order, each applying to its own page; the
	 * byte layout (page, length, diff; little-endian) as design.md. */
	static uint8_t pages[3][DIFF_PAGE], twins[3][DIFF_PAGE], batch[3 * DIFF_ENTRY_MAX];
	size_t blen = 0;

	for (unsigned k = 0; k < 3; k++) {
		random_page(twins[k]);
		memcpy(pages[k], twins[k], DIFF_PAGE);
		if (k != 1)
			pages[k][100 * k + 7] ^= 0x5a;
		size_t n = dsm_diff_entry_make(70000 + k, pages[k], twins[k], batch + blen);

		CHECK_EQ(n, k == 1 ? 0 : DIFF_ENTRY_HDR + 5);
		blen += n;
	}
	const uint8_t first[DIFF_ENTRY_HDR + 4] = { 0x70, 0x11, 0x01, 0x00, 5, 0, 0, 0, 7, 0, 1, 0 };

	CHECK(memcmp(batch, first, sizeof(first)) == 0);
	CHECK_EQ(batch[sizeof(first)], pages[0][7]);

	size_t off = 0, dlen;
	uint32_t pageno;
	const uint8_t *d;
	unsigned seen = 0;
	int more;

	while ((more = dsm_diff_entry_next(batch, blen, &off, &pageno, &d, &dlen)) == 1) {
		unsigned k = pageno - 70000;

		CHECK(k == 0 || k == 2);
		CHECK_EQ(dsm_diff_apply(twins[k], d, dlen), 0);
		CHECK(memcmp(twins[k], pages[k], DIFF_PAGE) == 0);
		seen++;
	}
	CHECK_EQ(more, 0);
	CHECK_EQ(seen, 2);
	CHECK_EQ(off, blen);

	/* A batch cut short, in an entry's header or in its diff: -EINVAL. */
	for (size_t cut = 1; cut < blen; cut++) {
		if (cut == DIFF_ENTRY_HDR + 5)
			continue;       /* a whole first entry: the end */
		off = 0;
		while ((more = dsm_diff_entry_next(batch, cut, &off, &pageno, &d, &dlen)) == 1)
			;
		CHECK_EQ(more, -EINVAL);
	}
	return 0;
}
