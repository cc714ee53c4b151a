/* SPDX-License-Identifier: MIT */
/*
 * bytescan.c - see bytescan.h.
 */
#include "bytescan.h"

#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "bytescan.c reads the first byte of a word as its lowest (little-endian)"
#endif

#define ONES 0x0101010101010101ull
#define LOW7 0x7f7f7f7f7f7f7f7full

/* 0x80 in each byte of x that is zero, 0 in the others.  Exact: the sum
 * of a byte's low 7 bits and 0x7f never carries into the next byte (the
 * shorter haszero() trick marks bytes above a zero one too). */
static inline uint64_t zero_bytes(uint64_t x)
{
	return ~(((x & LOW7) + LOW7) | x) & ~LOW7;
}

static inline bool of_class(uint8_t b, uint8_t mask, uint8_t value)
{
	return (b & mask) == value;
}

size_t bytescan_find(const uint8_t *t, size_t from, size_t end, uint8_t mask, uint8_t value,
		     bool in)
{
	size_t i = from;

	for (; i < end && (i & 7); i++)
		if (of_class(t[i], mask, value) == in)
			return i;

	uint64_t m = mask * ONES, v = value * ONES;

	for (; i + 8 <= end; i += 8) {
		uint64_t w;

		memcpy(&w, t + i, sizeof(w));

		uint64_t hit = zero_bytes((w & m) ^ v);

		if (!in)
			hit ^= ~LOW7;
		if (hit)
			return i + ((size_t)__builtin_ctzll(hit) >> 3);
	}
	for (; i < end; i++)
		if (of_class(t[i], mask, value) == in)
			return i;
	return end;
}
