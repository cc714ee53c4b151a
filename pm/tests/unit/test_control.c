/* SPDX-License-Identifier: MIT */
/*
 * test_control.c - preemption from outside within one process: a thread
 * plays scored's agent on singleton contexts (docs/pm/control.md).
 *
 *   - two contexts answer together while the main thread computes without
 *     calling PM (the handler serves both: one process, one handler);
 *   - a SIGURG that lands on another thread is forwarded to the context's;
 *   - a pm_wait() asleep for seconds returns and the call's exit answers;
 *   - a context the application quiesced stays quiesced after the agent's
 *     resume;
 *   - an application's own SIGURG handler is kept: PM calls still answer;
 *   - PM_CONTROL=0: no handler, no answer;
 *   - the handler is gone once the last context closed;
 *   - a controller (another process) that dies while it holds the context
 *     does not hold it for ever: the context takes its word back and goes
 *     on within a bound.
 */
#include "check.h"
#include "pm.h"
#include "core/pm_internal.h"
#include "stats.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BOUND_NS 3000000000ull          /* the agent's patience */

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0)
		;
}

/* A singleton context without the launcher's environment. */
static pm_context_t *open_one(void)
{
	pm_context_t *ctx;

	CHECK_OK(pm_open(&ctx, NULL));
	return ctx;
}

/* ---- the agent ---- */

struct agent {
	pm_context_t *ctx[2];
	int n;
	int cycles;
	bool via_self;                  /* SIGURG to the agent's own thread */
	bool no_signal;                 /* write the word only */
	bool expect_answer;
	bool in_call_first;             /* poke once ctx[0] is inside a PM call */
	int hold_ms;
	int gap_ms;                     /* after a resume, before the next request */
	unsigned app_quiesced;          /* contexts that stay at 2 after resume */
	_Atomic bool done;
	uint64_t worst_ns;
	pid_t main_tid;
};

static void poke(struct agent *a)
{
	if (a->no_signal)
		return;
	if (a->via_self)
		syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGURG);
	else
		kill(getpid(), SIGURG);
}

static void wait_state(struct agent *a, uint32_t want, uint64_t *took)
{
	uint64_t t0 = check_now_ns();

	for (int i = 0; i < a->n; i++)
		while (atomic_load(&a->ctx[i]->page->state) !=
		       (want == PM_STATS_OPEN && (a->app_quiesced >> i & 1) ? PM_STATS_QUIESCED
									   : want)) {
			CHECK_MSG(check_now_ns() - t0 < BOUND_NS,
				  "context %d: state %u, waiting for %u", i,
				  atomic_load(&a->ctx[i]->page->state), want);
			sched_yield();
		}
	if (took)
		*took = check_now_ns() - t0;
}

static void *agent_main(void *arg)
{
	struct agent *a = arg;
	sigset_t urg;

	/* Like scored: the signal goes to the process, not to us - unless the
	 * test wants it here to see it forwarded. */
	sigemptyset(&urg);
	sigaddset(&urg, SIGURG);
	if (!a->via_self)
		pthread_sigmask(SIG_BLOCK, &urg, NULL);
	/* Asked while the thread is not yet in the call, the handler would
	 * answer at once and the call then sleep with nothing to wake it. */
	while (a->in_call_first && !a->ctx[0]->in_call)
		sched_yield();
	for (int c = 0; c < a->cycles; c++) {
		uint64_t took;

		for (int i = 0; i < a->n; i++)
			atomic_store(&a->ctx[i]->page->control, 1);
		poke(a);
		if (a->expect_answer) {
			wait_state(a, PM_STATS_QUIESCED, &took);
			if (took > a->worst_ns)
				a->worst_ns = took;
		} else {
			sleep_ms(100);
			for (int i = 0; i < a->n; i++)
				CHECK_EQ(atomic_load(&a->ctx[i]->page->state), PM_STATS_OPEN);
		}
		if (a->hold_ms)
			sleep_ms(a->hold_ms);
		for (int i = 0; i < a->n; i++)
			atomic_store(&a->ctx[i]->page->control, 0);
		poke(a);
		if (a->expect_answer)
			wait_state(a, PM_STATS_OPEN, NULL);
		if (a->gap_ms)
			sleep_ms(a->gap_ms);
	}
	atomic_store(&a->done, true);
	return NULL;
}

static void start(struct agent *a, pthread_t *t)
{
	atomic_store(&a->done, false);
	a->worst_ns = 0;
	CHECK(pthread_create(t, NULL, agent_main, a) == 0);
}

/* Runs the agent while this thread keeps making (empty) PM calls on its
 * one context: only the calls' exits can answer the control word. */
static void calls_until_done(struct agent *a)
{
	struct pm_msg msg;
	pthread_t t;

	start(a, &t);
	while (!atomic_load(&a->done)) {
		CHECK_ERR(pm_recv(a->ctx[0], &msg), -EAGAIN);
		sleep_ms(1);
	}
	pthread_join(t, NULL);
}

/* No PM call at all until the agent is done. */
static void compute_until_done(struct agent *a)
{
	volatile uint64_t acc = 1;

	while (!atomic_load_explicit(&a->done, memory_order_relaxed))
		for (int i = 0; i < 1000; i++)
			acc = acc * 6364136223846793005ull + 1;
}

static bool sigurg_is_ours(void)
{
	struct sigaction sa;

	CHECK(sigaction(SIGURG, NULL, &sa) == 0);
	return (sa.sa_flags & SA_SIGINFO) && sa.sa_handler != SIG_DFL;
}

static uint64_t quiesces(pm_context_t *ctx)
{
	struct pm_stats st;

	CHECK_OK(pm_stats_get(ctx, &st));
	return st.quiesces;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A child process plays an agent that asks for a quiesce and dies before it
 * resumes.  The context (its page is shared with the child across the fork)
 * quiesces in the handler while the main thread computes, holds, notices
 * that its controller is gone, takes the word back and goes on.
 */
static void test_controller_dies(void)
{
	pm_context_t *ctx = open_one();
	uint64_t q0 = quiesces(ctx), t0 = now_ns();
	pid_t child = fork();

	CHECK(child >= 0);
	if (child == 0) {
		atomic_store(&ctx->page->control, PM_CONTROL_QUIESCE);
		kill(getppid(), SIGURG);
		for (int i = 0; i < 3000 && atomic_load(&ctx->page->state) != PM_STATS_QUIESCED; i++)
			usleep(1000);
		_exit(atomic_load(&ctx->page->state) == PM_STATS_QUIESCED ? 0 : 1);
	}
	/* Compute, outside PM: the handler serves the request and holds. */
	while (quiesces(ctx) == q0 && now_ns() - t0 < 3 * BOUND_NS)
		sleep_ms(1);
	uint64_t held_ns = now_ns() - t0;
	int status;

	CHECK_EQ(waitpid(child, &status, 0), child);
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child never saw the context quiesced");
	CHECK_EQ(quiesces(ctx), q0 + 1);
	CHECK_EQ(atomic_load(&ctx->page->control), PM_CONTROL_RUN);
	CHECK_EQ(atomic_load(&ctx->page->state), PM_STATS_OPEN);
	CHECK_MSG(held_ns < 3 * BOUND_NS, "held for %.1f s by a dead controller", held_ns / 1e9);
	/* And it answers the next controller as before. */
	struct agent a = { .n = 1, .cycles = 2, .expect_answer = true, .hold_ms = 1, .gap_ms = 2 };
	pthread_t t;

	a.ctx[0] = ctx;
	start(&a, &t);
	compute_until_done(&a);
	pthread_join(t, NULL);
	CHECK_EQ(quiesces(ctx), q0 + 3);
	CHECK_OK(pm_close(ctx));
	printf("controller died while holding: the context went on after %.3f s\n",
	       held_ns / 1e9);
}

/*
 * Back to back: the agent asks again as soon as the contexts say they
 * resumed, while the handler that served the last request may still be on
 * its way out.  A request that lands there must not be lost: the main
 * thread computes, so nothing else would ever answer it.
 */
static void test_back_to_back(void)
{
	struct agent a = { .n = 2, .cycles = 20000, .expect_answer = true };
	pthread_t t;

	a.ctx[0] = open_one();
	a.ctx[1] = open_one();
	start(&a, &t);
	compute_until_done(&a);
	pthread_join(t, NULL);
	CHECK_EQ(quiesces(a.ctx[0]), 20000);
	CHECK_EQ(quiesces(a.ctx[1]), 20000);
	CHECK_OK(pm_close(a.ctx[0]));
	CHECK_OK(pm_close(a.ctx[1]));
	printf("back to back: 20000 cycles, worst answer %.3f ms\n", (double)a.worst_ns / 1e6);
}

static volatile sig_atomic_t app_urgs;

static void app_handler(int sig)
{
	(void)sig;
	app_urgs++;
}

int main(void)
{
	pthread_t t;

	/* A singleton: no launcher. */
	unsetenv("PMIX_NAMESPACE");
	unsetenv("PMIX_RANK");
	unsetenv("PM_CONTROL");

	/* Two contexts, one handler; the main thread computes. */
	struct agent a = { .n = 2, .cycles = 20, .expect_answer = true, .hold_ms = 3, .gap_ms = 2 };

	CHECK(!sigurg_is_ours());
	a.ctx[0] = open_one();
	a.ctx[1] = open_one();
	CHECK(sigurg_is_ours());
	start(&a, &t);
	compute_until_done(&a);
	pthread_join(t, NULL);
	CHECK_EQ(quiesces(a.ctx[0]), 20);
	CHECK_EQ(quiesces(a.ctx[1]), 20);
	printf("two contexts, main thread computing: 20 cycles, worst answer %.3f ms\n",
	       (double)a.worst_ns / 1e6);

	/* The signal lands on the agent's thread: forwarded to ours. */
	a.via_self = true;
	a.cycles = 5;
	start(&a, &t);
	compute_until_done(&a);
	pthread_join(t, NULL);
	CHECK_EQ(quiesces(a.ctx[0]), 25);
	printf("forwarded from another thread: 5 cycles, worst answer %.3f ms\n",
	       (double)a.worst_ns / 1e6);
	a.via_self = false;

	/* Asleep in pm_wait() for up to 10 s: it returns, its exit answers. */
	a.cycles = 1;
	a.hold_ms = 20;
	a.in_call_first = true;
	start(&a, &t);

	uint64_t t0 = check_now_ns();

	CHECK_OK(pm_wait(a.ctx[0], 10000));
	CHECK_U64(check_now_ns() - t0, <, BOUND_NS);
	pthread_join(t, NULL);
	CHECK_EQ(quiesces(a.ctx[0]), 26);
	CHECK_EQ(quiesces(a.ctx[1]), 26);
	printf("pm_wait(10 s) answered after %.3f ms\n", (double)(check_now_ns() - t0) / 1e6);
	a.in_call_first = false;

	/* Quiesced by the application: the agent's resume leaves it so. */
	CHECK_OK(pm_quiesce(a.ctx[0]));
	CHECK_EQ(quiesces(a.ctx[0]), 27);
	a.hold_ms = 3;
	a.cycles = 3;
	a.app_quiesced = 1;
	start(&a, &t);
	compute_until_done(&a);
	pthread_join(t, NULL);
	CHECK_EQ(atomic_load(&a.ctx[0]->page->state), PM_STATS_QUIESCED);
	CHECK_EQ(atomic_load(&a.ctx[1]->page->state), PM_STATS_OPEN);
	void *buf;

	CHECK_ERR(pm_send_buffer(a.ctx[0], 0, 8, &buf), -EAGAIN);
	CHECK_OK(pm_resume(a.ctx[0]));
	CHECK_EQ(atomic_load(&a.ctx[0]->page->state), PM_STATS_OPEN);
	CHECK_OK(pm_send_buffer(a.ctx[0], 0, 8, &buf));
	CHECK_OK(pm_send(a.ctx[0], 0, 8));

	struct pm_msg msg;

	CHECK_OK(pm_recv(a.ctx[0], &msg));
	CHECK_OK(pm_release(a.ctx[0], &msg));
	CHECK_EQ(quiesces(a.ctx[0]), 30);

	/* The last close takes the handler away. */
	CHECK_OK(pm_close(a.ctx[0]));
	CHECK(sigurg_is_ours());
	CHECK_OK(pm_close(a.ctx[1]));
	CHECK(!sigurg_is_ours());

	/* The application's own handler stays; a PM call answers the word
	 * (the agent's hold is long enough for the loop below to call). */
	signal(SIGURG, app_handler);

	struct agent b = { .n = 1, .cycles = 3, .expect_answer = true, .hold_ms = 3, .gap_ms = 2 };

	b.ctx[0] = open_one();
	CHECK(!sigurg_is_ours());
	calls_until_done(&b);
	CHECK_EQ(quiesces(b.ctx[0]), 3);
	CHECK(app_urgs >= 3);
	CHECK_OK(pm_close(b.ctx[0]));
	signal(SIGURG, SIG_DFL);

	/* PM_CONTROL=0: nothing installed, nothing answered, not even at calls. */
	setenv("PM_CONTROL", "0", 1);
	b = (struct agent){ .n = 1, .cycles = 2, .expect_answer = false, .hold_ms = 1, .gap_ms = 2 };
	b.ctx[0] = open_one();
	CHECK(!sigurg_is_ours());
	calls_until_done(&b);
	CHECK_EQ(quiesces(b.ctx[0]), 0);
	CHECK_OK(pm_close(b.ctx[0]));
	unsetenv("PM_CONTROL");
	printf("application handler kept; PM_CONTROL=0 never answers\n");

	test_back_to_back();
	test_controller_dies();
	return 0;
}
