/* SPDX-License-Identifier: MIT */
/*
 * mp_wakeup.c - a process blocked in pm_wait() is woken by its peer.
 *
 * pm_wait() busy-polls briefly (spin_us = 1 here) and then sleeps; the
 * peer must wake it (the doorbell) when (a) it sends a message, and (b) it
 * releases a message and so frees space the sleeper is waiting for.  A
 * missing doorbell is not a hang (the sleeper looks again every slice of
 * about 100 ms), so the test measures, on one clock (CLOCK_MONOTONIC is
 * shared by all processes), how long after the event the sleeper woke,
 * and takes the median over many rounds: woken, it is well under a
 * millisecond on an idle machine; not woken, it is close to a whole slice.
 * The bound (25 ms) leaves room for a loaded machine.  The test also
 * checks that the sleeper really went to sleep (waits_blocked).
 */
#include "mp.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 25
#define BOUND_NS (25ull * 1000000u)

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t median(uint64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_u64);
	return v[n / 2];
}

/* Print the wake-up latencies (ns) and check their median; failure is a
 * printf format taking the median in us. */
static void check_woken(uint64_t *lat, const char *what, const char *failure)
{
	uint64_t med = median(lat, ROUNDS);

	printf("%s: median %llu us, max %llu us\n", what, (unsigned long long)(med / 1000),
	       (unsigned long long)(lat[ROUNDS - 1] / 1000));
	CHECK_MSG(med < BOUND_NS, failure, (unsigned long long)(med / 1000));
}

/* Block in pm_wait until `ready` says so; at most 5 s. */
static void wait_until(struct mp *m, bool (*ready)(struct mp *, void *), void *arg)
{
	uint64_t deadline = check_now_ns() + 5000000000ull;

	while (!ready(m, arg)) {
		CHECK_MSG(check_now_ns() < deadline, "not woken within 5 s");
		int err = pm_wait(m->ctx, 5000);

		CHECK_MSG(err == 0 || err == -ETIMEDOUT, "pm_wait: %s", check_errname(err));
	}
}

static bool got_message(struct mp *m, void *arg)
{
	return mp_try_recv(m, arg);
}

struct space {
	int peer;
	void *buf;
};

static bool got_space(struct mp *m, void *arg)
{
	struct space *s = arg;
	int err = pm_send_buffer(m->ctx, s->peer, 48, &s->buf);

	CHECK_MSG(err == 0 || err == -EAGAIN, "pm_send_buffer: %s", check_errname(err));
	return err == 0;
}

/* (a) Rank 1 sleeps waiting for a message; rank 0 sends it, stamped. */
static void message_wakeup(struct mp *m)
{
	uint64_t lat[ROUNDS];

	for (int r = 0; r < ROUNDS; r++) {
		if (m->rank == 0) {
			struct pm_msg go;

			mp_recv(m, &go);                /* rank 1 is about to sleep */
			mp_release(m, &go);
			usleep(5000);                   /* ... and is asleep now */
			uint64_t t = check_now_ns();

			mp_send(m, 1, &t, sizeof(t));
		} else {
			struct pm_msg msg;

			mp_send(m, 0, "go", 2);
			wait_until(m, got_message, &msg);
			uint64_t woke = check_now_ns(), sent;

			CHECK_EQ(msg.len, sizeof(sent));
			memcpy(&sent, msg.data, sizeof(sent));
			mp_release(m, &msg);
			lat[r] = woke - sent;
		}
	}
	if (m->rank == 1)
		check_woken(lat, "woken by a message",
			    "a sleeper is not woken by a message: median %llu us after it was sent");
}

/* (b) Rank 0 fills its ring to rank 1 and sleeps waiting for space; rank 1
 * releases them, and rank 0 reports when it woke. */
static void space_wakeup(struct mp *m)
{
	uint64_t lat[ROUNDS];

	for (int r = 0; r < ROUNDS; r++) {
		if (m->rank == 0) {
			struct space s = { .peer = 1 };
			struct pm_msg go;
			int n = 0;

			/* Rank 1 has emptied the ring: exactly 64 records fit. */
			mp_recv(m, &go);
			mp_release(m, &go);
			while (got_space(m, &s)) {
				CHECK_OK(pm_send(m->ctx, 1, 48));
				n++;
				CHECK(n <= 64);
			}
			CHECK_EQ(n, 64);
			wait_until(m, got_space, &s);
			uint64_t woke = check_now_ns();

			/* Tell rank 1 we woke; then it sends its release time
			 * (sending it earlier would ring our doorbell itself). */
			struct pm_msg msg;
			uint64_t released;

			CHECK_OK(pm_send(m->ctx, 1, 0));
			mp_recv(m, &msg);
			CHECK_EQ(msg.len, sizeof(released));
			memcpy(&released, msg.data, sizeof(released));
			mp_release(m, &msg);
			lat[r] = woke - released;
		} else {
			/* Take the 64 messages that fill the 4 KiB ring, hold them. */
			struct pm_msg held[64];

			mp_send(m, 0, "go", 2);
			for (int i = 0; i < 64; i++) {
				mp_recv(m, &held[i]);
				CHECK_EQ(held[i].len, 48);
			}
			usleep(5000);                   /* rank 0 is asleep now */
			uint64_t t = check_now_ns();

			for (int i = 0; i < 64; i++)
				mp_release(m, &held[i]);
			struct pm_msg last;

			mp_recv(m, &last);              /* the 0-byte one: it woke */
			CHECK_EQ(last.len, 0);
			mp_send(m, 0, &t, sizeof(t));
			mp_release(m, &last);
		}
	}
	mp_barrier(m);
	if (m->rank == 0)
		check_woken(lat, "woken by released space",
			    "a sender waiting for space is not woken by the release: median "
			    "%llu us after it");
}

int main(void)
{
	/* Spin 1 us, then sleep: every wait here goes to sleep. */
	struct pm_open_attr attr = { .shm_ring_kib = 4, .spin_us = 1 };
	struct mp m;
	struct pm_stats s0, s1;

	mp_open(&m, &attr, 2, 20);
	CHECK_OK(pm_stats_get(m.ctx, &s0));
	message_wakeup(&m);
	mp_barrier(&m);
	space_wakeup(&m);
	CHECK_OK(pm_stats_get(m.ctx, &s1));
	/* The sleeper of each part did sleep, most rounds. */
	CHECK_U64(s1.waits_blocked - s0.waits_blocked, >=, ROUNDS / 2);
	mp_close(&m);
	return 0;
}
