/* SPDX-License-Identifier: MIT */
/*
 * comm.c - PM messages and who holds the PM context.
 *
 * The other ranks need answers while this rank's application computes
 * (a diff to apply, a lock to grant, a barrier to count, a remote read of
 * a page homed here on a network device), so a service thread holds the
 * context and sleeps in pm_wait() while the application is away.  When the
 * application enters the library (a fault, a barrier, a lock) it asks for
 * the context: it raises app_wants and pm_signal()s the service thread out
 * of pm_wait(), which hands the context over with the mutex `hold` and
 * waits until the application gives it back.  Whoever holds the context
 * runs the same dispatcher, so a rank answers its peers while it waits for
 * them.
 */
#include "dsm_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t dsm_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void vlog(const char *fmt, va_list ap)
{
	char line[512];
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

static void peer_gone(struct dsm *d, int err)
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
		peer_gone(d, err);
}

/* Nested dispatch: a handler that sends may wait for room, and while it
 * waits it answers others; beyond this depth it only waits. */
#define DSM_MAX_NESTING 4
static __thread int nesting;

static void send_tagged(struct dsm *d, int peer, uint8_t type, uint32_t arg, uint32_t epoch,
			const void *payload, size_t len)
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
		peer_gone(d, err);
	if (err)
		dsm_fatal("sending to rank %d: %s", peer, pm_strerror(err));

	struct dsm_hdr h = { .type = type, .arg = arg, .epoch = epoch };

	memcpy(buf, &h, sizeof(h));
	if (len)
		memcpy((uint8_t *)buf + sizeof(h), payload, len);
	err = pm_send(d->pm, peer, total);
	if (err)
		dsm_fatal("sending to rank %d: %s", peer, pm_strerror(err));
}

void dsm_send(struct dsm *d, int peer, uint8_t type, uint32_t arg, const void *payload,
	      size_t len)
{
	send_tagged(d, peer, type, arg, d->epoch, payload, len);
}

void dsm_send_notices(struct dsm *d, int peer, uint32_t tag, uint32_t epoch,
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
			send_tagged(d, peer, MSG_NOTICES, tag, epoch, buf, n);
	}
}

int dsm_progress(struct dsm *d)
{
	struct pm_msg m;
	int n = 0;

	nesting++;
	while (pm_recv(d->pm, &m) == 0) {
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

void dsm_wait_until(struct dsm *d, bool (*done)(struct dsm *, const void *), const void *arg)
{
	while (!done(d, arg)) {
		if (dsm_progress(d) == 0 && !done(d, arg))
			dsm_pm_wait(d, 100);
	}
}

void dsm_enter(struct dsm *d)
{
	if (!d->service_running)
		return;
	atomic_store(&d->app_wants, 1);
	pm_signal(d->pm);
	pthread_mutex_lock(&d->hold);
}

void dsm_leave(struct dsm *d)
{
	if (!d->service_running)
		return;
	atomic_store(&d->app_wants, 0);
	pthread_cond_signal(&d->handed_back);
	pthread_mutex_unlock(&d->hold);
}

static void *service(void *arg)
{
	struct dsm *d = arg;

	pthread_mutex_lock(&d->hold);
	while (!atomic_load(&d->stop)) {
		while (atomic_load(&d->app_wants) && !atomic_load(&d->stop))
			pthread_cond_wait(&d->handed_back, &d->hold);
		if (atomic_load(&d->stop))
			break;
		dsm_progress(d);
		/* pm_signal() made before this wait ends it at once. */
		if (!atomic_load(&d->app_wants))
			dsm_pm_wait(d, -1);
	}
	pthread_mutex_unlock(&d->hold);
	return NULL;
}

int dsm_service_start(struct dsm *d)
{
	int err;

	atomic_store(&d->stop, false);
	atomic_store(&d->app_wants, 1);
	/* The application holds the context until it leaves the library. */
	pthread_mutex_lock(&d->hold);
	err = pthread_create(&d->service, NULL, service, d);
	if (err) {
		pthread_mutex_unlock(&d->hold);
		return -err;
	}
	d->service_running = true;
	return 0;
}

void dsm_service_stop(struct dsm *d)
{
	if (!d->service_running)
		return;
	/* Called holding the context (inside the library). */
	atomic_store(&d->stop, true);
	pthread_cond_signal(&d->handed_back);
	pthread_mutex_unlock(&d->hold);
	pm_signal(d->pm);
	pthread_join(d->service, NULL);
	d->service_running = false;
}
