/* SPDX-License-Identifier: MIT */
/*
 * mp_peerdeath.c - a peer that dies.
 *
 * Rank 1 sends a few messages (the last one carries its pid) and calls
 * _exit() at once: no pm_close(), its mappings torn down by the kernel.
 * Rank 0 must still receive what was sent before the death, then see
 * pm_wait() return -ECONNRESET within a bounded time, pm_peer_alive() say
 * 0 for rank 1 (and 1 for itself), and sends and remote reads to the
 * dead peer fail with -EPIPE.  Rank 0 then closes and
 * exits 0.
 *
 * mpirun: a process that called PMIx_Init and exits without PMIx_Finalize
 * makes Open MPI 4.1 abort the whole job ("exiting improperly"), killing
 * rank 0 before it has checked anything.  meson runs this test with
 * `--mca orte_allowed_exit_without_sync 1` and rank 1 exits with status 0,
 * so mpirun lets rank 0 finish and reports rank 0's status.  (Killing
 * rank 1 with a signal instead, with orte_abort_on_non_zero_status 0,
 * leaves mpirun 4.1.4 hanging after all processes are gone.)
 *
 * The dead process leaves its statistics page behind (nobody is there to
 * remove it; docs/pm/stats.md: readers treat a page whose pid is gone as
 * stale).  Rank 0 checks that it is there and removes it, so the test
 * leaves nothing in the statistics directory.
 */
#include "mp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BEFORE 5

struct last_msg {
	int32_t pid;
	int32_t _pad;
	uint64_t key;           /* a region of the dying process */
};

static void die_after_sending(struct mp *m)
{
	struct pm_msg go;

	/* Rank 0 first checks that we are alive. */
	mp_recv(m, &go);
	mp_release(m, &go);
	for (uint64_t i = 0; i < BEFORE; i++)
		mp_send_pattern(m, 0, 100 + i, 50 + i);

	static uint8_t region[4096];
	pm_mr_t *mr;

	CHECK_OK(pm_mr_register(m->ctx, region, sizeof(region), &mr));

	struct last_msg last = { (int32_t)getpid(), 0, pm_mr_key(mr) };

	mp_send(m, 0, &last, sizeof(last));
	/* Gone, without pm_close() or anything else. */
	_exit(0);
}

/* If a check fails after rank 1 died, its page still goes. */
static char dead_page[4096];

static void remove_dead_page(void)
{
	if (dead_page[0])
		unlink(dead_page);
}

int main(void)
{
	struct pm_open_attr attr = { .shm_ring_kib = 16 };
	struct mp m;

	mp_open(&m, &attr, 2, 20);
	if (m.rank == 1)
		die_after_sending(&m);

	CHECK_EQ(pm_peer_alive(m.ctx, 1), 1);
	CHECK_EQ(pm_peer_alive(m.ctx, 0), 1);
	mp_send(&m, 1, "go", 2);

	/* What was sent before the death is delivered. */
	struct pm_msg msg;

	for (uint64_t i = 0; i < BEFORE; i++) {
		mp_recv(&m, &msg);
		CHECK_EQ(msg.peer, 1);
		CHECK_EQ(msg.len, 100 + i);
		CHECK_PATTERN(msg.data, msg.len, 50 + i);
		mp_release(&m, &msg);
	}
	struct last_msg last;

	mp_recv(&m, &msg);
	CHECK_EQ(msg.len, sizeof(last));
	memcpy(&last, msg.data, sizeof(last));
	mp_release(&m, &msg);

	int32_t pid1 = last.pid;
	uint64_t rkey1 = last.key;

	/* Rank 1 has one context: its page is pm-stats.PID.0. */
	snprintf(dead_page, sizeof(dead_page), "%s/pm-stats.%d.0", mp_stats_dir(), (int)pid1);
	atexit(remove_dead_page);

	/* The death is reported within a bounded time. */
	uint64_t t0 = check_now_ns(), limit = 5000000000ull;
	int err;

	while ((err = pm_wait(m.ctx, 200)) != -ECONNRESET) {
		CHECK_MSG(err == 0 || err == -ETIMEDOUT, "pm_wait: %s", check_errname(err));
		CHECK_ERR(pm_recv(m.ctx, &msg), -EAGAIN);
		CHECK_MSG(check_now_ns() - t0 < limit,
			  "rank 1 died but pm_wait has not said -ECONNRESET after 5 s");
	}
	uint64_t detect_ms = (check_now_ns() - t0) / 1000000u;

	CHECK_EQ(pm_peer_alive(m.ctx, 1), 0);
	CHECK_EQ(pm_peer_alive(m.ctx, 0), 1);
	CHECK_ERR(pm_peer_alive(m.ctx, 2), -EINVAL);
	/* It stays reported. */
	CHECK_ERR(pm_wait(m.ctx, 10), -ECONNRESET);
	CHECK_ERR(pm_recv(m.ctx, &msg), -EAGAIN);

	/* Sending to a peer known to be dead is refused with -EPIPE, whatever
	 * room its ring has, and keeps being refused. */
	size_t max = pm_max_message(m.ctx, 1);
	void *buf;

	CHECK_ERR(pm_send_buffer(m.ctx, 1, 0, &buf), -EPIPE);
	CHECK_ERR(pm_send_buffer(m.ctx, 1, max, &buf), -EPIPE);
	CHECK_ERR(pm_send_buffer(m.ctx, 1, 1, &buf), -EPIPE);
	/* So is remote memory (its address space is gone). */
	struct pm_op op;
	uint8_t x = 0;

	err = pm_read(m.ctx, 1, &x, 1, rkey1, 0, &op);
	CHECK_MSG(err == -EPIPE, "pm_read from the dead peer: %s", check_errname(err));
	CHECK_EQ(pm_test(m.ctx, &op), 1);
	CHECK_EQ(op.status, -EPIPE);
	/* Ourselves: still fine. */
	mp_send_pattern(&m, 0, 10, 1);
	mp_recv(&m, &msg);
	CHECK_EQ(msg.peer, 0);
	CHECK_PATTERN(msg.data, 10, 1);
	mp_release(&m, &msg);

	/* The dead process's page is stale: there, with its pid. */
	char prefix[64];

	snprintf(prefix, sizeof(prefix), "pm-stats.%d.", (int)pid1);
	CHECK_MSG(mp_count_files(mp_stats_dir(), prefix) == 1,
		  "no stale statistics page %s/%s* of the dead rank", mp_stats_dir(), prefix);
	CHECK_EQ(mp_remove_files(mp_stats_dir(), prefix), 1);
	dead_page[0] = 0;
	CHECK_EQ(mp_count_files(mp_stats_dir(), prefix), 0);

	/* Segment names were removed when the job opened. */
	char seg[64];

	CHECK(mp_segment_prefix(seg, sizeof(seg)));
	CHECK_EQ(mp_count_files("/dev/shm", seg), 0);

	CHECK_OK(pm_close(m.ctx));
	mp_closed(&m);              /* our page went with the context */
	printf("rank 1 died; rank 0 saw -ECONNRESET after %llu ms, then -EPIPE\n",
	       (unsigned long long)detect_ms);
	return 0;
}
