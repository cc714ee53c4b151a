/* SPDX-License-Identifier: MIT */
/*
 * mp_atomic.c - pm_atomic(): every rank at once on the same words.
 *
 * Each rank exposes a few 64-bit words and sends its key to every rank
 * (itself included, so a rank's own atomics go through PM too).  Then:
 *
 *  1. exactly once: every rank fetch-adds 1 to rank 0's counter K times;
 *     the counter ends at size * K, each rank's old values rise strictly,
 *     and all of them together are 0 .. size*K - 1 (their sum says so);
 *     non-fetching adds of rank + 1 to every rank's second word land too;
 *  2. mutual exclusion: a lock word taken with CSWAP and given back with
 *     SWAP guards a plain pm_read + pm_write increment of another word on
 *     rank 0; no increment is lost;
 *  3. each operation's result, on the next rank's words: READ, SWAP,
 *     CSWAP that fails and one that succeeds, AND, OR, XOR, ADD wrapping;
 *  4. 32-bit words: the two halves of one 64-bit word added to by every
 *     rank at once, wrapping at 32 bits without spilling into the other
 *     half; a 4-byte result written and nothing past it; a 32-bit CSWAP;
 *  5. errors: an unknown op, a word not aligned, a range past the end,
 *     bad keys; the result is left alone.
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>

#define WORDS 8
#define K 3000          /* fetch-adds per rank in phase 1 */
#define L 300           /* lock rounds per rank in phase 2 */

enum { COUNTER, ADDS, LOCK, GUARDED, OPS, HALVES };

struct keys {
	uint64_t key[64];
};

/* Run one atomic to completion; its status. */
static int atomic_wait(struct mp *m, int peer, unsigned aop, uint64_t operand,
		       uint64_t compare, void *result, uint64_t key, uint64_t off)
{
	struct pm_op op;
	int err;

	while ((err = pm_atomic(m->ctx, peer, aop, operand, compare, result, key, off, &op)) ==
	       -EAGAIN)
		mp_progress(m, "an atomic slot");
	if (err) {
		/* Refused at start: pm_test reports the same. */
		CHECK_EQ(pm_test(m->ctx, &op), 1);
		CHECK_EQ(op.status, err);
		return err;
	}
	while (pm_test(m->ctx, &op) == 0)
		mp_progress(m, "completing an atomic");
	CHECK_EQ(op.peer, peer);
	return op.status;
}

static uint64_t fetch(struct mp *m, int peer, enum pm_atomic_op aop, uint64_t operand,
		      uint64_t compare, uint64_t key, int word)
{
	uint64_t old = 0xdeadbeefdeadbeefull;

	CHECK_OK(atomic_wait(m, peer, aop, operand, compare, &old, key, (uint64_t)word * 8));
	return old;
}

static void rma_wait(struct mp *m, bool write, int peer, uint64_t *v, uint64_t key, int word)
{
	struct pm_op op;
	int err = write ? pm_write(m->ctx, peer, v, 8, key, (uint64_t)word * 8, &op)
			: pm_read(m->ctx, peer, v, 8, key, (uint64_t)word * 8, &op);

	CHECK_OK(err);
	while (pm_test(m->ctx, &op) == 0)
		mp_progress(m, "completing a read or write");
	CHECK_OK(op.status);
}

/* Every rank's key, by messages (a rank's own comes through PM too). */
static void exchange_keys(struct mp *m, uint64_t mine, struct keys *k)
{
	for (int r = 0; r < m->size; r++)
		mp_send(m, r, &mine, sizeof(mine));
	for (int n = 0; n < m->size; n++) {
		struct pm_msg msg;

		mp_recv(m, &msg);
		CHECK_EQ(msg.len, sizeof(uint64_t));
		memcpy(&k->key[msg.peer], msg.data, sizeof(uint64_t));
		mp_release(m, &msg);
	}
}

int main(void)
{
	struct mp m;

	mp_open(&m, NULL, 0, 60);
	CHECK(m.size <= 64);

	uint64_t *words = aligned_alloc(64, 64 + WORDS * 8);
	pm_mr_t *mr;
	struct keys k;
	int me = m.rank, n = m.size, next = (me + 1) % n;

	CHECK(words);
	memset(words, 0, 64 + WORDS * 8);
	CHECK_OK(pm_mr_register(m.ctx, words, WORDS * 8, &mr));
	exchange_keys(&m, pm_mr_key(mr), &k);
	mp_barrier(&m);

	/* ---- phase 1: exactly once ---- */
	uint64_t prev = 0, sum = 0;

	for (int i = 0; i < K; i++) {
		uint64_t old = fetch(&m, 0, PM_ATOMIC_ADD, 1, 0, k.key[0], COUNTER);

		CHECK_MSG(i == 0 || old > prev, "fetch-add %d gave %llu after %llu", i,
			  (unsigned long long)old, (unsigned long long)prev);
		CHECK_U64(old, <, (uint64_t)n * K);
		prev = old;
		sum += old;
		CHECK_OK(atomic_wait(&m, i % n, PM_ATOMIC_ADD, (uint64_t)me + 1, 0, NULL,
				     k.key[i % n], ADDS * 8));
	}
	/* Rank 0 gathers the sums: together the old values are 0 .. nK-1. */
	mp_send(&m, 0, &sum, sizeof(sum));
	if (me == 0) {
		uint64_t total = 0, nk = (uint64_t)n * K;

		for (int r = 0; r < n; r++) {
			struct pm_msg msg;
			uint64_t s;

			mp_recv(&m, &msg);
			CHECK_EQ(msg.len, sizeof(s));
			memcpy(&s, msg.data, sizeof(s));
			total += s;
			mp_release(&m, &msg);
		}
		CHECK_U64(total, ==, nk * (nk - 1) / 2);
	}
	mp_barrier(&m);
	if (me == 0)
		CHECK_U64(words[COUNTER], ==, (uint64_t)n * K);
	/* Rank r added r + 1 here on its iterations i with i % n == me. */
	uint64_t expect = 0;

	for (int r = 0; r < n; r++)
		for (int i = 0; i < K; i++)
			expect += i % n == me ? (uint64_t)r + 1 : 0;
	CHECK_U64(words[ADDS], ==, expect);
	mp_barrier(&m);

	/* ---- phase 2: mutual exclusion by CSWAP ---- */
	for (int i = 0; i < L; i++) {
		uint64_t v;

		while (fetch(&m, 0, PM_ATOMIC_CSWAP, (uint64_t)me + 1, 0, k.key[0], LOCK) != 0)
			;
		rma_wait(&m, false, 0, &v, k.key[0], GUARDED);
		v++;
		rma_wait(&m, true, 0, &v, k.key[0], GUARDED);
		CHECK_U64(fetch(&m, 0, PM_ATOMIC_SWAP, 0, 0, k.key[0], LOCK), ==, (uint64_t)me + 1);
	}
	mp_barrier(&m);
	if (me == 0) {
		CHECK_U64(words[GUARDED], ==, (uint64_t)n * L);
		CHECK_U64(words[LOCK], ==, 0);
	}
	mp_barrier(&m);

	/* ---- phase 3: each operation on the next rank's word ---- */
	uint64_t key = k.key[next];

	CHECK_U64(fetch(&m, next, PM_ATOMIC_READ, 99, 99, key, OPS), ==, 0);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_SWAP, 0xf0f0, 0, key, OPS), ==, 0);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_CSWAP, 7, 1, key, OPS), ==, 0xf0f0); /* fails */
	CHECK_U64(fetch(&m, next, PM_ATOMIC_CSWAP, 0xff00, 0xf0f0, key, OPS), ==, 0xf0f0);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_AND, 0x0ff0, 0, key, OPS), ==, 0xff00);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_OR, 0x000f, 0, key, OPS), ==, 0x0f00);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_XOR, 0x0101, 0, key, OPS), ==, 0x0f0f);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_ADD, UINT64_MAX, 0, key, OPS), ==, 0x0e0e);
	CHECK_U64(fetch(&m, next, PM_ATOMIC_READ, 0, 0, key, OPS), ==, 0x0e0d);
	mp_barrier(&m);
	CHECK_U64(words[OPS], ==, 0x0e0d);
	mp_barrier(&m);

	/* ---- phase 4: 32-bit words, the two halves of rank 0's HALVES ---- */
	for (int i = 0; i < K / 10; i++) {
		uint32_t r[2] = { 0, 0xabababab };

		CHECK_OK(atomic_wait(&m, 0, PM_ATOMIC_ADD | PM_ATOMIC_32, 0x10000001u, 0, r,
				     k.key[0], HALVES * 8));
		CHECK_EQ(r[1], 0xabababab);     /* 4 bytes written, not 8 */
		CHECK_OK(atomic_wait(&m, 0, PM_ATOMIC_ADD | PM_ATOMIC_32, UINT64_MAX, 0, NULL,
				     k.key[0], HALVES * 8 + 4));
	}
	mp_barrier(&m);
	if (me == 0) {
		uint32_t lo, hi;

		memcpy(&lo, (uint8_t *)&words[HALVES], 4);
		memcpy(&hi, (uint8_t *)&words[HALVES] + 4, 4);
		CHECK_EQ(lo, (uint32_t)(0x10000001ull * (uint64_t)n * (K / 10)));
		CHECK_EQ(hi, (uint32_t)(0 - (uint32_t)n * (K / 10)));
	}
	mp_barrier(&m);
	if (me == 0) {
		uint32_t r = 0;

		memset(&words[HALVES], 0, 8);
		CHECK_OK(atomic_wait(&m, next, PM_ATOMIC_SWAP | PM_ATOMIC_32, 5, 0, &r, key,
				     HALVES * 8 + 4));
		CHECK_OK(atomic_wait(&m, next, PM_ATOMIC_CSWAP | PM_ATOMIC_32, 9, 0x100000005ull,
				     &r, key, HALVES * 8 + 4));
		CHECK_EQ(r, 5);                 /* compared on the low 32 bits: swapped */
		CHECK_OK(atomic_wait(&m, next, PM_ATOMIC_READ | PM_ATOMIC_32, 0, 0, &r, key,
				     HALVES * 8 + 4));
		CHECK_EQ(r, 9);
	}
	mp_barrier(&m);

	/* ---- phase 5: errors leave the result alone ---- */
	uint64_t res = 42;
	struct pm_op op;

	CHECK_ERR(pm_atomic(m.ctx, next, (enum pm_atomic_op)0, 1, 0, &res, key, 0, &op), -EINVAL);
	CHECK_ERR(pm_atomic(m.ctx, next, (enum pm_atomic_op)8, 1, 0, &res, key, 0, &op), -EINVAL);
	CHECK_ERR(pm_atomic(m.ctx, next, PM_ATOMIC_32, 1, 0, &res, key, 0, &op), -EINVAL);
	CHECK_ERR(pm_atomic(m.ctx, next, PM_ATOMIC_ADD | 0x200, 1, 0, &res, key, 0, &op), -EINVAL);
	CHECK_ERR(pm_atomic(m.ctx, n, PM_ATOMIC_ADD, 1, 0, &res, key, 0, &op), -EINVAL);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD, 1, 0, &res, key, 4), -EINVAL);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD | PM_ATOMIC_32, 1, 0, &res, key, 2), -EINVAL);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD | PM_ATOMIC_32, 1, 0, &res, key,
			     WORDS * 8 - 2), -ERANGE);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD, 1, 0, &res, key, WORDS * 8 - 4), -ERANGE);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD, 1, 0, &res, key, WORDS * 8), -ERANGE);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD, 1, 0, &res, key, UINT64_MAX - 3), -ERANGE);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD, 1, 0, &res, 0, 0), -ENOENT);
	CHECK_EQ(atomic_wait(&m, next, PM_ATOMIC_ADD, 1, 0, &res, key ^ (1ull << 16), 0), -ENOENT);
	CHECK_U64(res, ==, 42);
	mp_barrier(&m);
	CHECK_U64(words[OPS], ==, 0x0e0d);      /* nothing landed */

	if (me == 0)
		printf("atomics: %d ranks, %d fetch-adds each exactly once, %d CSWAP lock "
		       "rounds each, every op, 32-bit halves, errors: ok\n", n, K, L);
	CHECK_OK(pm_mr_deregister(m.ctx, mr));
	free(words);
	mp_close(&m);
	return 0;
}
