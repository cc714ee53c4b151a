/* SPDX-License-Identifier: MIT */
/* mp.c - helpers of the multi-process PM tests (see mp.h). */
#include "mp.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BARRIER_MAGIC 0x5049524142504d54ull    /* "TMPBARIP" */

struct barrier_msg {
	uint64_t magic;
	uint64_t epoch;
	uint64_t kind;                  /* 1 arrive (to rank 0), 2 leave */
};

/*
 * This process's statistics page while its context is open.  A test that
 * fails exits without pm_close(); the page would stay behind as a stale
 * file, so the exit paths remove it (unlink is async-signal-safe).
 */
static char own_page[4096];

static void remove_own_page(void)
{
	if (own_page[0])
		unlink(own_page);
}

static void on_alarm(int sig)
{
	static const char msg[] = "mp: time budget exceeded by a blocked call (alarm)\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to say */
	}
	remove_own_page();
	_exit(3);
}

/* mpirun ends the other processes with SIGTERM when one fails. */
static void on_term(int sig)
{
	remove_own_page();
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * Our page is the one with our pid in its name made by our pm_open(): PIDs
 * wrap (pid_max is often 32768), so a process that had our pid before and
 * was killed may have left a page named like ours (a stale page, which
 * pminfo and the agent skip); it was made before we opened.
 */
static bool made_since(const char *path, const struct timespec *t)
{
	struct stat st;

	return stat(path, &st) == 0 &&
	       (st.st_ctim.tv_sec > t->tv_sec ||
		(st.st_ctim.tv_sec == t->tv_sec && st.st_ctim.tv_nsec >= t->tv_nsec));
}

static void find_own_page(const struct timespec *opened)
{
	char prefix[64], path[4096];
	DIR *d = opendir(mp_stats_dir());
	struct dirent *e;
	int found = 0;

	snprintf(prefix, sizeof(prefix), "pm-stats.%d.", (int)getpid());
	CHECK(d);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", mp_stats_dir(), e->d_name);
		if (made_since(path, opened)) {
			snprintf(own_page, sizeof(own_page), "%s", path);
			found++;
		}
	}
	closedir(d);
	CHECK_MSG(found == 1, "%d statistics pages %s/%s* made by pm_open (1 expected)", found,
		  mp_stats_dir(), prefix);
}

void mp_open(struct mp *m, const struct pm_open_attr *attr, int expect_size,
	     int budget_s)
{
	memset(m, 0, sizeof(*m));
	setvbuf(stdout, NULL, _IOLBF, 0);
	check_set_tag("pid %d", (int)getpid());
	signal(SIGALRM, on_alarm);
	alarm((unsigned)budget_s + 5);
	m->deadline_ns = check_now_ns() + (uint64_t)budget_s * 1000000000u;

	/* File times come from the kernel's coarse clock (or a finer one):
	 * read before pm_open(), it is never later than the new page's. */
	struct timespec opened;

	clock_gettime(CLOCK_REALTIME_COARSE, &opened);
	CHECK_OK(pm_open(&m->ctx, attr));
	find_own_page(&opened);
	atexit(remove_own_page);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	m->rank = pm_rank(m->ctx);
	m->size = pm_size(m->ctx);
	check_set_tag("rank %d", m->rank);
	if (expect_size > 0)
		CHECK_EQ(m->size, expect_size);
	CHECK(m->rank >= 0 && m->rank < m->size);
}

bool mp_time_left(const struct mp *m)
{
	return check_now_ns() < m->deadline_ns;
}

void mp_progress(struct mp *m, const char *what)
{
	uint64_t now = check_now_ns();

	CHECK_MSG(now < m->deadline_ns, "time budget spent while %s", what);

	uint64_t left_ms = (m->deadline_ns - now) / 1000000u + 1;
	int err = pm_wait(m->ctx, left_ms < 100 ? (int)left_ms : 100);

	CHECK_MSG(err == 0 || err == -ETIMEDOUT, "pm_wait while %s: %s", what,
		  check_errname(err));
}

/* A send buffer for len bytes to peer, waiting (bounded) for space. */
static void *send_buffer(struct mp *m, int peer, size_t len)
{
	void *buf;
	int err;

	while ((err = pm_send_buffer(m->ctx, peer, len, &buf)) == -EAGAIN)
		mp_progress(m, "waiting for send space");
	CHECK_MSG(err == 0, "pm_send_buffer(peer %d, %zu bytes): %s", peer, len,
		  check_errname(err));
	return buf;
}

void mp_send(struct mp *m, int peer, const void *data, size_t len)
{
	void *buf = send_buffer(m, peer, len);

	if (len)
		memcpy(buf, data, len);
	CHECK_OK(pm_send(m->ctx, peer, len));
}

void mp_send_pattern(struct mp *m, int peer, size_t len, uint64_t seed)
{
	check_fill(send_buffer(m, peer, len), len, seed);
	CHECK_OK(pm_send(m->ctx, peer, len));
}

static void push(struct pm_msg **v, size_t *n, size_t *cap, const struct pm_msg *msg)
{
	if (*n == *cap) {
		*cap = *cap ? 2 * *cap : 64;
		*v = realloc(*v, *cap * sizeof(**v));
		CHECK(*v);
	}
	(*v)[(*n)++] = *msg;
}

static void take(struct pm_msg *v, size_t *n, size_t i, struct pm_msg *msg)
{
	*msg = v[i];
	memmove(&v[i], &v[i + 1], (*n - i - 1) * sizeof(*v));
	(*n)--;
}

static bool is_barrier_msg(const struct pm_msg *msg)
{
	struct barrier_msg b;

	if (msg->len != sizeof(b))
		return false;
	memcpy(&b, msg->data, sizeof(b));
	return b.magic == BARRIER_MAGIC;
}

/* pm_recv(), with barrier messages set aside: false when nothing came. */
static bool recv_test_msg(struct mp *m, struct pm_msg *msg)
{
	for (;;) {
		int err = pm_recv(m->ctx, msg);

		if (err == -EAGAIN)
			return false;
		CHECK_MSG(err == 0, "pm_recv: %s", check_errname(err));
		if (!is_barrier_msg(msg))
			return true;
		m->barrier_msgs_recv++;
		push(&m->bstash, &m->nbstash, &m->capbstash, msg);
	}
}

bool mp_try_recv(struct mp *m, struct pm_msg *msg)
{
	if (m->nstash) {
		take(m->stash, &m->nstash, 0, msg);
		return true;
	}
	return recv_test_msg(m, msg);
}

void mp_recv(struct mp *m, struct pm_msg *msg)
{
	while (!mp_try_recv(m, msg))
		mp_progress(m, "waiting for a message");
}

void mp_release(struct mp *m, const struct pm_msg *msg)
{
	CHECK_OK(pm_release(m->ctx, msg));
}

static bool is_barrier(const struct pm_msg *msg, uint64_t epoch, uint64_t kind, int from)
{
	struct barrier_msg b;

	if (!is_barrier_msg(msg) || (from >= 0 && msg->peer != from))
		return false;
	memcpy(&b, msg->data, sizeof(b));
	return b.epoch == epoch && b.kind == kind;
}

/* Take the barrier message (epoch, kind) from `from` (-1: anyone). */
static int take_barrier(struct mp *m, uint64_t epoch, uint64_t kind, int from)
{
	struct pm_msg msg;

	for (;;) {
		for (size_t i = 0; i < m->nbstash; i++) {
			if (is_barrier(&m->bstash[i], epoch, kind, from)) {
				take(m->bstash, &m->nbstash, i, &msg);
				mp_release(m, &msg);
				return msg.peer;
			}
		}
		/* Test messages meanwhile are kept for mp_recv(); barrier
		 * messages land in bstash and are looked at above. */
		size_t before = m->nbstash;

		if (recv_test_msg(m, &msg))
			push(&m->stash, &m->nstash, &m->capstash, &msg);
		else if (m->nbstash == before)
			mp_progress(m, "in a barrier");
	}
}

void mp_barrier(struct mp *m)
{
	uint64_t epoch = ++m->barriers;
	struct barrier_msg arrive = { BARRIER_MAGIC, epoch, 1 };
	struct barrier_msg leave = { BARRIER_MAGIC, epoch, 2 };

	if (m->rank == 0) {
		for (int i = 1; i < m->size; i++)
			take_barrier(m, epoch, 1, -1);
		for (int r = 1; r < m->size; r++)
			mp_send(m, r, &leave, sizeof(leave));
	} else {
		mp_send(m, 0, &arrive, sizeof(arrive));
		take_barrier(m, epoch, 2, 0);
	}
}

void mp_closed(struct mp *m)
{
	CHECK_MSG(!own_page[0] || access(own_page, F_OK) != 0,
		  "statistics page %s left after pm_close", own_page);
	m->ctx = NULL;
	own_page[0] = 0;
	alarm(0);
}

int mp_count_files(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	CHECK_MSG(d, "opendir %s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			n++;
	closedir(d);
	return n;
}

int mp_remove_files(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	CHECK_MSG(d, "opendir %s: %s", dir, strerror(errno));
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
			char path[4096];

			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			CHECK_MSG(unlink(path) == 0, "unlink %s: %s", path, strerror(errno));
			n++;
		}
	}
	closedir(d);
	return n;
}

const char *mp_stats_dir(void)
{
	const char *dir = getenv("PM_STATS_DIR");

	return dir && *dir ? dir : "/dev/shm";
}

bool mp_segment_prefix(char *buf, size_t len)
{
	/* The key is the job's secret: read it off our own segment's mapping
	 * (its name stays in /proc/self/maps after the unlink). */
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint64_t key;
	int rank;
	bool found = false;

	CHECK_MSG(f, "/proc/self/maps: %s", strerror(errno));
	while (!found && fgets(line, sizeof(line), f)) {
		const char *at = strstr(line, "/dev/shm/pm-");

		found = at && !strstr(at, "pm-stats.") &&
			sscanf(at, "/dev/shm/pm-%16" SCNx64 "-%d", &key, &rank) == 2;
	}
	fclose(f);
	if (found)
		snprintf(buf, len, "pm-%016" PRIx64 "-", key);
	return found;
}

void mp_hashed_segment_prefix(char *buf, size_t len)
{
	const char *ns = getenv("PMIX_NAMESPACE");
	uint64_t h = 0xcbf29ce484222325ull;

	CHECK_MSG(ns, "PMIX_NAMESPACE is not set: not started by a PMIx launcher?");
	for (; *ns; ns++) {
		h ^= (unsigned char)*ns;
		h *= 0x100000001b3ull;
	}
	snprintf(buf, len, "pm-%016" PRIx64 "-", h);
}

void mp_close(struct mp *m)
{
	char seg[64];

	mp_barrier(m);
	CHECK_MSG(m->nstash == 0, "%zu messages left unreceived at the end", m->nstash);

	struct pm_msg extra;

	CHECK_MSG(pm_recv(m->ctx, &extra) == -EAGAIN,
		  "an unexpected message (%zu bytes from rank %d) at the end", extra.len,
		  extra.peer);

	/* Every rank passed pm_open() before the barrier, so every segment
	 * name of the job has been removed (a job with no local peer has no
	 * segment at all). */
	if (mp_segment_prefix(seg, sizeof(seg)))
		CHECK_MSG(mp_count_files("/dev/shm", seg) == 0,
			  "/dev/shm/%s* left after every rank opened", seg);

	CHECK_MSG(access(own_page, F_OK) == 0, "our statistics page %s is gone while open",
		  own_page);
	CHECK_OK(pm_close(m->ctx));
	mp_closed(m);               /* which checks that the page went with it */
	CHECK_MSG(m->nbstash == 0, "%zu barrier messages left at the end", m->nbstash);
	free(m->stash);
	free(m->bstash);
	m->stash = m->bstash = NULL;
	alarm(0);
}
