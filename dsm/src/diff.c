/* SPDX-License-Identifier: MIT */
/* diff.c - twins and diffs (see diff.h). */
#include "diff.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

/* Equal stretches are skipped a block at a time: eight words XORed and
 * ORed without a branch, which the compiler turns into vector loads.  On a
 * page with a few bytes written that made a diff some 2 times faster than
 * a branch per word (timed by hand; the figures are in the commit). */
#define BLOCK 64u

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static uint32_t get32(const uint8_t *p)
{
	return get16(p) | (uint32_t)get16(p + 2) << 16;
}

static inline bool block_equal(const uint8_t *a, const uint8_t *b)
{
	uint64_t x = 0;

	for (unsigned k = 0; k < BLOCK; k += 8) {
		uint64_t u, v;

		memcpy(&u, a + k, 8);
		memcpy(&v, b + k, 8);
		x |= u ^ v;
	}
	return x == 0;
}

/* The diff of page against twin into out; with sync_to (the twin itself,
 * writable) each run found is also copied there, and the twin then equals
 * page.  NULL: the twin is only read. */
static size_t diff_make(const uint8_t *page, const uint8_t *twin, uint8_t *out,
			uint8_t *sync_to)
{
	size_t n = 0;
	uint32_t i = 0;

	while (i < DIFF_PAGE) {
		if ((i & (BLOCK - 1)) == 0) {
			while (i < DIFF_PAGE && block_equal(page + i, twin + i))
				i += BLOCK;
			if (i == DIFF_PAGE)
				break;
		}
		/* In a block that differs: equal words, then bytes. */
		if ((i & 7u) == 0) {
			uint64_t a, b;

			memcpy(&a, page + i, 8);
			memcpy(&b, twin + i, 8);
			if (a == b) {
				i += 8;
				continue;
			}
		}
		if (page[i] == twin[i]) {
			i++;
			continue;
		}

		uint32_t start = i;

		while (i < DIFF_PAGE && page[i] != twin[i])
			i++;
		put16(out + n, (uint16_t)start);
		put16(out + n + 2, (uint16_t)(i - start));
		memcpy(out + n + 4, page + start, i - start);
		if (sync_to)
			memcpy(sync_to + start, page + start, i - start);
		n += 4 + (i - start);
	}
	return n;
}

size_t dsm_diff_make(const uint8_t *page, const uint8_t *twin, uint8_t *out)
{
	return diff_make(page, twin, out, NULL);
}

int dsm_diff_apply(uint8_t *page, const uint8_t *diff, size_t len)
{
	size_t i = 0;

	while (i < len) {
		if (len - i < 4)
			return -EINVAL;

		uint32_t off = get16(diff + i), run = get16(diff + i + 2);

		if (run == 0 || off + run > DIFF_PAGE || len - i - 4 < run)
			return -EINVAL;
		i += 4 + run;
	}
	for (i = 0; i < len;) {
		uint32_t off = get16(diff + i), run = get16(diff + i + 2);

		memcpy(page + off, diff + i + 4, run);
		i += 4 + run;
	}
	return 0;
}

static size_t entry_make(uint32_t pageno, const uint8_t *page, const uint8_t *twin,
			 uint8_t *out, uint8_t *sync_to)
{
	size_t n = diff_make(page, twin, out + DIFF_ENTRY_HDR, sync_to);

	if (n == 0)
		return 0;
	put32(out, pageno);
	put32(out + 4, (uint32_t)n);
	return DIFF_ENTRY_HDR + n;
}

size_t dsm_diff_entry_make(uint32_t pageno, const uint8_t *page, const uint8_t *twin,
			   uint8_t *out)
{
	return entry_make(pageno, page, twin, out, NULL);
}

size_t dsm_diff_entry_make_sync(uint32_t pageno, const uint8_t *page, uint8_t *twin,
				uint8_t *out)
{
	return entry_make(pageno, page, twin, out, twin);
}

int dsm_diff_entry_next(const uint8_t *batch, size_t len, size_t *off, uint32_t *pageno,
			const uint8_t **diff, size_t *diff_len)
{
	size_t at = *off;

	if (at >= len)
		return 0;
	if (len - at < DIFF_ENTRY_HDR)
		return -EINVAL;

	uint32_t n = get32(batch + at + 4);

	if (n > len - at - DIFF_ENTRY_HDR)
		return -EINVAL;
	*pageno = get32(batch + at);
	*diff = batch + at + DIFF_ENTRY_HDR;
	*diff_len = n;
	*off = at + DIFF_ENTRY_HDR + n;
	return 1;
}
