/* SPDX-License-Identifier: MIT */
/*
 * comm.c - PM messages, and the service thread that alone uses PM.
 *
 * The other ranks need answers while this rank's application computes
 * (a diff to apply, a lock to grant, a barrier to count, a remote read of
 * a page homed here on a network device), so a service thread opens the
 * PM context, sleeps in pm_wait() and answers.  When the application needs
 * the protocol (a fault, a barrier, a lock) it posts the work to the
 * service thread (dsm_call) and pm_signal()s it out of pm_wait(); the
 * service thread does it, answering its peers meanwhile with the same
 * dispatcher, and wakes the application.  Only one thread ever touches the
 * context, which is what PM's network preemption assumes (a context shared
 * between threads could be quiesced from one while the other used it).
 */
#include "dsm_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

uint64_t dsm_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void vlog(const char *fmt, va_list ap)
{
	char line[1200];
	int rank = dsm_ctx ? dsm_ctx->rank : -1;
	int n = snprintf(line, sizeof(line), "pmdsm[%d]: ", rank);

	if (n < 0)
		return;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);

	if (m < 0)
		return;
	n = n + m < (int)sizeof(line) - 1 ? n + m : (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write: lines of several ranks do not interleave. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

void dsm_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
}

void dsm_fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap);
	va_end(ap);
	dsm_log("the DSM cannot go on: ending this rank");
	_exit(EXIT_FAILURE);
}

void dsm_peer_gone(struct dsm *d, int err)
{
	for (int r = 0; r < d->size; r++)
		if (r != d->rank && pm_peer_alive(d->pm, r) == 0)
			dsm_fatal("rank %d is gone (it died, or ended without pmdsm_finalize())", r);
	dsm_fatal("PM: %s", pm_strerror(err));
}

void dsm_pm_wait(struct dsm *d, int timeout_ms)
{
	int err = pm_wait(d->pm, timeout_ms);

	if (err && err != -ETIMEDOUT)
		dsm_peer_gone(d, err);
}

/* Nested dispatch: a handler that sends may wait for room, and while it
 * waits it answers others; beyond this depth it only waits. */
#define DSM_MAX_NESTING 4
static __thread int nesting;

/* Room for a message of len payload bytes to peer, its header written:
 * the payload goes where this returns, then msg_send. */
static uint8_t *msg_start(struct dsm *d, int peer, uint8_t type, uint32_t arg, uint32_t epoch,
			  size_t len)
{
	size_t total = sizeof(struct dsm_hdr) + len;
	void *buf;
	int err;

	if (total > d->max_msg)
		dsm_fatal("a message of %zu bytes to rank %d is larger than PM carries (%zu)",
			  total, peer, d->max_msg);
	while ((err = pm_send_buffer(d->pm, peer, total, &buf)) == -EAGAIN) {
		if (nesting < DSM_MAX_NESTING)
			dsm_progress(d);
		dsm_pm_wait(d, 10);
	}
	if (err == -EPIPE)
		dsm_peer_gone(d, err);
	if (err)
		dsm_fatal("sending to rank %d: %s", peer, pm_strerror(err));

	struct dsm_hdr h = { .type = type, .arg = arg, .epoch = epoch };

	memcpy(buf, &h, sizeof(h));
	return (uint8_t *)buf + sizeof(h);
}

static void msg_send(struct dsm *d, int peer, size_t len)
{
	int err = pm_send(d->pm, peer, sizeof(struct dsm_hdr) + len);

	if (err)
		dsm_fatal("sending to rank %d: %s", peer, pm_strerror(err));
}

static void send_tagged(struct dsm *d, int peer, uint8_t type, uint32_t arg, uint32_t epoch,
			const void *payload, size_t len)
{
	uint8_t *out = msg_start(d, peer, type, arg, epoch, len);

	if (len)
		memcpy(out, payload, len);
	msg_send(d, peer, len);
}

void dsm_send(struct dsm *d, int peer, uint8_t type, uint32_t arg, const void *payload,
	      size_t len)
{
	send_tagged(d, peer, type, arg, d->epoch, payload, len);
}

void dsm_send_runs(struct dsm *d, int peer, uint8_t type, uint32_t tag, uint32_t epoch,
		   const struct pageset *set)
{
	/* Whole runs per message, as many as fit. */
	uint8_t buf[8192];
	size_t cap = d->max_msg - sizeof(struct dsm_hdr);
	uint32_t from = 0;

	if (cap > sizeof(buf))
		cap = sizeof(buf);
	cap -= cap % PAGESET_RUN_BYTES;
	while (from != PAGESET_NONE) {
		size_t n = pageset_encode(set, &from, buf, cap);

		if (n)
			send_tagged(d, peer, type, tag, epoch, buf, n);
	}
}

void dsm_send_sync(struct dsm *d, int peer, uint8_t type, uint32_t arg, uint32_t tag,
		   uint32_t epoch, const struct pageset *set)
{
	uint8_t buf[8192];
	size_t cap = d->max_msg - sizeof(struct dsm_hdr), n = 0;
	uint32_t from = 0;

	if (cap > sizeof(buf))
		cap = sizeof(buf);
	cap -= cap % PAGESET_RUN_BYTES;
	/* Encoding a chunk tells whether runs remain (from): each chunk that
	 * is not the last goes ahead on its own. */
	while (set && set->bits && from != PAGESET_NONE) {
		n = pageset_encode(set, &from, buf, cap);
		if (from != PAGESET_NONE)
			send_tagged(d, peer, MSG_NOTICES, tag, epoch, buf, n);
	}
	send_tagged(d, peer, type, arg, epoch, buf, n);
}

void dsm_send_pages(struct dsm *d, int peer, const uint32_t *pages, uint32_t n)
{
	size_t len = (size_t)n * (sizeof(uint32_t) + DSM_PAGE);
	uint8_t *out = msg_start(d, peer, MSG_PUSH, n, d->epoch, len);

	memcpy(out, pages, (size_t)n * sizeof(uint32_t));
	out += (size_t)n * sizeof(uint32_t);
	for (uint32_t i = 0; i < n; i++, out += DSM_PAGE)
		memcpy(out, dsm_page_alias(d, pages[i]), DSM_PAGE);
	msg_send(d, peer, len);
}

int dsm_progress(struct dsm *d)
{
	struct pm_msg m;
	int n = 0;

	nesting++;
	/* One look at the network, then what it brought in: a last pm_recv()
	 * would poll again for nothing (a system call on udp). */
	while ((n == 0 ? pm_recv(d->pm, &m) : pm_recv_queued(d->pm, &m)) == 0) {
		struct dsm_hdr h;

		if (m.len < sizeof(h)) {
			dsm_log("dropped a message of %zu bytes from rank %d: shorter than a header",
				m.len, m.peer);
			d->st->dropped++;
		} else {
			memcpy(&h, m.data, sizeof(h));
			dsm_handle(d, m.peer, &h, (const uint8_t *)m.data + sizeof(h),
				   m.len - sizeof(h));
		}
		pm_release(d->pm, &m);
		n++;
	}
	nesting--;
	return n;
}

/* How often a spinning service thread yields its CPU, so that a thread
 * that shares it (another rank, when ranks outnumber CPUs) still runs. */
#define DSM_SPIN_YIELD_NS 20000u

/*
 * Every wait of the service thread is for an answer the application is
 * blocked on (a fetch, a barrier, a lock, a release): the application
 * thread sleeps meanwhile, so polling keeps nothing runnable of this rank
 * off the CPU, and it answers the peers at once (a remote read of a page
 * homed here, a barrier's arrival) where sleeping would cost each of them
 * a wake-up.  So it polls for up to spin_ns since the last message or
 * remote operation PM served for a peer, then sleeps in pm_wait() (spin
 * 1 us).  The idle service loop (comm.c,
 * service()) never polls: there the application computes.
 */
void dsm_wait_until(struct dsm *d, bool (*done)(struct dsm *, const void *), const void *arg)
{
	uint64_t idle_since = 0, yielded = 0;
	uint64_t served = pm_requests_served(d->pm);

	while (!done(d, arg)) {
		/* A peer's remote read of a page homed here (network devices)
		 * is served inside PM and brings no message: it counts as
		 * activity too, or a home that waits in a barrier while its
		 * pages are fetched would sleep after spin_ns and cost each
		 * later fetch a wake-up. */
		uint64_t s = pm_requests_served(d->pm);

		if (dsm_progress(d) || s != served) {
			served = s;
			idle_since = 0;
			continue;
		}
		if (done(d, arg))
			return;

		uint64_t now = dsm_now_ns();

		if (!idle_since)
			idle_since = yielded = now;
		if (now - idle_since < d->spin_ns) {
			if (now - yielded >= DSM_SPIN_YIELD_NS) {
				sched_yield();
				yielded = now;
			}
			continue;
		}
		dsm_pm_wait(d, 100);
		idle_since = 0;
	}
}

/* ---- the service thread: the one thread that uses PM ---- */

enum { REQ_IDLE, REQ_POSTED, REQ_DONE };

static void futex_wait_private(_Atomic uint32_t *word, uint32_t expected)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_private(_Atomic uint32_t *word)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* A short spin before sleeping, for an answer that comes at once from a
 * service thread on another core.  A process bound to one CPU (mpirun
 * --bind-to core, taskset) shares it with the service thread, which can
 * only answer once this thread sleeps: it does not spin at all
 * (dsm_service_start). */
#define DSM_CALL_SPIN 64

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

int dsm_call(struct dsm *d, int (*fn)(struct dsm *, void *), void *arg)
{
	if (!d->service_running || pthread_equal(pthread_self(), d->service))
		return fn(d, arg);
	d->req_fn = fn;
	d->req_arg = arg;
	atomic_store_explicit(&d->req, REQ_POSTED, memory_order_release);
	pm_signal(d->pm);
	for (unsigned n = 0;
	     atomic_load_explicit(&d->req, memory_order_acquire) != REQ_DONE; n++) {
		if (n < d->call_spin)
			cpu_relax();
		else
			futex_wait_private(&d->req, REQ_POSTED);
	}
	int ret = d->req_ret;

	/* The last call (finalize): the service thread closes the context once
	 * this thread is out of pm_signal(), which may still be running. */
	bool last = d->stop;

	atomic_store_explicit(&d->req, REQ_IDLE, memory_order_release);
	if (last)
		futex_wake_private(&d->req);
	return ret;
}

/*
 * The service thread's claim on the core it shares with the application.
 * On a network device a remote read of a page homed here waits until this
 * thread runs; while the application computes, a plain woken thread may
 * wait for the next scheduler tick (4 ms at HZ=250) before it gets the
 * core.  A short slice (SCHED_OTHER's sched_runtime, Linux 6.12+, no
 * privilege) makes the scheduler let it in sooner; SCHED_FIFO (asked for
 * explicitly: it needs CAP_SYS_NICE or an RLIMIT_RTPRIO of 1) lets it in
 * at once, at the price of not sharing the core while it polls.
 */
struct dsm_sched_attr {                 /* the kernel's struct sched_attr, v1 */
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
};

#define DSM_SERVICE_SLICE_NS 100000u    /* the shortest the kernel takes */

static int service_sched(struct dsm *d)
{
	struct dsm_sched_attr a = { .size = sizeof(a), .policy = SCHED_OTHER };

	switch (d->service_sched) {
	case PMDSM_SCHED_NONE:
	case PMDSM_SCHED_POLL:
		return 0;
	case PMDSM_SCHED_FIFO:
		a.policy = SCHED_FIFO;
		a.priority = 1;
		if (syscall(SYS_sched_setattr, 0, &a, 0) == 0)
			return 0;
		dsm_log("PMDSM_SERVICE_SCHED=fifo: %s (it needs CAP_SYS_NICE or an "
			"RLIMIT_RTPRIO of 1 or more: ulimit -r)", strerror(errno));
		return -errno;
	default:
		/* Older kernels ignore or refuse the slice: nothing lost. */
		a.runtime = DSM_SERVICE_SLICE_NS;
		syscall(SYS_sched_setattr, 0, &a, 0);
		return 0;
	}
}

static void *service(void *arg)
{
	struct dsm *d = arg;

	/* Open, serve, close: PM's context never leaves this thread, so its
	 * preemption handling (SIGURG, forwarded to the thread that uses the
	 * context) needs nothing of the DSM.  pm_signal() from the
	 * application ends a pm_wait() when a request is posted. */
	d->req_ret = service_sched(d);
	if (d->req_ret == 0)
		d->req_ret = d->open_fn(d);
	d->service_running = d->req_ret == 0;
	atomic_store_explicit(&d->req, REQ_DONE, memory_order_release);
	futex_wake_private(&d->req);
	if (!d->service_running) {
		d->close_fn(d);
		return NULL;
	}
	while (!d->stop) {
		if (atomic_load_explicit(&d->req, memory_order_acquire) == REQ_POSTED) {
			d->req_ret = d->req_fn(d, d->req_arg);
			atomic_store_explicit(&d->req, REQ_DONE, memory_order_release);
			futex_wake_private(&d->req);
			/* The application usually shares this core and waits
			 * for it: let it run now, not after this thread's
			 * next progress pass and its way into pm_wait(). */
			sched_yield();
			continue;
		}
		dsm_progress(d);
		/* A barrier's prefetch landing while the application computes
		 * (its read's completion ends pm_wait()). */
		if (d->ninflight)
			dsm_prefetch_poll(d);
		if (atomic_load_explicit(&d->req, memory_order_acquire) == REQ_POSTED)
			continue;
		/* poll: no wake-up to pay for each message that comes while
		 * the application computes; the core goes back to it (or to
		 * whoever else has work) after each look, as an MPI rank's
		 * does with mpi_yield_when_idle. */
		if (d->service_sched == PMDSM_SCHED_POLL)
			sched_yield();
		else
			dsm_pm_wait(d, -1);
	}
	/* The application may still be in pm_signal() of the call that
	 * stopped us: the context goes when it has taken the answer. */
	while (atomic_load_explicit(&d->req, memory_order_acquire) != REQ_IDLE)
		futex_wait_private(&d->req, REQ_DONE);
	d->close_fn(d);
	return NULL;
}

int dsm_service_start(struct dsm *d, int (*open_fn)(struct dsm *), void (*close_fn)(struct dsm *))
{
	cpu_set_t cpus;

	d->call_spin = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) == 1
		       ? 0 : DSM_CALL_SPIN;
	d->open_fn = open_fn;
	d->close_fn = close_fn;
	d->stop = false;
	atomic_store(&d->req, REQ_POSTED);

	int err = pthread_create(&d->service, NULL, service, d);

	if (err)
		return -err;
	/* The service thread's answer to "open". */
	while (atomic_load_explicit(&d->req, memory_order_acquire) != REQ_DONE)
		futex_wait_private(&d->req, REQ_POSTED);
	atomic_store(&d->req, REQ_IDLE);
	if (d->req_ret) {
		pthread_join(d->service, NULL);
		return d->req_ret;
	}
	return 0;
}

void dsm_service_join(struct dsm *d)
{
	pthread_join(d->service, NULL);
	d->service_running = false;
}
