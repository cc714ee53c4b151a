/* SPDX-License-Identifier: MIT */
/* bytescan_find against a byte-at-a-time reference: every start and end
 * around word boundaries, classes by mask and value, in and not in. */
#include "check.h"
#include "bytescan.h"

#include <stdbool.h>
#include <stdint.h>

#define N 300u

static size_t reference(const uint8_t *t, size_t from, size_t end, uint8_t mask, uint8_t value,
			bool in)
{
	for (size_t i = from; i < end; i++)
		if (((t[i] & mask) == value) == in)
			return i;
	return end;
}

int main(void)
{
	static uint8_t t[N + 8];
	uint64_t x = 42;
	/* (mask, value): the DSM's two uses (a valid page: state & 0xfe == 2;
	 * a copied page: byte != 0), one value, bytes with the top bit set. */
	const uint8_t classes[][2] = { { 0xfe, 2 }, { 0xff, 0 }, { 0xff, 4 }, { 0x80, 0x80 } };
	unsigned checked = 0;

	for (int fill = 0; fill < 40; fill++) {
		/* Sparse tables (a hit in a long run of misses) and dense ones. */
		for (size_t i = 0; i < N + 8; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			uint8_t r = (uint8_t)(x >> 56);

			t[i] = fill % 2 ? (uint8_t)(r % 6) : (r < 4 ? (uint8_t)(r % 6) : 1);
			if (fill % 5 == 4)
				t[i] |= 0x80;
		}
		for (size_t c = 0; c < sizeof(classes) / sizeof(classes[0]); c++)
			for (size_t from = 0; from < 20; from++)
				for (size_t end = from; end <= N; end += (end < 40 ? 1 : 37))
					for (int in = 0; in < 2; in++) {
						size_t got = bytescan_find(t, from, end, classes[c][0],
									   classes[c][1], in);

						CHECK_EQ(got, reference(t, from, end, classes[c][0],
									classes[c][1], in));
						checked++;
					}
	}
	/* All of one class: the end. */
	for (size_t i = 0; i < N; i++)
		t[i] = 1;
	CHECK_EQ(bytescan_find(t, 0, N, 0xfe, 2, true), N);
	CHECK_EQ(bytescan_find(t, 3, N, 0xff, 1, false), N);
	CHECK_EQ(bytescan_find(t, 5, 5, 0xff, 1, true), 5);
	CHECK(checked > 10000);
	return 0;
}
