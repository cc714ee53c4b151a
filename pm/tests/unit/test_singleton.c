/* SPDX-License-Identifier: MIT */
/*
 * test_singleton.c - a context without any launcher: a job of one process.
 *
 * The program removes every PMIX_* variable from its environment first
 * (meson's env: can set variables but not unset them), so it is a
 * singleton even when run from inside an allocation.  Statistics pages go
 * to a private temporary directory (PM_STATS_DIR), checked empty at the end.
 */
#include "check.h"
#include "pm.h"
#include "core/pm_internal.h"
#include "stats.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The statistics directory of the test (check.h removes it at exit). */
static const char *dir;

static int files_in(const char *path, const char *prefix)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	CHECK(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.' && strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	closedir(d);
	return n;
}

static const struct pm_stats_page *map_page(pm_context_t *ctx)
{
	const struct pm_stats_page *p;

	CHECK_OK(pm_stats_map(ctx->stats_path, &p));
	return p;
}

static struct pm_stats stats(pm_context_t *ctx)
{
	struct pm_stats s;

	CHECK_OK(pm_stats_get(ctx, &s));
	return s;
}

static void send_pattern(pm_context_t *ctx, size_t len, uint64_t seed)
{
	void *buf;

	CHECK_OK(pm_send_buffer(ctx, 0, len, &buf));
	check_fill(buf, len, seed);
	CHECK_OK(pm_send(ctx, 0, len));
}

static void recv_pattern(pm_context_t *ctx, size_t len, uint64_t seed)
{
	struct pm_msg m;

	CHECK_OK(pm_recv(ctx, &m));
	CHECK_EQ(m.peer, 0);
	CHECK_EQ(m.len, len);
	CHECK_PATTERN(m.data, m.len, seed);
	CHECK_OK(pm_release(ctx, &m));
}

static void test_identity(pm_context_t *ctx, size_t ring_bytes)
{
	CHECK_EQ(pm_rank(ctx), 0);
	CHECK_EQ(pm_size(ctx), 1);
	CHECK(pm_peer_device(ctx, 0) != NULL);
	CHECK(pm_peer_device(ctx, 1) == NULL);
	CHECK(pm_peer_device(ctx, -1) == NULL);
	CHECK_EQ(pm_max_message(ctx, 0), ring_bytes / 4);
	CHECK_EQ(pm_max_message(ctx, 1), 0);
	CHECK_EQ(pm_peer_alive(ctx, 0), 1);
	CHECK_ERR(pm_peer_alive(ctx, 1), -EINVAL);
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", PM_VERSION_MAJOR, PM_VERSION_MINOR,
		 PM_VERSION_PATCH);
	CHECK(strcmp(pm_version(), want) == 0);
	CHECK(strcmp(pm_strerror(-EAGAIN), strerror(EAGAIN)) == 0);

	/* The page describes this context. */
	const struct pm_stats_page *p = map_page(ctx);

	CHECK_EQ(p->pid, getpid());
	CHECK_EQ(p->rank, 0);
	CHECK_EQ(p->size, 1);
	CHECK_EQ(p->nlocal, 1);
	CHECK(strncmp(p->job, "singleton.", 10) == 0);
	CHECK_EQ(atomic_load(&p->state), PM_STATS_OPEN);
	pm_stats_unmap(p);

	/* The shm segment's name was removed once the context was ready. */
	char seg[64];

	snprintf(seg, sizeof(seg), "pm-%016" PRIx64 "-", ctx->boot.jobkey);
	CHECK_EQ(files_in("/dev/shm", seg), 0);
}

static void test_self_messages(pm_context_t *ctx)
{
	struct pm_msg m;
	void *buf, *buf2;
	size_t max = pm_max_message(ctx, 0);
	struct pm_stats s0 = stats(ctx);

	CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);
	CHECK_ERR(pm_recv(ctx, NULL), -EINVAL);

	/* Sizes around the boundaries, queued then taken in order. */
	size_t sizes[] = { 0, 1, 15, 16, 17, 63, 64, 65, 1000, max - 1, max };
	size_t n = sizeof(sizes) / sizeof(sizes[0]);
	uint64_t bytes = 0;

	/* The small ones queued, then taken in order; the large ones (two
	 * of max do not fit a ring of 4 x max with others) one at a time. */
	for (size_t i = 0; i < n; i++) {
		bytes += sizes[i];
		if (sizes[i] < 1000)
			send_pattern(ctx, sizes[i], 500 + i);
	}
	for (size_t i = 0; i < n; i++)
		if (sizes[i] < 1000)
			recv_pattern(ctx, sizes[i], 500 + i);
	for (size_t i = 0; i < n; i++) {
		if (sizes[i] >= 1000) {
			send_pattern(ctx, sizes[i], 500 + i);
			recv_pattern(ctx, sizes[i], 500 + i);
		}
	}
	CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);

	struct pm_stats s1 = stats(ctx);

	CHECK_EQ(s1.msgs_sent - s0.msgs_sent, n);
	CHECK_EQ(s1.msgs_recv - s0.msgs_recv, n);
	CHECK_EQ(s1.bytes_sent - s0.bytes_sent, bytes);
	CHECK_EQ(s1.bytes_recv - s0.bytes_recv, bytes);

	/* Misuse. */
	CHECK_ERR(pm_send_buffer(ctx, 0, max + 1, &buf), -EMSGSIZE);
	CHECK_ERR(pm_send_buffer(ctx, 1, 1, &buf), -EINVAL);
	CHECK_ERR(pm_send_buffer(ctx, -1, 1, &buf), -EINVAL);
	CHECK_ERR(pm_send_buffer(ctx, 0, 1, NULL), -EINVAL);
	CHECK_ERR(pm_send(ctx, 0, 0), -EINVAL);         /* nothing outstanding */
	CHECK_ERR(pm_send(ctx, 1, 0), -EINVAL);
	CHECK_OK(pm_send_buffer(ctx, 0, 100, &buf));
	CHECK_ERR(pm_send_buffer(ctx, 0, 10, &buf2), -EBUSY);
	CHECK_ERR(pm_send(ctx, 0, 101), -EMSGSIZE);
	check_fill(buf, 40, 9);
	CHECK_OK(pm_send(ctx, 0, 40));                  /* less than asked for */
	CHECK_OK(pm_recv(ctx, &m));
	CHECK_EQ(m.len, 40);
	CHECK_PATTERN(m.data, 40, 9);
	struct pm_msg copy = m;

	CHECK_OK(pm_release(ctx, &m));
	CHECK_ERR(pm_release(ctx, &copy), -EINVAL);     /* twice */
	copy.peer = 5;
	CHECK_ERR(pm_release(ctx, &copy), -EINVAL);
	CHECK_ERR(pm_release(ctx, NULL), -EINVAL);
	/* Failed sends counted nothing. */
	struct pm_stats s2 = stats(ctx);

	CHECK_EQ(s2.msgs_sent, s1.msgs_sent + 1);
	CHECK_EQ(s2.bytes_sent, s1.bytes_sent + 40);
	CHECK_EQ(s2.send_eagain, s1.send_eagain);

	/* Out-of-order release of held messages. */
	struct pm_msg held[8];

	for (int i = 0; i < 8; i++)
		send_pattern(ctx, 100 + (size_t)i, 700 + (uint64_t)i);
	for (int i = 0; i < 8; i++) {
		CHECK_OK(pm_recv(ctx, &held[i]));
		CHECK_EQ(held[i].len, 100 + i);
	}
	for (int i = 7; i >= 0; i -= 2)
		CHECK_OK(pm_release(ctx, &held[i]));
	for (int i = 0; i < 8; i += 2)
		CHECK_PATTERN(held[i].data, held[i].len, 700 + (uint64_t)i);
	for (int i = 0; i < 8; i += 2)
		CHECK_OK(pm_release(ctx, &held[i]));
}

static void test_self_full(pm_context_t *ctx)
{
	void *buf;
	size_t max = pm_max_message(ctx, 0);
	struct pm_stats s0 = stats(ctx);
	int sent = 0;
	int err;

	/* Nothing to receive and no space wanted: the wait times out. */
	uint64_t t0 = check_now_ns();

	CHECK_ERR(pm_wait(ctx, 30), -ETIMEDOUT);
	CHECK_U64(check_now_ns() - t0, >=, 25u * 1000000u);

	while ((err = pm_send_buffer(ctx, 0, max, &buf)) == 0) {
		check_fill(buf, max, 900 + (uint64_t)sent);
		CHECK_OK(pm_send(ctx, 0, max));
		sent++;
		CHECK(sent < 10);
	}
	CHECK_ERR(err, -EAGAIN);
	CHECK(sent >= 2);       /* 3, or 2 after a PAD */
	CHECK_ERR(pm_send_buffer(ctx, 0, max, &buf), -EAGAIN);
	struct pm_stats s1 = stats(ctx);

	CHECK_EQ(s1.send_eagain - s0.send_eagain, 2);
	/* A message is waiting: pm_wait returns at once. */
	CHECK_OK(pm_wait(ctx, 1000));

	struct pm_msg m;

	for (int i = 0; i < sent; i++) {
		CHECK_OK(pm_recv(ctx, &m));
		CHECK_EQ(m.len, max);
		CHECK_PATTERN(m.data, max, 900 + (uint64_t)i);
		CHECK_OK(pm_release(ctx, &m));
	}
	CHECK_OK(pm_send_buffer(ctx, 0, max, &buf));
	CHECK_OK(pm_send(ctx, 0, 0));
	CHECK_OK(pm_recv(ctx, &m));
	CHECK_EQ(m.len, 0);
	CHECK_OK(pm_release(ctx, &m));
}

static void test_self_rma(pm_context_t *ctx)
{
	enum { LEN = 3 * 4096 + 123 };
	uint8_t *region = malloc(LEN), *local = malloc(LEN), *orig = malloc(LEN);
	pm_mr_t *mr, *mr2;
	struct pm_op op;
	struct pm_stats s0 = stats(ctx);

	CHECK(region && local && orig);
	check_fill(region, LEN, 1);
	memcpy(orig, region, LEN);
	CHECK_ERR(pm_mr_register(ctx, NULL, 10, &mr), -EINVAL);
	CHECK_ERR(pm_mr_register(ctx, region, 0, &mr), -EINVAL);
	CHECK_OK(pm_mr_register(ctx, region, LEN, &mr));
	uint64_t key = pm_mr_key(mr);

	CHECK(key != 0);
	CHECK_EQ(pm_mr_key(NULL), 0);

	/* Whole region read. */
	memset(local, 0, LEN);
	CHECK_OK(pm_read(ctx, 0, local, LEN, key, 0, &op));
	CHECK_EQ(pm_test(ctx, &op), 1);
	CHECK_EQ(op.status, 0);
	CHECK_PATTERN(local, LEN, 1);

	/* First and last byte written, then read back. */
	uint8_t b = 0xEE;

	CHECK_OK(pm_write(ctx, 0, &b, 1, key, 0, &op));
	CHECK_EQ(pm_test(ctx, &op), 1);
	b = 0xDD;
	CHECK_OK(pm_write(ctx, 0, &b, 1, key, LEN - 1, &op));
	CHECK_EQ(region[0], 0xEE);
	CHECK_EQ(region[LEN - 1], 0xDD);
	CHECK(memcmp(region + 1, orig + 1, LEN - 2) == 0);
	b = 0;
	CHECK_OK(pm_read(ctx, 0, &b, 1, key, LEN - 1, &op));
	CHECK_EQ(b, 0xDD);

	/* Full region write. */
	check_fill(local, LEN, 2);
	CHECK_OK(pm_write(ctx, 0, local, LEN, key, 0, &op));
	CHECK_PATTERN(region, LEN, 2);

	/* Out of bounds. */
	CHECK_ERR(pm_write(ctx, 0, local, 1, key, LEN, &op), -ERANGE);
	CHECK_EQ(op.status, -ERANGE);
	CHECK_EQ(pm_test(ctx, &op), 1);
	CHECK_ERR(pm_read(ctx, 0, local, 2, key, LEN - 1, &op), -ERANGE);
	CHECK_ERR(pm_read(ctx, 0, local, LEN + 1, key, 0, &op), -ERANGE);
	CHECK_ERR(pm_read(ctx, 0, local, 2, key, UINT64_MAX, &op), -ERANGE);
	CHECK_ERR(pm_read(ctx, 0, local, 16, key, UINT64_MAX - 8, &op), -ERANGE);
	CHECK_PATTERN(region, LEN, 2);
	/* Bad keys. */
	CHECK_ERR(pm_read(ctx, 0, local, 1, 0, 0, &op), -ENOENT);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key + 1, 0, &op), -ENOENT);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key ^ (1ull << 20), 0, &op), -ENOENT);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key | 0xffff, 0, &op), -ENOENT);
	CHECK_ERR(pm_read(ctx, 1, local, 1, key, 0, &op), -EINVAL);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key, 0, NULL), -EINVAL);

	/* Deregistered: the key is gone, and a new registration in the same
	 * slot does not revive it. */
	CHECK_OK(pm_mr_deregister(ctx, mr));
	CHECK_ERR(pm_mr_deregister(ctx, mr), -EINVAL);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key, 0, &op), -ENOENT);
	/* A free slot's key reads as 0: key 0 must not name it (its old
	 * bounds may still be in the table). */
	CHECK_ERR(pm_read(ctx, 0, local, 1, 0, 0, &op), -ENOENT);
	CHECK_ERR(pm_write(ctx, 0, local, 1, 0, 0, &op), -ENOENT);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key & 0xffff, 0, &op), -ENOENT);
	CHECK_OK(pm_mr_register(ctx, region, LEN, &mr2));
	CHECK(pm_mr_key(mr2) != key);
	CHECK_ERR(pm_read(ctx, 0, local, 1, key, 0, &op), -ENOENT);
	CHECK_OK(pm_read(ctx, 0, local, 1, pm_mr_key(mr2), 0, &op));

	struct pm_stats s1 = stats(ctx);

	CHECK_EQ(s1.rma_writes - s0.rma_writes, 3);
	CHECK_EQ(s1.rma_reads - s0.rma_reads, 3);
	CHECK_EQ(s1.rma_bytes - s0.rma_bytes, LEN + 1 + 1 + 1 + LEN + 1);
	/* Local buffers went through the registration cache. */
	CHECK(s1.regcache_hits > s0.regcache_hits);
	CHECK(s1.regcache_misses > s0.regcache_misses);

	/* The window table is bounded. */
	static pm_mr_t *many[PM_MAX_WINDOWS];
	int n = 0;
	int err;

	while ((err = pm_mr_register(ctx, region, 8, &many[n])) == 0) {
		n++;
		CHECK(n <= PM_MAX_WINDOWS);
	}
	CHECK_ERR(err, -ENOSPC);
	CHECK_EQ(n, PM_MAX_WINDOWS - 1);        /* mr2 holds one */
	for (int i = 0; i < n; i++)
		CHECK_OK(pm_mr_deregister(ctx, many[i]));
	CHECK_OK(pm_mr_deregister(ctx, mr2));
	free(region);
	free(local);
	free(orig);
}

static void test_quiesce(pm_context_t *ctx)
{
	void *buf;
	struct pm_op op;
	uint8_t region[64], x = 1;
	pm_mr_t *mr;
	struct pm_stats s0 = stats(ctx);
	const struct pm_stats_page *p = map_page(ctx);

	CHECK_OK(pm_mr_register(ctx, region, sizeof(region), &mr));
	send_pattern(ctx, 10, 1);               /* in flight across the quiesce */

	uint64_t t0 = check_now_ns();

	CHECK_OK(pm_quiesce(ctx));
	uint64_t took = check_now_ns() - t0;

	CHECK_EQ(atomic_load(&p->state), PM_STATS_QUIESCED);
	CHECK_OK(pm_quiesce(ctx));              /* idempotent */
	struct pm_stats s1 = stats(ctx);

	CHECK_EQ(s1.quiesces - s0.quiesces, 1);
	CHECK_U64(s1.quiesce_ns - s0.quiesce_ns, <=, took);

	CHECK_ERR(pm_send_buffer(ctx, 0, 1, &buf), -EAGAIN);
	CHECK_ERR(pm_write(ctx, 0, &x, 1, pm_mr_key(mr), 0, &op), -EAGAIN);
	CHECK_ERR(pm_read(ctx, 0, &x, 1, pm_mr_key(mr), 0, &op), -EAGAIN);
	/* Receiving goes on while quiesced. */
	recv_pattern(ctx, 10, 1);
	struct pm_stats s2 = stats(ctx);

	CHECK_EQ(s2.send_eagain - s1.send_eagain, 1);
	CHECK_EQ(s2.rma_writes, s1.rma_writes);

	CHECK_OK(pm_resume(ctx));
	CHECK_EQ(atomic_load(&p->state), PM_STATS_OPEN);
	CHECK_OK(pm_resume(ctx));
	send_pattern(ctx, 11, 2);
	recv_pattern(ctx, 11, 2);
	CHECK_OK(pm_write(ctx, 0, &x, 1, pm_mr_key(mr), 0, &op));
	CHECK_OK(pm_mr_deregister(ctx, mr));
	pm_stats_unmap(p);
}

/* Failures to open leave nothing behind. */
static void test_open_failures(void)
{
	pm_context_t *ctx = (pm_context_t *)1;
	struct pm_open_attr bad_dev = { .device = "nonsense" };
	struct pm_open_attr bad_ring = { .device = "shm", .shm_ring_kib = 3 };

	CHECK_ERR(pm_open(NULL, NULL), -EINVAL);
	CHECK_ERR(pm_open(&ctx, &bad_dev), -ENODEV);
	CHECK(ctx == NULL);
	CHECK_EQ(files_in(dir, ""), 0);
	CHECK_ERR(pm_open(&ctx, &bad_ring), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_EQ(files_in(dir, ""), 0);
	setenv("PM_SHM_RING_KIB", "abc", 1);
	CHECK_ERR(pm_open(&ctx, NULL), -EINVAL);
	unsetenv("PM_SHM_RING_KIB");
	CHECK_EQ(files_in(dir, ""), 0);
	CHECK_ERR(pm_close(NULL), -EINVAL);
}

/* An address names its context; another job's is refused, as is garbage. */
static void test_addresses(pm_context_t *a, pm_context_t *b)
{
	unsigned char addr[PM_ADDRESS_MAX], other[PM_ADDRESS_MAX];
	size_t len = 4, olen = sizeof(other);
	int peer = -1;

	CHECK_ERR(pm_address(a, addr, &len), -ENOBUFS);
	CHECK(len > 4 && len <= PM_ADDRESS_MAX);
	len = sizeof(addr);
	CHECK_OK(pm_address(a, addr, &len));
	CHECK_OK(pm_peer_insert(a, addr, len, &peer));
	CHECK_EQ(peer, 0);
	CHECK_ERR(pm_peer_insert(a, addr, len - 1, &peer), -EINVAL);
	/* b is another job (another singleton): same rank, other tag. */
	CHECK_OK(pm_address(b, other, &olen));
	CHECK_EQ(olen, len);
	CHECK(memcmp(addr, other, len) != 0);
	CHECK_ERR(pm_peer_insert(a, other, olen, &peer), -EADDRNOTAVAIL);
	CHECK_ERR(pm_peer_insert(b, addr, len, &peer), -EADDRNOTAVAIL);
	/* A rank beyond the job, and an unknown kind. */
	memcpy(other, addr, len);
	other[4] = 1;
	CHECK_ERR(pm_peer_insert(a, other, len, &peer), -EADDRNOTAVAIL);
	memcpy(other, addr, len);
	other[0] = 9;
	CHECK_ERR(pm_peer_insert(a, other, len, &peer), -EINVAL);
	CHECK_ERR(pm_peer_insert(a, NULL, len, &peer), -EINVAL);
}

int main(void)
{
	check_unset_pmix();
	dir = check_tmp_dir_make("singleton");
	setenv("PM_STATS_DIR", dir, 1);
	unsetenv("PM_DEVICE");
	unsetenv("PM_SHM_RING_KIB");
	setvbuf(stdout, NULL, _IOLBF, 0);

	const char *devices[] = { NULL, "shm", "composite" };

	for (size_t d = 0; d < sizeof(devices) / sizeof(devices[0]); d++) {
		struct pm_open_attr attr = { .device = devices[d] };
		size_t ring = 512 * 1024;
		pm_context_t *ctx;

		if (d == 1) {
			attr.shm_ring_kib = 16;
			ring = 16 * 1024;
		}
		CHECK_OK(pm_open(&ctx, &attr));
		CHECK_EQ(files_in(dir, "pm-stats."), 1);
		test_identity(ctx, ring);
		test_self_messages(ctx);
		test_self_full(ctx);
		test_self_rma(ctx);
		test_quiesce(ctx);
		CHECK_OK(pm_close(ctx));
		CHECK_EQ(files_in(dir, ""), 0);
		printf("singleton on %s passed\n", devices[d] ? devices[d] : "the default device");
	}

	/* Two contexts at once in one process: two pages, two segments. */
	pm_context_t *a, *b;

	CHECK_OK(pm_open(&a, NULL));
	CHECK_OK(pm_open(&b, NULL));
	CHECK_EQ(files_in(dir, "pm-stats."), 2);
	CHECK(a->boot.jobkey != b->boot.jobkey);
	test_addresses(a, b);
	send_pattern(a, 33, 3);
	CHECK_ERR(pm_recv(b, &(struct pm_msg){ 0 }), -EAGAIN);
	recv_pattern(a, 33, 3);
	CHECK_OK(pm_close(a));
	CHECK_EQ(files_in(dir, "pm-stats."), 1);
	CHECK_OK(pm_close(b));
	CHECK_EQ(files_in(dir, ""), 0);

	test_open_failures();
	CHECK_OK(rmdir(dir));
	printf("singleton tests passed\n");
	return 0;
}
