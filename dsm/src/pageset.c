/* SPDX-License-Identifier: MIT */
/* pageset.c - sets of pages (see pageset.h). */
#include "pageset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int pageset_init(struct pageset *s, uint32_t npages)
{
	memset(s, 0, sizeof(*s));
	s->bits = calloc((npages + 63u) / 64u + 1u, sizeof(uint64_t));
	if (!s->bits)
		return -ENOMEM;
	s->npages = npages;
	s->lo = UINT32_MAX;
	return 0;
}

void pageset_fini(struct pageset *s)
{
	free(s->bits);
	memset(s, 0, sizeof(*s));
}

void pageset_clear(struct pageset *s)
{
	if (s->count)
		memset(s->bits + s->lo, 0, (size_t)(s->hi - s->lo) * sizeof(uint64_t));
	s->count = 0;
	s->lo = UINT32_MAX;
	s->hi = 0;
}

bool pageset_add(struct pageset *s, uint32_t page)
{
	if (page >= s->npages)
		return false;

	uint32_t w = page / 64u;
	uint64_t bit = 1ull << (page % 64u);

	if (s->bits[w] & bit)
		return false;
	s->bits[w] |= bit;
	s->count++;
	if (w < s->lo)
		s->lo = w;
	if (w + 1 > s->hi)
		s->hi = w + 1;
	return true;
}

void pageset_del(struct pageset *s, uint32_t page)
{
	if (!pageset_has(s, page))
		return;
	s->bits[page / 64u] &= ~(1ull << (page % 64u));
	s->count--;
}

bool pageset_has(const struct pageset *s, uint32_t page)
{
	return page < s->npages && (s->bits[page / 64u] >> (page % 64u) & 1u);
}

void pageset_union(struct pageset *dst, const struct pageset *src)
{
	for (uint32_t p = pageset_next(src, 0); p != PAGESET_NONE; p = pageset_next(src, p + 1))
		pageset_add(dst, p);
}

uint32_t pageset_next(const struct pageset *s, uint32_t from)
{
	if (!s->count || from >= s->npages)
		return PAGESET_NONE;

	uint32_t w = from / 64u;

	if (w < s->lo) {
		w = s->lo;
		from = w * 64u;
	}
	if (w >= s->hi)
		return PAGESET_NONE;

	uint64_t word = s->bits[w] & (~0ull << (from % 64u));

	while (!word) {
		if (++w >= s->hi)
			return PAGESET_NONE;
		word = s->bits[w];
	}
	return w * 64u + (uint32_t)__builtin_ctzll(word);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

size_t pageset_encode(const struct pageset *s, uint32_t *from, uint8_t *buf, size_t cap)
{
	size_t n = 0;
	uint32_t p = pageset_next(s, *from);

	while (p != PAGESET_NONE && n + PAGESET_RUN_BYTES <= cap) {
		uint32_t count = 1;

		while (p + count < s->npages && pageset_has(s, p + count))
			count++;
		put32(buf + n, p);
		put32(buf + n + 4, count);
		n += PAGESET_RUN_BYTES;
		p = pageset_next(s, p + count);
	}
	*from = p;
	return n;
}

/* The runs of buf added to s, or taken out of it: all or nothing. */
static int apply_runs(struct pageset *s, const uint8_t *buf, size_t len, bool add)
{
	if (len % PAGESET_RUN_BYTES)
		return -EINVAL;
	for (size_t i = 0; i < len; i += PAGESET_RUN_BYTES) {
		uint32_t first = get32(buf + i), count = get32(buf + i + 4);

		if (count == 0 || first >= s->npages || count > s->npages - first)
			return -EINVAL;
	}
	for (size_t i = 0; i < len; i += PAGESET_RUN_BYTES) {
		uint32_t first = get32(buf + i), count = get32(buf + i + 4);

		for (uint32_t p = first; p < first + count; p++) {
			if (add)
				pageset_add(s, p);
			else
				pageset_del(s, p);
		}
	}
	return 0;
}

int pageset_decode(struct pageset *s, const uint8_t *buf, size_t len)
{
	return apply_runs(s, buf, len, true);
}

int pageset_decode_del(struct pageset *s, const uint8_t *buf, size_t len)
{
	return apply_runs(s, buf, len, false);
}
