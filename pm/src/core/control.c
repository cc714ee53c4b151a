/* SPDX-License-Identifier: MIT */
/*
 * control.c - network preemption driven from outside the process.
 *
 * scored's agent writes 1 into the control word of each statistics page of
 * a job and sends SIGURG; every context quiesces (nothing of its own left
 * in flight), says so with state 2, and holds - still acknowledging its
 * peers - while the agent freezes and later thaws the job's cgroup.  When
 * the agent writes 0 back (and sends SIGURG again) the context resumes.
 * The protocol and its timing are in docs/pm/control.md.
 *
 * Where the procedure runs: at the exit of a PM call when the process is
 * inside PM (its structures may be half-updated mid-call), or in the
 * signal handler itself when the process computes outside PM (PM's
 * structures are then consistent, and nothing else would ever notice).
 * The handler path must be async-signal-safe with respect to the
 * application: it uses only PM's own structures and system calls.
 *
 * The registry of open contexts and the SIGURG disposition are the one
 * piece of process-global state in libpm (libfabric keeps its provider
 * list the same way): one handler serves every context of the process.
 */
#include "pm_internal.h"
#include "stats.h"
#include "util/clock.h"
#include "util/log.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CONTROL_MAX        64           /* contexts per process the handler serves */
/* Sleeps of the hold loop.  The resume's SIGURG interrupts them, so they
 * bound only the rare wake-up lost between the check and the sleep; with
 * several contexts, each sleeps in turn and must answer its peers soon. */
#define HOLD_SLICE_NS      10000000ull
#define HOLD_SLICE_MANY_NS 1000000ull
/* While draining: acknowledgements come within a round trip. */
#define DRAIN_SLICE_NS     1000000ull

_Thread_local pid_t pm_tl_tid __attribute__((tls_model("initial-exec")));

/* Set while this thread runs the procedure: a SIGURG that arrives then
 * (the resume's) only has to interrupt the sleep it lands in. */
static _Thread_local volatile sig_atomic_t tl_serving
	__attribute__((tls_model("initial-exec")));
/* A SIGURG came while tl_serving was set.  It may be the next request,
 * sent as soon as the last one's resume was seen and landing before this
 * thread left serve(): serve() then looks at every context once more. */
static _Thread_local volatile sig_atomic_t tl_again
	__attribute__((tls_model("initial-exec")));

/* Open contexts the handler may serve.  A reader takes a reference on the
 * slot before loading the pointer, so pm_control_close(), which clears the
 * pointer and then waits for the references to go, never frees a context
 * under a handler. */
static struct pm_context *_Atomic registry[CONTROL_MAX];
static _Atomic unsigned registry_refs[CONTROL_MAX];

/* Opening and closing only, never in the handler. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned registered;
static bool handler_ours;
static bool warned_foreign;
static struct sigaction handler_old;

/* The word PM_CONTROL=0 points contexts at: it never asks for anything. */
static _Atomic uint32_t control_off;

/* The process that last sent us SIGURG from outside: the controller
 * (scored's agent).  If it dies while it holds us, nobody will ever write
 * RUN: the procedure notices and lets go (controller_gone). */
static _Atomic pid_t controller_pid;
/* How often a held or draining context looks whether its controller is
 * still there: a rank whose agent died goes on within this bound. */
#define CONTROLLER_CHECK_NS 500000000ull

pid_t pm_thread_id_slow(void)
{
	pm_tl_tid = (pid_t)syscall(SYS_gettid);
	return pm_tl_tid;
}

/* Whoever waits on the state word (the agent may FUTEX_WAIT on it). */
static void set_state(struct pm_context *ctx, uint32_t state)
{
	atomic_store_explicit(&ctx->page->state, state, memory_order_release);
	syscall(SYS_futex, (uint32_t *)&ctx->page->state, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static bool asked(const struct pm_context *ctx)
{
	return atomic_load_explicit(ctx->control, memory_order_acquire) != PM_CONTROL_RUN;
}

/* One context the procedure serves. */
struct held {
	struct pm_context *ctx;
	int slot;
	bool app_quiesced;      /* pm_quiesce() by the application: stays */
	enum { DRAINING, HELD, WITHDRAWN } phase;
	uint64_t asked_ns;      /* when the procedure took it */
};

/*
 * Whether the controller that asked us to quiesce has gone.  Its pid came
 * with its signal; a pidfd taken on it (once, at the first check) cannot
 * be fooled by the pid's reuse.  Unknown controller: never gone.
 */
struct controller_watch {
	int pidfd;              /* -1: not taken yet, or not available */
	pid_t pid;
	uint64_t next_check_ns;
};

static bool controller_gone(struct controller_watch *w)
{
	uint64_t now = pm_now_ns();

	if (now < w->next_check_ns)
		return false;
	w->next_check_ns = now + CONTROLLER_CHECK_NS;
	if (w->pid <= 0)
		return false;
	if (w->pidfd < 0) {
		w->pidfd = (int)syscall(SYS_pidfd_open, w->pid, 0);
		if (w->pidfd < 0)
			return errno == ESRCH;  /* already gone */
	}
	struct pollfd pfd = { .fd = w->pidfd, .events = POLLIN };

	/* A pidfd is readable once its process has exited. */
	return poll(&pfd, 1, 0) == 1;
}

/* The controller is gone: take the control word back (RUN) so that no
 * later call runs the procedure again for a request nobody will end. */
static void orphaned(struct held *h, int n, pid_t pid)
{
	for (int i = 0; i < n; i++)
		atomic_store_explicit(h[i].ctx->control, PM_CONTROL_RUN, memory_order_release);
	pm_log(h[0].ctx->rank, "the process that asked for a quiesce (pid %d, scored's agent) has "
	       "gone without resuming; going on", (int)pid);
}

static bool taken(const struct held *h, int n, int slot)
{
	for (int i = 0; i < n; i++)
		if (h[i].slot == slot)
			return true;
	return false;
}

/*
 * Add to h[0..n) every registered context that asks and that this thread
 * may touch; one used by another thread gets the signal forwarded to that
 * thread.  A context of this thread inside a PM call is returned in *busy:
 * holding here would keep that call from ever reaching its exit.  Returns
 * the new count; each added context holds a reference on its slot.
 */
static int gather(struct held *h, int n, struct pm_context **busy)
{
	pid_t pid = getpid(), me = pm_thread_id();

	for (int i = 0; i < CONTROL_MAX; i++) {
		if (taken(h, n, i))
			continue;
		atomic_fetch_add(&registry_refs[i], 1);

		struct pm_context *ctx = atomic_load(&registry[i]);
		bool keep = false;

		/* page->pid: a forked child inherits the registry, not the job. */
		if (ctx && ctx->page->pid == pid && ctx->opening) {
			/* Still opening: nothing of ours is on the wire, so the
			 * context is quiesced as it stands; the freeze that
			 * follows stops the bootstrap wherever it is. */
			set_state(ctx, asked(ctx) ? PM_STATS_QUIESCED : PM_STATS_OPEN);
		} else if (ctx && ctx->page->pid == pid) {
			pid_t owner = ctx->owner_tid;

			if (ctx->in_call && owner == me)
				*busy = ctx;
			else if (!asked(ctx))
				;
			else if (owner && owner != me &&
				 syscall(SYS_tgkill, pid, owner, SIGURG) == 0)
				;       /* its thread will serve it */
			else if (!ctx->in_call)
				keep = true;
		}
		if (keep) {
			ctx->in_call = 1;       /* ours until the procedure ends */
			h[n++] = (struct held){ .ctx = ctx, .slot = i };
		} else {
			atomic_fetch_sub(&registry_refs[i], 1);
		}
	}
	return n;
}

static void release(struct held *h, int n)
{
	for (int i = 0; i < n; i++) {
		h[i].ctx->in_call = 0;
		atomic_fetch_sub(&registry_refs[h[i].slot], 1);
	}
}

/* (1) Stop injecting. */
static void take(struct held *h)
{
	h->app_quiesced = h->ctx->quiesced;
	h->ctx->quiesced = true;
	h->phase = DRAINING;
	h->asked_ns = pm_now_ns();
}

/*
 * The preemption procedure over the contexts of h at once: a process with
 * several contexts must drain them together, or one would wait for its
 * peers' acknowledgements while another left its own peers without theirs.
 * A request that comes while it runs (its SIGURG only sets tl_again) joins
 * it: the agent may ask a second context after the procedure took the
 * first, and then waits for both before it resumes either.  Returns the
 * final count of h.
 */
static int procedure(struct held *h, int n)
{
	struct controller_watch w = {
		.pidfd = -1, .pid = atomic_load(&controller_pid),
		.next_check_ns = pm_now_ns() + CONTROLLER_CHECK_NS,
	};

	for (int i = 0; i < n; i++)
		take(&h[i]);
	for (;;) {
		if (tl_again) {
			struct pm_context *busy = NULL;
			int was = n;

			tl_again = 0;
			n = gather(h, n, &busy);
			for (int i = was; i < n; i++)
				take(&h[i]);
			if (busy)       /* not while we run here; the exit would serve */
				busy->ctl_pending = 1;
		}
		/* (2) Keep receiving and acknowledging until nothing of ours
		 * is unacknowledged, then tell the agent.  No bound here: the
		 * agent has one, and withdraws the request (control 0) when it
		 * gives up.  (3) Hold until every request is withdrawn: peers
		 * may still be draining and need our acknowledgements; the
		 * freeze stops the process somewhere in here, which is fine. */
		bool draining = false, holding = false;

		for (int i = 0; i < n; i++) {
			struct pm_context *ctx = h[i].ctx;

			if (h[i].phase == WITHDRAWN)
				continue;
			if (!asked(ctx)) {
				h[i].phase = WITHDRAWN;
				continue;
			}
			if (h[i].phase == DRAINING && ctx->dev->ops->drain_poll(ctx->dev)) {
				ctx->stats->quiesces++;
				ctx->stats->quiesce_ns += pm_now_ns() - h[i].asked_ns;
				set_state(ctx, PM_STATS_QUIESCED);
				h[i].phase = HELD;
			}
			draining |= h[i].phase == DRAINING;
			holding |= h[i].phase == HELD;
		}
		if (!draining && !holding)
			break;

		uint64_t slice = draining ? DRAIN_SLICE_NS :
				 n == 1 ? HOLD_SLICE_NS : HOLD_SLICE_MANY_NS;

		/* The resume's SIGURG interrupts one sleep: look at the word
		 * (and at a request that came meanwhile) before each. */
		for (int i = 0; i < n && !tl_again; i++)
			if (h[i].phase != WITHDRAWN && asked(h[i].ctx))
				h[i].ctx->dev->ops->hold(h[i].ctx->dev, pm_now_ns() + slice);
		if (controller_gone(&w)) {
			orphaned(h, n, w.pid);
			break;
		}
	}
	if (w.pidfd >= 0)
		close(w.pidfd);

	/* (4) Resume what we quiesced, not what the application did. */
	for (int i = 0; i < n; i++) {
		struct pm_context *ctx = h[i].ctx;

		ctx->dev->ops->resumed(ctx->dev);
		ctx->quiesced = h[i].app_quiesced;
		set_state(ctx, h[i].app_quiesced ? PM_STATS_QUIESCED : PM_STATS_OPEN);
	}
	return n;
}

/*
 * Serve every context that asks.  When this thread is inside a PM call
 * (any context's), nothing is served here: the call is flagged and its
 * exit serves everything (our signal has interrupted its sleep, if it
 * slept).
 */
static void serve_once(void)
{
	struct held h[CONTROL_MAX];
	struct pm_context *busy = NULL;
	int n = gather(h, 0, &busy);

	if (busy) {
		busy->ctl_pending = 1;
		release(h, n);
		return;
	}
	if (n > 0)
		n = procedure(h, n);
	release(h, n);
}

/* tl_again is read after tl_serving is cleared: a signal before the clear
 * set it, one after found tl_serving clear and served by itself.  Each
 * extra pass answers a signal that came, so the loop ends with them. */
static void serve(void)
{
	do {
		tl_again = 0;
		tl_serving = 1;
		atomic_signal_fence(memory_order_seq_cst);
		serve_once();
		atomic_signal_fence(memory_order_seq_cst);
		tl_serving = 0;
		atomic_signal_fence(memory_order_seq_cst);
	} while (tl_again);
}

/* SA_NODEFER: the resume's SIGURG must interrupt the hold's sleep even when
 * the hold runs in this very handler; it then finds tl_serving and leaves. */
static void on_sigurg(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;

	(void)sig;
	(void)uc;
	/* From another process (not a forward between our threads): that is
	 * the controller. */
	if (si && si->si_code == SI_USER && si->si_pid > 0 && si->si_pid != getpid())
		atomic_store(&controller_pid, si->si_pid);
	if (!tl_serving)
		serve();
	else
		tl_again = 1;
	errno = saved;
}

void pm_control_serve(struct pm_context *ctx)
{
	ctx->ctl_pending = 0;
	if (!tl_serving)
		serve();
}

/* Our handler, unless the application has one of its own: its SIGURG is
 * its business (Go's runtime, for one, preempts goroutines with it). */
static void install_handler(struct pm_context *ctx)
{
	struct sigaction old, sa = { .sa_sigaction = on_sigurg,
				     .sa_flags = SA_SIGINFO | SA_NODEFER };

	if (handler_ours || sigaction(SIGURG, NULL, &old) < 0)
		return;
	if ((old.sa_flags & SA_SIGINFO) ||
	    (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)) {
		if (!warned_foreign)
			pm_log(ctx->rank, "SIGURG has a handler of the application: preemption "
			       "requests are noticed at PM calls only");
		warned_foreign = true;
		return;
	}
	/* No SA_RESTART: a sleep inside PM must return to look at the word. */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGURG, &sa, NULL) == 0) {
		handler_old = old;
		handler_ours = true;
	}
}

static void uninstall_handler(void)
{
	struct sigaction cur;

	if (!handler_ours)
		return;
	/* Put the old disposition back only if nobody replaced ours since. */
	if (sigaction(SIGURG, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
	    cur.sa_sigaction == on_sigurg)
		sigaction(SIGURG, &handler_old, NULL);
	handler_ours = false;
}

void pm_control_open(struct pm_context *ctx)
{
	const char *env = getenv("PM_CONTROL");

	ctx->control_slot = -1;
	ctx->owner_tid = pm_thread_id();
	if (env && strcmp(env, "0") == 0) {
		ctx->control = &control_off;
		return;
	}
	/* From here on every call's exit looks at the word, handler or not. */
	ctx->control = &ctx->page->control;

	pthread_mutex_lock(&registry_lock);
	for (int i = 0; i < CONTROL_MAX; i++) {
		if (!atomic_load(&registry[i])) {
			ctx->control_slot = i;
			break;
		}
	}
	if (ctx->control_slot < 0) {
		pm_log(ctx->rank, "more than %d contexts: this one answers preemption at PM "
		       "calls only", CONTROL_MAX);
	} else {
		install_handler(ctx);
		registered++;
		atomic_store(&registry[ctx->control_slot], ctx);
	}
	pthread_mutex_unlock(&registry_lock);
}

void pm_control_opened(struct pm_context *ctx)
{
	ctx->opening = 0;
	atomic_signal_fence(memory_order_seq_cst);
	/* A quiesce answered while opening is served again, properly, by the
	 * call exit that follows (pm_open's). */
	set_state(ctx, PM_STATS_OPEN);
}

void pm_control_close(struct pm_context *ctx)
{
	int slot = ctx->control_slot;

	/* Closing: what is left is acknowledging peers for a moment (the
	 * device's linger), which a freeze may cut short like anything else;
	 * the agent need not wait for a quiesce this context will not run. */
	if (ctx->page)
		set_state(ctx, PM_STATS_CLOSED);
	if (slot < 0)
		return;
	pthread_mutex_lock(&registry_lock);
	atomic_store(&registry[slot], NULL);
	/* A handler on another thread may still look at it. */
	while (atomic_load(&registry_refs[slot]) != 0)
		sched_yield();
	ctx->control_slot = -1;
	if (--registered == 0)
		uninstall_handler();
	pthread_mutex_unlock(&registry_lock);
}
