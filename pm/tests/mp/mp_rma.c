/* SPDX-License-Identifier: MIT */
/*
 * mp_rma.c - remote write and read at the edges of a region.
 *
 * Each rank registers a region (an odd length, not page aligned) and
 * sends its key to the other; each then works on the other's region:
 * whole-region read and write, the first and the last byte, every
 * out-of-bounds form (offset at or past the end, length past the end,
 * offset + length wrapping around), bad keys, a deregistered key, a key
 * of a reused window slot, and a region the owner cannot write to.
 * Then a region registered PM_MR_VIRT, addressed by virtual address.
 * Completion is checked with pm_test.  The owner checks its own memory
 * after each phase, so a write that went astray is caught where it landed.
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define LEN (1024 * 1024 + 4093)

struct key_msg {
	uint64_t key;
	uint64_t len;
};

static void send_key(struct mp *m, int peer, const pm_mr_t *mr, size_t len)
{
	struct key_msg k = { pm_mr_key(mr), len };

	mp_send(m, peer, &k, sizeof(k));
}

static struct key_msg recv_key(struct mp *m, int peer)
{
	struct pm_msg msg;
	struct key_msg k;

	mp_recv(m, &msg);
	CHECK_EQ(msg.peer, peer);
	CHECK_EQ(msg.len, sizeof(k));
	memcpy(&k, msg.data, sizeof(k));
	mp_release(m, &msg);
	return k;
}

/* Start an operation that must succeed, and see it complete. */
static void rma_ok(struct mp *m, bool write, int peer, void *buf, size_t len,
		   uint64_t key, uint64_t off)
{
	struct pm_op op;
	int err = write ? pm_write(m->ctx, peer, buf, len, key, off, &op)
			: pm_read(m->ctx, peer, buf, len, key, off, &op);

	CHECK_MSG(err == 0, "%s of %zu bytes at %llu: %s", write ? "write" : "read", len,
		  (unsigned long long)off, check_errname(err));
	uint64_t deadline = check_now_ns() + 5000000000ull;
	int done;

	while ((done = pm_test(m->ctx, &op)) == 0) {
		CHECK_MSG(check_now_ns() < deadline, "operation never completed");
		mp_progress(m, "completing an operation");
	}
	CHECK_EQ(done, 1);
	CHECK_EQ(op.status, 0);
	CHECK_EQ(op.peer, peer);
}

/* An operation refused at start with err; pm_test then reports it. */
static void rma_fails(struct mp *m, bool write, int peer, void *buf, size_t len,
		      uint64_t key, uint64_t off, int err)
{
	struct pm_op op;
	int got = write ? pm_write(m->ctx, peer, buf, len, key, off, &op)
			: pm_read(m->ctx, peer, buf, len, key, off, &op);

	CHECK_MSG(got == err, "%s of %zu bytes at %llu (key %llx): %s, expected %d",
		  write ? "write" : "read", len, (unsigned long long)off,
		  (unsigned long long)key, check_errname(got), err);
	CHECK_EQ(pm_test(m->ctx, &op), 1);
	CHECK_EQ(op.status, err);
}

int main(void)
{
	struct mp m;

	mp_open(&m, NULL, 2, 20);

	int peer = 1 - m.rank;
	uint64_t me = (uint64_t)m.rank + 1, other = (uint64_t)peer + 1;
	/* Odd offset into the allocation: not page aligned. */
	uint8_t *alloc = malloc(LEN + 64), *region = alloc + 7;
	uint8_t *local = malloc(LEN), *orig = malloc(LEN);
	pm_mr_t *mr;
	struct pm_stats s0, s1;

	CHECK(alloc && local && orig);
	memset(alloc, 0xCC, LEN + 64);  /* sentinels around the region */
	check_fill(region, LEN, me * 100);
	CHECK_OK(pm_mr_register(m.ctx, region, LEN, &mr));
	send_key(&m, peer, mr, LEN);
	struct key_msg k = recv_key(&m, peer);

	CHECK_EQ(k.len, LEN);
	CHECK(k.key != 0);
	CHECK_OK(pm_stats_get(m.ctx, &s0));

	/* ---- phase 1: reads of the peer's initial contents ---- */
	memset(local, 0, LEN);
	rma_ok(&m, false, peer, local, LEN, k.key, 0);
	CHECK_PATTERN(local, LEN, other * 100);
	uint8_t b = 0;

	rma_ok(&m, false, peer, &b, 1, k.key, 0);
	CHECK_EQ(b, local[0]);
	rma_ok(&m, false, peer, &b, 1, k.key, LEN - 1);
	CHECK_EQ(b, local[LEN - 1]);
	/* A middle piece into an odd place of the local buffer. */
	memset(local, 0, LEN);
	rma_ok(&m, false, peer, local + 3, 100000, k.key, 12345);
	check_fill(orig, LEN, other * 100);
	CHECK(memcmp(local + 3, orig + 12345, 100000) == 0);

	/* Out of bounds, every way; nothing is transferred. */
	rma_fails(&m, false, peer, local, 1, k.key, LEN, -ERANGE);
	rma_fails(&m, true, peer, local, 1, k.key, LEN, -ERANGE);
	rma_fails(&m, false, peer, local, 2, k.key, LEN - 1, -ERANGE);
	rma_fails(&m, true, peer, local, 2, k.key, LEN - 1, -ERANGE);
	rma_fails(&m, false, peer, local, LEN, k.key, 1, -ERANGE);
	rma_fails(&m, true, peer, local, LEN, k.key, 1, -ERANGE);
	rma_fails(&m, false, peer, local, 1, k.key, (uint64_t)LEN + 4096, -ERANGE);
	rma_fails(&m, false, peer, local, 1, k.key, UINT64_MAX, -ERANGE);
	rma_fails(&m, true, peer, local, 16, k.key, UINT64_MAX - 7, -ERANGE);
	rma_fails(&m, true, peer, local, LEN, k.key, UINT64_MAX - LEN + 2, -ERANGE);
	/* Bad keys. */
	rma_fails(&m, false, peer, local, 1, 0, 0, -ENOENT);
	rma_fails(&m, false, peer, local, 1, k.key + 1, 0, -ENOENT);   /* other slot */
	rma_fails(&m, false, peer, local, 1, k.key ^ (1ull << 16), 0, -ENOENT);
	rma_fails(&m, true, peer, local, 1, k.key ^ (1ull << 40), 0, -ENOENT);
	rma_fails(&m, true, peer, local, 1, k.key | 0xffff, 0, -ENOENT);
	rma_fails(&m, true, peer, local, 1, UINT64_MAX, 0, -ENOENT);
	mp_barrier(&m);

	/* ---- phase 2: writes at the edges, then the owner checks ---- */
	check_fill(local, LEN, me * 1000);
	b = 0xA5;
	rma_ok(&m, true, peer, &b, 1, k.key, 0);
	b = 0x5A;
	rma_ok(&m, true, peer, &b, 1, k.key, LEN - 1);
	rma_ok(&m, true, peer, local, 4096, k.key, 4096);
	mp_barrier(&m);
	check_fill(orig, LEN, me * 100);
	CHECK_EQ(region[0], 0xA5);
	CHECK_EQ(region[LEN - 1], 0x5A);
	check_fill(orig + 4096, 4096, other * 1000);    /* the peer's local pattern */
	CHECK(memcmp(region + 1, orig + 1, LEN - 2) == 0);
	/* Nothing outside the region was touched. */
	for (int i = 0; i < 7; i++)
		CHECK_EQ(alloc[i], 0xCC);
	for (int i = 7 + LEN; i < LEN + 64; i++)
		CHECK_EQ(alloc[i], 0xCC);
	mp_barrier(&m);

	/* ---- phase 3: the whole region written, read back ---- */
	check_fill(local, LEN, me * 7777);
	rma_ok(&m, true, peer, local, LEN, k.key, 0);
	memset(local, 0, LEN);
	rma_ok(&m, false, peer, local, LEN, k.key, 0);
	CHECK_PATTERN(local, LEN, me * 7777);
	mp_barrier(&m);
	CHECK_PATTERN(region, LEN, other * 7777);

	CHECK_OK(pm_stats_get(m.ctx, &s1));
	CHECK_EQ(s1.rma_reads - s0.rma_reads, 5);
	CHECK_EQ(s1.rma_writes - s0.rma_writes, 4);
	CHECK_EQ(s1.rma_bytes - s0.rma_bytes,
		 (uint64_t)LEN + 1 + 1 + 100000 + 1 + 1 + 4096 + LEN + LEN);
	/* The local buffer was registered once and then found in the cache. */
	CHECK(s1.regcache_hits > s0.regcache_hits);
	mp_barrier(&m);

	/* ---- phase 4: deregistration, and a new region in the same slot ---- */
	CHECK_OK(pm_mr_deregister(m.ctx, mr));
	mp_barrier(&m);
	rma_fails(&m, false, peer, local, 1, k.key, 0, -ENOENT);
	rma_fails(&m, true, peer, local, 1, k.key, 0, -ENOENT);
	mp_barrier(&m);
	CHECK_OK(pm_mr_register(m.ctx, region, 4096, &mr));
	send_key(&m, peer, mr, 4096);
	struct key_msg k2 = recv_key(&m, peer);

	CHECK(k2.key != k.key);
	CHECK_EQ(k2.key & 0xffff, k.key & 0xffff);      /* the same slot */
	rma_fails(&m, false, peer, local, 1, k.key, 0, -ENOENT);
	rma_ok(&m, false, peer, local, 4096, k2.key, 0);
	CHECK_PATTERN(local, 4096, me * 7777);   /* what we wrote in phase 3 */
	rma_fails(&m, false, peer, local, 4097, k2.key, 0, -ERANGE);
	mp_barrier(&m);
	CHECK_OK(pm_mr_deregister(m.ctx, mr));

	/* ---- phase 5: a region the owner cannot write ---- */
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *ro = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	CHECK(ro != MAP_FAILED);
	memset(ro, 0x11, (size_t)page);
	CHECK_OK(mprotect(ro, (size_t)page, PROT_READ));
	CHECK_OK(pm_mr_register(m.ctx, ro, (size_t)page, &mr));
	send_key(&m, peer, mr, (size_t)page);
	struct key_msg k3 = recv_key(&m, peer);
	struct pm_op op;

	/* Reading works; writing fails cleanly (no crash on either side). */
	rma_ok(&m, false, peer, local, 64, k3.key, 0);
	for (int i = 0; i < 64; i++)
		CHECK_EQ(local[i], 0x11);
	int err = pm_write(m.ctx, peer, local, 64, k3.key, 0, &op);

	CHECK_MSG(err < 0, "a write into read-only memory said %s", check_errname(err));
	CHECK_EQ(pm_test(m.ctx, &op), 1);
	CHECK_EQ(op.status, err);
	mp_barrier(&m);
	for (long i = 0; i < page; i++)
		CHECK_EQ(ro[i], 0x11);
	CHECK_OK(pm_mr_deregister(m.ctx, mr));
	munmap(ro, (size_t)page);

	/* ---- phase 6: PM_MR_VIRT, places named by virtual address ---- */
	pm_mr_t *bad;

	CHECK_ERR(pm_mr_register_flags(m.ctx, region, LEN, 0x2, &bad), -EINVAL);
	CHECK_OK(pm_mr_register_flags(m.ctx, region, LEN, PM_MR_VIRT, &mr));
	/* The key message carries the region's address here, not its length. */
	send_key(&m, peer, mr, (size_t)(uintptr_t)region);
	struct key_msg kv = recv_key(&m, peer);
	uint64_t base = kv.len;

	check_fill(local, 4096, me * 4242);
	rma_ok(&m, true, peer, local, 4096, kv.key, base + 100);
	memset(local, 0, 4096);
	rma_ok(&m, false, peer, local, 4096, kv.key, base + 100);
	CHECK_PATTERN(local, 4096, me * 4242);
	rma_ok(&m, false, peer, &b, 1, kv.key, base + LEN - 1);
	rma_fails(&m, false, peer, local, 1, kv.key, base - 1, -ERANGE);
	rma_fails(&m, false, peer, local, 1, kv.key, 0, -ERANGE);
	rma_fails(&m, true, peer, local, 1, kv.key, base + LEN, -ERANGE);
	rma_fails(&m, true, peer, local, 2, kv.key, base + LEN - 1, -ERANGE);
	mp_barrier(&m);
	check_fill(orig, 4096, other * 4242);
	CHECK(memcmp(region + 100, orig, 4096) == 0);
	CHECK_OK(pm_mr_deregister(m.ctx, mr));

	if (m.rank == 0)
		printf("remote memory: edges, bounds, keys, deregistration, read-only: ok "
		       "(write into read-only memory: %s)\n", check_errname(err));
	free(alloc);
	free(local);
	free(orig);
	mp_close(&m);
	return 0;
}
