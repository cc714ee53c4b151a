/* SPDX-License-Identifier: MIT */
/* diff.c - twins and diffs (see diff.h). */
#include "diff.h"

#include <errno.h>
#include <string.h>

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

size_t dsm_diff_make(const uint8_t *page, const uint8_t *twin, uint8_t *out)
{
	size_t n = 0;
	uint32_t i = 0;

	while (i < DIFF_PAGE) {
		/* Skip equal 8-byte words fast: most of a page is usually
		 * unchanged or wholly rewritten. */
		uint64_t a, b;

		if ((i & 7u) == 0) {
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
		n += 4 + (i - start);
	}
	return n;
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

size_t dsm_diff_entry_make(uint32_t pageno, const uint8_t *page, const uint8_t *twin,
			   uint8_t *out)
{
	size_t n = dsm_diff_make(page, twin, out + DIFF_ENTRY_HDR);

	if (n == 0)
		return 0;
	put32(out, pageno);
	put32(out + 4, (uint32_t)n);
	return DIFF_ENTRY_HDR + n;
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
