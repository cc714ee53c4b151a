/* SPDX-License-Identifier: MIT */
/*
 * test_signal.c - pm_signal(): another thread (or a signal handler) gets a
 * thread out of pm_wait().
 *
 * On every device a singleton can open (shm; composite, which is shm alone
 * in a job of one process; udp over loopback) and on a composite of shm
 * and udp (a context opened by hand over a bootstrap that plays a job of
 * two nodes: "rank 1" is this process's own udp address), it checks that
 *
 *  - a thread asleep in pm_wait(ctx, 20 s) returns 0 when another thread
 *    calls pm_signal(), long before its timeout (-ETIMEDOUT means the
 *    wake-up was lost: the sleep was not interrupted);
 *  - the same from a signal handler on the sleeping thread itself;
 *  - a signal before the wait makes the wait return 0 at once, and several
 *    signals make one wake-up (the next pm_wait(ctx, 50) times out);
 *  - over hundreds of rounds with the signal at random moments (while the
 *    waiter spins, falls asleep, sleeps), no wake-up is lost.
 *
 * No check is on speed: a waiter waits up to 20 s, and a wake-up is lost
 * when it still waits 10 s after the signal (a sleep that ends at its
 * deadline returns 0 as well, the flag being set by then).  The wake-up
 * times are printed for the curious.
 */
#include "check.h"
#include "pm.h"
#include "core/pm_internal.h"
#include "stats.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LONG_MS   20000         /* a wait that a lost wake-up turns into a failure */
#define LOST_NS   10000000000ull /* still waiting this long after a signal: lost */
#define SPIN_US   20            /* short, so that most waits sleep */
#define ROUNDS    1000

static uint64_t waits_blocked(pm_context_t *ctx)
{
	/* The owner thread counts in the shared page; others read it live. */
	return __atomic_load_n(&ctx->stats->waits_blocked, __ATOMIC_RELAXED);
}

/* ---- a waiter thread ---- */

struct waiter {
	pthread_t thread;
	pm_context_t *ctx;
	int timeout_ms;
	uint64_t blocked0;      /* waits_blocked before the wait */
	int ret;
	uint64_t returned_ns;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	w->ret = pm_wait(w->ctx, w->timeout_ms);
	w->returned_ns = check_now_ns();
	return NULL;
}

/* Start a thread in pm_wait(ctx, LONG_MS) and return once it has gone to
 * sleep (it counted a blocked wait), and a little more, so that the
 * signal most likely finds it in the kernel. */
static void waiter_start_asleep(struct waiter *w, pm_context_t *ctx)
{
	*w = (struct waiter){ .ctx = ctx, .timeout_ms = LONG_MS };
	w->blocked0 = waits_blocked(ctx);
	CHECK_OK(pthread_create(&w->thread, NULL, waiter_main, w));

	uint64_t give_up = check_now_ns() + 10000000000ull;

	while (waits_blocked(ctx) == w->blocked0) {
		CHECK_MSG(check_now_ns() < give_up, "the waiter did not go to sleep within 10 s");
		usleep(100);
	}
	usleep(5000);
}

/* Join a thread that must return soon, well before its wait's timeout. */
static void join_soon(pthread_t t, const char *what)
{
	struct timespec give_up;

	clock_gettime(CLOCK_REALTIME, &give_up);
	give_up.tv_sec += (time_t)(LOST_NS / 1000000000u);
	int err = pthread_timedjoin_np(t, NULL, &give_up);

	CHECK_MSG(err == 0, "%s: the waiter is still in pm_wait %llu s after pm_signal (%s): "
		  "the wake-up was lost", what, (unsigned long long)(LOST_NS / 1000000000u),
		  strerror(err));
}

static void waiter_join(struct waiter *w, const char *what, uint64_t signalled_ns)
{
	join_soon(w->thread, what);
	CHECK_MSG(w->ret == 0, "%s: pm_wait returned %s, expected 0", what,
		  check_errname(w->ret));
	printf("  %s: woken %llu us after the signal\n", what,
	       (unsigned long long)((w->returned_ns - signalled_ns) / 1000));
}

/* ---- the checks ---- */

static void test_sleeper_woken(pm_context_t *ctx)
{
	struct waiter w;

	waiter_start_asleep(&w, ctx);
	uint64_t t = check_now_ns();

	CHECK_OK(pm_signal(ctx));
	waiter_join(&w, "asleep, signalled by another thread", t);
	/* One blocked wait, and the signal was taken by it. */
	CHECK_EQ(waits_blocked(ctx) - w.blocked0, 1);
	CHECK_ERR(pm_wait(ctx, 50), -ETIMEDOUT);
}

static pm_context_t *handler_ctx;
static volatile sig_atomic_t handler_errno_kept;

static void on_sigusr1(int sig)
{
	(void)sig;
	errno = EDOM;
	pm_signal(handler_ctx);
	handler_errno_kept = errno == EDOM;
}

/* The handler runs on the sleeping thread itself, interrupting its sleep
 * (EINTR alone does not end pm_wait: it goes back to sleep). */
static void test_signal_from_handler(pm_context_t *ctx)
{
	struct sigaction sa = { .sa_handler = on_sigusr1 }, old;
	struct waiter w;

	handler_ctx = ctx;
	handler_errno_kept = 0;
	sigemptyset(&sa.sa_mask);
	CHECK_OK(sigaction(SIGUSR1, &sa, &old));
	waiter_start_asleep(&w, ctx);
	uint64_t t = check_now_ns();

	CHECK_OK(pthread_kill(w.thread, SIGUSR1));
	waiter_join(&w, "asleep, signalled from its own signal handler", t);
	CHECK(handler_errno_kept);
	CHECK_OK(sigaction(SIGUSR1, &old, NULL));
	CHECK_ERR(pm_wait(ctx, 50), -ETIMEDOUT);
}

static void test_signal_before_wait(pm_context_t *ctx)
{
	CHECK_ERR(pm_signal(NULL), -EINVAL);

	/* Remembered for the next wait, by the same thread or another. */
	CHECK_OK(pm_signal(ctx));
	CHECK_OK(pm_wait(ctx, LONG_MS));
	CHECK_ERR(pm_wait(ctx, 50), -ETIMEDOUT);

	/* Not counted: three signals, one wake-up. */
	CHECK_OK(pm_signal(ctx));
	CHECK_OK(pm_signal(ctx));
	CHECK_OK(pm_signal(ctx));
	CHECK_OK(pm_wait(ctx, LONG_MS));
	CHECK_ERR(pm_wait(ctx, 50), -ETIMEDOUT);
	/* A timeout of 0 takes it too. */
	CHECK_OK(pm_signal(ctx));
	CHECK_OK(pm_wait(ctx, 0));
	CHECK_ERR(pm_wait(ctx, 0), -ETIMEDOUT);
}

/*
 * Rounds of wait and signal with the signal at random moments: at once
 * (the waiter may not even be in pm_wait yet), while it spins, while it
 * falls asleep, once it sleeps.  Each round's waiter waits until that
 * round's signal was sent: a wait may end spuriously, or for the previous
 * round's signal when the waiter got ahead of it; but none may time out.
 */
struct rounds {
	pm_context_t *ctx;
	_Atomic int entered;    /* rounds the waiter has started */
	_Atomic int sent;       /* signals sent */
	_Atomic int failed_ret;
	int failed_round;       /* written before failed_ret */
};

static void *rounds_waiter(void *arg)
{
	struct rounds *r = arg;

	for (int i = 0; i < ROUNDS; i++) {
		atomic_store(&r->entered, i + 1);
		do {
			int ret = pm_wait(r->ctx, LONG_MS);

			if (ret) {
				r->failed_round = i;
				atomic_store(&r->failed_ret, ret);
				return NULL;
			}
		} while (atomic_load(&r->sent) < i + 1);
	}
	return NULL;
}

static void test_rounds(pm_context_t *ctx)
{
	struct rounds r = { .ctx = ctx };
	pthread_t t;
	uint64_t rnd = 0x5eed;
	uint64_t blocked0 = waits_blocked(ctx), start = check_now_ns();

	CHECK_OK(pthread_create(&t, NULL, rounds_waiter, &r));
	for (int i = 0; i < ROUNDS; i++) {
		uint64_t give_up = check_now_ns() + LOST_NS;

		/* The waiter starts round i once round i-1's signal woke it. */
		while (atomic_load(&r.entered) < i + 1 && !r.failed_ret)
			CHECK_MSG(check_now_ns() < give_up, "round %d: the waiter is still in "
				  "pm_wait %llu s after pm_signal: the wake-up was lost", i - 1,
				  (unsigned long long)(LOST_NS / 1000000000u));
		if (r.failed_ret)
			break;
		/* A few at once; most within 3 x SPIN_US, around the end of
		 * the spin, where the waiter goes to sleep (the lost wake-up's
		 * window); the rest up to 400 us, in its sleep. */
		uint64_t delay_ns = i % 8 == 0 ? 0
				  : i % 4 == 0 ? check_rand(&rnd) % 400000u
				  : check_rand(&rnd) % (3u * SPIN_US * 1000u);
		uint64_t until = check_now_ns() + delay_ns;

		while (check_now_ns() < until)
			;
		atomic_store(&r.sent, i + 1);
		CHECK_OK(pm_signal(ctx));
	}
	join_soon(t, "the last round");
	CHECK_MSG(r.failed_ret == 0, "round %d: pm_wait returned %s (a lost wake-up)",
		  r.failed_round, check_errname(atomic_load(&r.failed_ret)));
	printf("  %d rounds in %llu ms, %llu of the waits slept\n", ROUNDS,
	       (unsigned long long)((check_now_ns() - start) / 1000000),
	       (unsigned long long)(waits_blocked(ctx) - blocked0));
	/* At most the last round's signal can be left over. */
	int ret = pm_wait(ctx, 50);

	CHECK(ret == 0 || ret == -ETIMEDOUT);
	CHECK_ERR(pm_wait(ctx, 50), -ETIMEDOUT);
}

static void run_all(pm_context_t *ctx, const char *what)
{
	printf("%s (peer 0 by %s)\n", what, pm_peer_device(ctx, 0));
	test_signal_before_wait(ctx);
	test_sleeper_woken(ctx);
	test_signal_from_handler(ctx);
	test_rounds(ctx);
	printf("%s passed\n", what);
}

/* ---- a composite of shm and udp, in one process ----
 *
 * Composite puts udp beside shm only when some peer is on another node.
 * The bootstrap here is a singleton's that says the job has two ranks, the
 * second one elsewhere, and answers for it with this process's own udp
 * address; nothing is ever sent to it.  The context is put together as
 * pm_open() does, minus what the wait does not use.
 */
static const struct pm_boot_ops *singleton_ops;
static struct pm_boot_ops two_node_ops;
static _Atomic uint32_t no_control;

static int two_node_get(struct pm_boot *b, int rank, const char *key, void *val, size_t *len)
{
	return singleton_ops->get(b, rank == 1 ? 0 : rank, key, val, len);
}

static pm_context_t *open_shm_and_udp(void)
{
	struct pm_context *ctx = calloc(1, sizeof(*ctx));

	CHECK(ctx);
	ctx->control_slot = -1;
	ctx->control = &no_control;
	ctx->spin_us = SPIN_US;
	ctx->shm_ring_kib = 64;
	ctx->udp_ring_kib = 64;
	ctx->udp_window = 64;
	CHECK_OK(pm_boot_open_singleton(&ctx->boot));
	singleton_ops = ctx->boot.ops;
	two_node_ops = *singleton_ops;
	two_node_ops.get = two_node_get;
	ctx->boot.ops = &two_node_ops;
	ctx->boot.size = 2;
	ctx->rank = 0;
	ctx->size = 2;
	CHECK_OK(pm_stats_publish(ctx, "composite"));
	CHECK_OK(pm_device_open(ctx, "composite"));
	CHECK(strcmp(pm_peer_device(ctx, 0), "shm") == 0);
	CHECK(strcmp(pm_peer_device(ctx, 1), "udp") == 0);
	return ctx;
}

int main(void)
{
	check_unset_pmix();
	setenv("PM_STATS_DIR", check_tmp_dir_make("signal"), 1);
	unsetenv("PM_DEVICE");
	/* udp on loopback, which every machine has. */
	setenv("PM_UDP_NICS", "127.0.0.1", 1);
	setvbuf(stdout, NULL, _IOLBF, 0);

	const char *devices[] = { "shm", "composite", "udp" };

	for (size_t d = 0; d < sizeof(devices) / sizeof(devices[0]); d++) {
		struct pm_open_attr attr = { .device = devices[d], .spin_us = SPIN_US };
		char what[64];
		pm_context_t *ctx;

		CHECK_OK(pm_open(&ctx, &attr));
		snprintf(what, sizeof(what), "singleton on %s", devices[d]);
		run_all(ctx, what);
		CHECK_OK(pm_close(ctx));
	}

	pm_context_t *ctx = open_shm_and_udp();

	run_all(ctx, "composite of shm and udp");
	CHECK_OK(pm_close(ctx));
	printf("signal tests passed\n");
	return 0;
}
