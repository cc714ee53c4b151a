/* SPDX-License-Identifier: MIT */
/* hash.c - hashing names (hash.h). */
#include "hash.h"

uint64_t pm_hash64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}
