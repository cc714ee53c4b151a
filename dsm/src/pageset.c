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

/* The bits of mask not yet in word w set; how many that was. */
static uint32_t set_bits(struct pageset *s, uint32_t w, uint64_t mask)
{
	uint64_t fresh = mask & ~s->bits[w];

	if (!fresh)
		return 0;
	s->bits[w] |= fresh;
	s->count += (uint32_t)__builtin_popcountll(fresh);
	if (w < s->lo)
		s->lo = w;
	if (w + 1 > s->hi)
		s->hi = w + 1;
	return 1;
}

bool pageset_add(struct pageset *s, uint32_t page)
{
	return page < s->npages && set_bits(s, page / 64u, 1ull << (page % 64u));
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

/*
 * A word at a time: the notices a lock's grant and an acquire pass on are
 * unions of sets of thousands of pages (the histogram example), and a page
 * at a time that was a good part of a lock's time.  Sets of one heap have
 * the same size; of another size, a page at a time, within dst's.
 */
void pageset_union(struct pageset *dst, const struct pageset *src)
{
	if (!src->count)
		return;
	if (src->npages != dst->npages) {
		for (uint32_t p = pageset_next(src, 0); p != PAGESET_NONE;
		     p = pageset_next(src, p + 1))
			pageset_add(dst, p);
		return;
	}
	for (uint32_t w = src->lo; w < src->hi; w++)
		if (src->bits[w])
			set_bits(dst, w, src->bits[w]);
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

/* How many pages from p on (p in the set) are in the set, a word at a
 * time: no bit beyond npages is ever set. */
static uint32_t run_length(const struct pageset *s, uint32_t p)
{
	uint32_t q = p;

	while (q < s->npages) {
		uint32_t w = q / 64u;
		uint64_t absent = ~s->bits[w] & (~0ull << (q % 64u));

		if (absent) {
			q = w * 64u + (uint32_t)__builtin_ctzll(absent);
			break;
		}
		q = (w + 1) * 64u;
	}
	return (q < s->npages ? q : s->npages) - p;
}

size_t pageset_encode(const struct pageset *s, uint32_t *from, uint8_t *buf, size_t cap)
{
	size_t n = 0;
	uint32_t p = pageset_next(s, *from);

	while (p != PAGESET_NONE && n + PAGESET_RUN_BYTES <= cap) {
		uint32_t count = run_length(s, p);

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

		for (uint32_t p = first, end = first + count; p < end;) {
			uint32_t w = p / 64u, b = p % 64u;
			uint32_t n = end - p < 64u - b ? end - p : 64u - b;
			uint64_t mask = (n == 64u ? ~0ull : (1ull << n) - 1) << b;

			if (add) {
				set_bits(s, w, mask);
			} else {
				s->count -= (uint32_t)__builtin_popcountll(s->bits[w] & mask);
				s->bits[w] &= ~mask;
			}
			p += n;
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
