/* SPDX-License-Identifier: MIT */
/* pmdsm.c - the API of pmdsm.h: the context's life, allocation, statistics. */
#include "dsm_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stddef.h>

#define STR_(x) #x
#define STR(x) STR_(x)

struct dsm *dsm_ctx;

const char *pmdsm_version(void)
{
	return STR(PMDSM_VERSION_MAJOR) "." STR(PMDSM_VERSION_MINOR) "." STR(PMDSM_VERSION_PATCH);
}

const char *pmdsm_strerror(int err)
{
	switch (err) {
	case -EPERM: return "lock not held by this rank";
	case -EDEADLK: return "lock already held by this rank";
	case -EALREADY: return "the DSM is initialised already";
	case -ENXIO: return "the DSM is not initialised (pmdsm_init)";
	case -EBUSY: return "a pmdsm_barrier_with_notify is not waited for yet";
	case -ENOMSG: return "no pmdsm_barrier_with_notify to wait for";
	default: return pm_strerror(err);
	}
}

/* "512M", "1G", "4096": bytes, or 0 when malformed. */
static size_t parse_size(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return 0;
	switch (toupper((unsigned char)*end)) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	case 'T': v <<= 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' && end[1] == 'B' ? 2 : 1;
	return *end ? 0 : (size_t)v;
}

/* How many names a table of the names of an enum's values holds. */
#define NAMES_COUNT(names) (sizeof(names) / sizeof((names)[0]))

/* The names of the write detections, in PMDSM_WRITE_DETECT and
 * pmdsm_write_detect(). */
static const char *const write_detect_names[] = {
	[PMDSM_WRITE_SEGV] = "segv",
	[PMDSM_WRITE_UFFD_ASYNC] = "uffd-async",
	[PMDSM_WRITE_UFFD_WP] = "uffd-wp",
};
#define WRITE_DETECT_COUNT NAMES_COUNT(write_detect_names)

static const char *write_detect_name(enum pmdsm_write_detect wd)
{
	return (unsigned)wd < WRITE_DETECT_COUNT ? write_detect_names[wd] : NULL;
}

static int read_attr(const struct pmdsm_attr *attr, size_t *heap,
		     enum pmdsm_write_detect *wd, const char **device)
{
	const char *env;

	*heap = attr ? attr->heap_size : 0;
	if (!*heap && (env = getenv("PMDSM_HEAP_SIZE")) && *env) {
		*heap = parse_size(env);
		if (!*heap) {
			dsm_log("PMDSM_HEAP_SIZE=%s: not a size (bytes, or a number with K, M or "
				"G)", env);
			return -EINVAL;
		}
	}
	if (!*heap)
		*heap = DSM_HEAP_DEFAULT;
	if (*heap > DSM_HEAP_MAX) {
		dsm_log("a shared heap of %zu bytes: larger than the most the DSM maps (%llu)",
			*heap, (unsigned long long)DSM_HEAP_MAX);
		return -EINVAL;
	}

	*wd = attr ? attr->write_detect : PMDSM_WRITE_DEFAULT;
	if (*wd == PMDSM_WRITE_DEFAULT && (env = getenv("PMDSM_WRITE_DETECT")) && *env) {
		for (unsigned i = PMDSM_WRITE_SEGV; i < WRITE_DETECT_COUNT; i++)
			if (!strcmp(env, write_detect_names[i]))
				*wd = (enum pmdsm_write_detect)i;
		if (*wd == PMDSM_WRITE_DEFAULT) {
			dsm_log("PMDSM_WRITE_DETECT=%s: not one of segv, uffd-async, uffd-wp", env);
			return -EINVAL;
		}
	}
	if (*wd != PMDSM_WRITE_DEFAULT && !write_detect_name(*wd))
		return -EINVAL;
	*device = attr ? attr->pm_device : NULL;
	return 0;
}

/* A whole number from 0 to max in the environment variable name, in *v
 * (def when unset or empty); -EINVAL, with a message saying what is
 * expected (what), when malformed or above max. */
static int uint_env(const char *name, uint32_t def, uint32_t max, const char *what,
		    uint32_t *v)
{
	const char *env = getenv(name);
	char *end;
	unsigned long n;

	*v = def;
	if (!env || !*env)
		return 0;
	errno = 0;
	n = strtoul(env, &end, 10);
	if (errno || end == env || *end || !isdigit((unsigned char)*env) || n > max) {
		dsm_log("%s=%s: not %s from 0 to %u", name, env, what, max);
		return -EINVAL;
	}
	*v = (uint32_t)n;
	return 0;
}

/* One of n names (the first the default, when unset or empty) in the
 * environment variable name: its index in *v; -EINVAL, with a message
 * that lists them, when it is none of them. */
static int choice_env(const char *name, const char *const *names, unsigned n, unsigned *v)
{
	const char *env = getenv(name);

	*v = 0;
	if (!env || !*env)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		if (!strcmp(env, names[i])) {
			*v = i;
			return 0;
		}
	}
	char list[128];
	size_t used = 0;

	list[0] = '\0';
	for (unsigned i = 0; i < n && used < sizeof(list); i++)
		used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
					 i ? ", " : "", names[i]);
	dsm_log("%s=%s: not one of %s", name, env, list);
	return -EINVAL;
}

/* PMDSM_SERVICE_SCHED: short (default), fifo, none or poll. */
static const char *const service_sched_names[] = {
	[PMDSM_SCHED_SHORT] = "short", [PMDSM_SCHED_FIFO] = "fifo", [PMDSM_SCHED_NONE] = "none",
	[PMDSM_SCHED_POLL] = "poll",
};

/* PMDSM_PREFETCH_MODE: wait (default) or overlap. */
static const char *const prefetch_mode_names[] = {
	[PMDSM_PREFETCH_WAIT] = "wait", [PMDSM_PREFETCH_OVERLAP] = "overlap",
};

/* PMDSM_READ_AHEAD: the largest read-ahead window in pages (0 or 1: none). */
static int read_ahead_env(uint32_t *pages)
{
	int err = uint_env("PMDSM_READ_AHEAD", DSM_READ_AHEAD_DEFAULT, DSM_READ_AHEAD_MAX,
			   "a number of pages (0 or 1: no read-ahead)", pages);

	if (!err && *pages == 0)
		*pages = 1;
	return err;
}

/* The counters' names in PM's statistics page, in the order of struct
 * pmdsm_stats (checked at build time: the page is read by name). */
#define STAT(f) [offsetof(struct pmdsm_stats, f) / sizeof(uint64_t)] = #f
static const char *const stat_names[] = {
	STAT(read_faults), STAT(write_faults), STAT(pages_fetched), STAT(fetch_bytes),
	STAT(twins), STAT(diffs_sent), STAT(diff_bytes), STAT(diffs_applied),
	STAT(invalidations), STAT(barriers), STAT(locks), STAT(lock_remote), STAT(wp_scans),
	STAT(dropped), STAT(fault_ns), STAT(fetch_ns), STAT(release_ns), STAT(barrier_ns),
	STAT(lock_ns), STAT(read_ahead_pages), STAT(home_shared), STAT(prefetched_pages),
	STAT(prefetch_used), STAT(home_asks), STAT(cold_pages), STAT(cold_writes),
	STAT(prefetch_overlapped), STAT(prefetch_waits), STAT(peer_barriers),
	STAT(peer_barrier_ns), STAT(pushed_pages), STAT(push_taken), STAT(prefetch_opened),
};
#undef STAT
#define NSTATS (sizeof(struct pmdsm_stats) / sizeof(uint64_t))
_Static_assert(sizeof(stat_names) / sizeof(stat_names[0]) == NSTATS,
	       "every counter of struct pmdsm_stats has a name");

/* Publish the counters where pminfo and scored's agent look. */
static void publish_stats(struct dsm *d)
{
	uint64_t *words;

	d->st = &d->own_stats;
	for (size_t i = 0; i < NSTATS; i++)
		if (!stat_names[i])
			return;
	if (pm_stats_layer(d->pm, "dsm", stat_names, NSTATS, &words) == 0)
		d->st = (struct pmdsm_stats *)(void *)words;
}

static bool hellos_in(struct dsm *d, const void *arg)
{
	(void)arg;
	return d->hello_seen == (uint32_t)d->size - 1;
}

/* On the service thread: PM's context and what needs it. */
static int open_pm(struct dsm *d)
{
	/* The service thread shares its core with the application: it must
	 * not busy-poll while the application waits for the core (pm_wait's
	 * spin, 200 us by default, would be added to every call), so it sleeps
	 * at once unless the user set PM_SPIN_US. */
	const char *spin = getenv("PM_SPIN_US");
	struct pm_open_attr pa = { .device = d->pm_device, .spin_us = spin && *spin ? 0 : 1 };
	int err = pm_open(&d->pm, &pa);

	if (err) {
		d->pm = NULL;
		return err;
	}
	d->rank = pm_rank(d->pm);
	d->size = pm_size(d->pm);
	publish_stats(d);
	if (d->size > UINT16_MAX)
		return -E2BIG;
	d->max_msg = SIZE_MAX;
	for (int r = 0; r < d->size; r++) {
		size_t m = r == d->rank ? SIZE_MAX : pm_max_message(d->pm, r);

		if (m < d->max_msg)
			d->max_msg = m;
	}
	if (d->max_msg < sizeof(struct dsm_hdr) + DIFF_ENTRY_MAX) {
		dsm_log("PM carries messages of %zu bytes at most; the DSM needs %zu (raise "
			"PM_SHM_RING_KIB or PM_UDP_RING_KIB)", d->max_msg,
			sizeof(struct dsm_hdr) + DIFF_ENTRY_MAX);
		return -EMSGSIZE;
	}
	err = pm_mr_register(d->pm, d->alias, d->heap_size, &d->mr);
	if (!err)
		err = pm_mr_register(d->pm, (void *)d->copied, d->copied_len, &d->copied_mr);
	if (err)
		return err;
	d->rkeys = calloc((size_t)d->size, sizeof(*d->rkeys));
	d->copied_keys = calloc((size_t)d->size, sizeof(*d->copied_keys));
	if (!d->rkeys || !d->copied_keys)
		return -ENOMEM;
	d->rkeys[d->rank] = pm_mr_key(d->mr);
	d->copied_keys[d->rank] = pm_mr_key(d->copied_mr);
	err = dsm_sync_open(d);
	if (err)
		return err;
	/* Every rank's keys: of its alias, for remote reads of the pages it
	 * homes, and of its table of pages copied elsewhere. */
	uint64_t keys[2] = { d->rkeys[d->rank], d->copied_keys[d->rank] };

	for (int r = 0; r < d->size; r++)
		if (r != d->rank)
			dsm_send(d, r, MSG_HELLO, 0, keys, sizeof(keys));
	dsm_wait_until(d, hellos_in, NULL);
	return 0;
}

/* On the service thread, last. */
static void close_pm(struct dsm *d)
{
	if (d->mr)
		pm_mr_deregister(d->pm, d->mr);
	if (d->copied_mr)
		pm_mr_deregister(d->pm, d->copied_mr);
	d->copied_mr = NULL;
	if (d->pm)
		pm_close(d->pm);
	d->mr = NULL;
	d->pm = NULL;
}

static void destroy(struct dsm *d)
{
	dsm_sync_close(d);
	dsm_wp_close(d);
	dsm_heap_close(d);
	free(d->rkeys);
	free(d->copied_keys);
	free(d);
}

const char *pmdsm_write_detect(void)
{
	return dsm_ctx ? write_detect_name(dsm_ctx->write_detect) : NULL;
}

int pmdsm_init(const struct pmdsm_attr *attr)
{
	if (dsm_ctx)
		return -EALREADY;

	size_t heap;
	enum pmdsm_write_detect wd;
	const char *device;
	uint32_t read_ahead;
	int err = read_attr(attr, &heap, &wd, &device);

	uint32_t spin_us;
	unsigned sched, prefetch_mode;
	uint32_t log_counters;
	uint32_t prefetch, push;

	err = err ?: read_ahead_env(&read_ahead);
	err = err ?: uint_env("PMDSM_PREFETCH", DSM_PREFETCH_DEFAULT, DSM_PREFETCH_MAX,
			      "a number of pages (0: no prefetch at barriers)", &prefetch);
	err = err ?: uint_env("PMDSM_PUSH", 1, 1, "0 or 1 (0: no pushes at barriers of a few)",
			      &push);
	err = err ?: uint_env("PMDSM_SPIN_US", DSM_SPIN_US_DEFAULT, DSM_SPIN_US_MAX,
			      "a number of microseconds", &spin_us);
	err = err ?: choice_env("PMDSM_SERVICE_SCHED", service_sched_names,
				NAMES_COUNT(service_sched_names), &sched);
	err = err ?: choice_env("PMDSM_PREFETCH_MODE", prefetch_mode_names,
				NAMES_COUNT(prefetch_mode_names), &prefetch_mode);
	err = err ?: uint_env("PMDSM_STATS", 0, 1, "0 or 1 (1: the counters on stderr at "
			      "pmdsm_finalize)", &log_counters);
	if (err)
		return err;

	struct dsm *d = calloc(1, sizeof(*d));

	if (!d)
		return -ENOMEM;
	d->rank = -1;
	d->memfd = -1;
	d->uffd = d->pagemap = -1;
	d->wp_stop[0] = d->wp_stop[1] = -1;     /* dsm_wp_close() looks at them */
	d->pm_device = device;
	d->write_detect = wd;
	d->ra_max = read_ahead;
	d->prefetch_max = prefetch;
	d->push = push;
	d->spin_ns = (uint64_t)spin_us * 1000u;
	d->service_sched = (enum dsm_service_sched)sched;
	d->prefetch_overlap = prefetch_mode == PMDSM_PREFETCH_OVERLAP;
	d->log_stats = log_counters;
	d->st = &d->own_stats;

	err = dsm_heap_open(d, heap);
	if (err) {
		if (err == -EEXIST)
			dsm_log("the shared heap's addresses %#llx..+%zu are taken in this process",
				(unsigned long long)DSM_HEAP_BASE, heap);
		err = err == -EEXIST ? -ENOMEM : err;
		goto fail;
	}
	/* The default is the kernel's record of writes where the kernel has
	 * it (several times cheaper: docs/dsm/bench.md), else write faults. */
	if (wd != PMDSM_WRITE_SEGV) {
		d->write_detect = wd == PMDSM_WRITE_UFFD_WP ? wd : PMDSM_WRITE_UFFD_ASYNC;
		err = dsm_wp_open(d);
		if (err && wd == PMDSM_WRITE_DEFAULT) {
			d->write_detect = PMDSM_WRITE_SEGV;
		} else if (err) {
			dsm_log("write detection %s needs userfaultfd with %sWP_UNPOPULATED and "
				"shared memory (Linux %s and later): %s; PMDSM_WRITE_DETECT=segv "
				"works everywhere", write_detect_name(d->write_detect),
				dsm_uffd(d) ? "WP_ASYNC, " : "", dsm_uffd(d) ? "6.7" : "6.4",
				strerror(-err));
			goto fail;
		}
	}
	err = dsm_fault_install(d);
	if (err)
		goto fail;
	dsm_ctx = d;
	err = dsm_service_start(d, open_pm, close_pm);
	if (err) {
		dsm_ctx = NULL;
		goto fail;
	}
	return 0;

fail:
	destroy(d);
	return err;
}

static bool byes_in(struct dsm *d, const void *arg)
{
	(void)arg;
	return d->bye_seen == (uint32_t)d->size - 1;
}

/* PMDSM_STATS=1: this rank's counters on stderr at finalize, one line
 * ("pmdsm[R]: counters: read_faults=... "), named as in pminfo. */
static void log_stats(const struct dsm *d)
{
	char line[1024];
	size_t n = 0;
	uint64_t words[NSTATS];

	memcpy(words, d->st, sizeof(words));
	for (size_t i = 0; i < NSTATS && n < sizeof(line); i++) {
		int m = snprintf(line + n, sizeof(line) - n, " %s=%llu", stat_names[i],
				 (unsigned long long)words[i]);

		if (m < 0)
			return;
		n += (size_t)m;
	}
	dsm_log("counters:%s", line);
}

static int finalize_call(struct dsm *d, void *arg)
{
	(void)arg;
	dsm_barrier(d);
	if (d->log_stats)
		log_stats(d);
	/* Rank 0 ends last: it knows then that every departure arrived; the
	 * others' BYE is delivered before they close (pm_quiesce). */
	if (d->rank == 0) {
		dsm_wait_until(d, byes_in, NULL);
	} else {
		dsm_send(d, 0, MSG_BYE, 0, NULL, 0);
		pm_quiesce(d->pm);
	}
	d->stop = true;
	return 0;
}

/* -ENXIO outside init..finalize; -EBUSY between a notify and its wait,
 * where no synchronisation may come (pmdsm.h).  d->notified is the
 * service thread's, read here after the dsm_call that set it returned. */
static int ready(const struct dsm *d)
{
	return !d ? -ENXIO : d->notified ? -EBUSY : 0;
}

int pmdsm_finalize(void)
{
	struct dsm *d = dsm_ctx;
	int err = ready(d);

	if (err)
		return err;
	dsm_call(d, finalize_call, NULL);
	dsm_service_join(d);
	/* The counters were in PM's page, which pm_close removed. */
	d->st = &d->own_stats;
	dsm_ctx = NULL;
	destroy(d);
	return 0;
}

int pmdsm_rank(void)
{
	return dsm_ctx ? dsm_ctx->rank : -ENXIO;
}

int pmdsm_size(void)
{
	return dsm_ctx ? dsm_ctx->size : -ENXIO;
}

struct alloc_args {
	size_t size;
	enum pmdsm_placement placement;
	void *ptr;
};

static int alloc_call(struct dsm *d, void *arg)
{
	struct alloc_args *a = arg;

	a->ptr = dsm_heap_alloc(d, a->size, a->placement);
	return a->ptr ? 0 : -errno;
}

/* On the service thread, as the protocol: its answers to WATCH (home.c)
 * read the states of pages an allocation sets, and their count. */
void *pmdsm_alloc(size_t size, enum pmdsm_placement placement)
{
	struct alloc_args a = { .size = size, .placement = placement };

	if (!dsm_ctx) {
		dsm_log("pmdsm_alloc before pmdsm_init");
		errno = ENXIO;
		return NULL;
	}

	int err = dsm_call(dsm_ctx, alloc_call, &a);

	if (err) {
		errno = -err;
		return NULL;
	}
	return a.ptr;
}

void *pmdsm_malloc(size_t size)
{
	return pmdsm_alloc(size, PMDSM_BLOCK);
}

int pmdsm_home(const void *addr)
{
	struct dsm *d = dsm_ctx;
	uintptr_t a = (uintptr_t)addr;

	if (!d)
		return -ENXIO;
	if (a < (uintptr_t)d->base || a >= (uintptr_t)d->base + d->heap_size)
		return -EINVAL;

	uint32_t page = (uint32_t)((a - (uintptr_t)d->base) >> DSM_PAGE_SHIFT);

	if (d->state[page] == PAGE_UNUSED)
		return -EINVAL;

	/* The service thread may be setting it (home.c): asked there when
	 * not known here. */
	int home = __atomic_load_n(&d->home[page], __ATOMIC_RELAXED);
	struct dsm_home_query q = { .page = page, .claim = false };

	if (home == DSM_UNHOMED)
		home = dsm_call(d, dsm_home_resolve, &q);
	return home == DSM_UNHOMED ? -ENODATA : home;
}

static int free_call(struct dsm *d, void *index)
{
	/* Nobody uses it any more after the first barrier; nobody's next
	 * allocation there writes into it before the second. */
	dsm_barrier(d);
	dsm_heap_free(d, *(int *)index);
	dsm_barrier(d);
	return 0;
}

int pmdsm_free(void *ptr)
{
	struct dsm *d = dsm_ctx;
	int err = ready(d);

	if (err)
		return err;

	int index = dsm_heap_find(d, ptr);

	if (index < 0)
		return -EINVAL;
	return dsm_call(d, free_call, &index);
}

static int barrier_call(struct dsm *d, void *arg)
{
	(void)arg;
	return dsm_barrier(d);
}

int pmdsm_barrier(void)
{
	int err = ready(dsm_ctx);

	return err ?: dsm_call(dsm_ctx, barrier_call, NULL);
}

/* The peers of a barrier of a few: in range, not this rank, none twice. */
static int check_peers(const struct dsm *d, const int *peers, unsigned n)
{
	if (n && !peers)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (peers[i] < 0 || peers[i] >= d->size || peers[i] == d->rank)
			return -EINVAL;
		for (unsigned j = 0; j < i; j++)
			if (peers[j] == peers[i])
				return -EINVAL;
	}
	return 0;
}

static int barrier_with_call(struct dsm *d, void *arg)
{
	return dsm_barrier_with(d, arg);
}

static int notify_call(struct dsm *d, void *arg)
{
	return dsm_barrier_notify(d, arg);
}

static int wait_call(struct dsm *d, void *arg)
{
	(void)arg;
	return dsm_barrier_wait(d);
}

/* A barrier of a few, whole (barrier_with_call) or its notify. */
static int with_peers(const int *peers, unsigned n, int (*fn)(struct dsm *, void *))
{
	struct dsm *d = dsm_ctx;
	int err = ready(d);
	struct dsm_peers w = { peers, n };

	err = err ?: check_peers(d, peers, n);
	return err ?: dsm_call(d, fn, &w);
}

int pmdsm_barrier_with(const int *peers, unsigned n)
{
	return with_peers(peers, n, barrier_with_call);
}

int pmdsm_barrier_with_notify(const int *peers, unsigned n)
{
	return with_peers(peers, n, notify_call);
}

int pmdsm_barrier_with_wait(void)
{
	struct dsm *d = dsm_ctx;

	if (!d)
		return -ENXIO;
	if (!d->notified)
		return -ENOMSG;
	return dsm_call(d, wait_call, NULL);
}

static int lock_call(struct dsm *d, void *l)
{
	return dsm_lock(d, *(unsigned *)l);
}

static int unlock_call(struct dsm *d, void *l)
{
	return dsm_unlock(d, *(unsigned *)l);
}

int pmdsm_prefetch_mode(enum pmdsm_prefetch_mode mode)
{
	struct dsm *d = dsm_ctx;

	if (!d)
		return -ENXIO;
	if (mode != PMDSM_PREFETCH_WAIT && mode != PMDSM_PREFETCH_OVERLAP)
		return -EINVAL;
	/* Read by the service thread in the barriers this thread calls next
	 * (dsm_call publishes it). */
	d->prefetch_overlap = mode == PMDSM_PREFETCH_OVERLAP;
	return 0;
}

int pmdsm_lock(unsigned l)
{
	int err = ready(dsm_ctx);

	return err ?: dsm_call(dsm_ctx, lock_call, &l);
}

int pmdsm_unlock(unsigned l)
{
	int err = ready(dsm_ctx);

	return err ?: dsm_call(dsm_ctx, unlock_call, &l);
}

int pmdsm_stats_get(struct pmdsm_stats *stats, size_t size)
{
	if (!dsm_ctx)
		return -ENXIO;
	if (!stats)
		return -EINVAL;
	const struct pmdsm_stats *st = dsm_ctx->st;

	if (size > sizeof(*st)) {
		memset((char *)stats + sizeof(*st), 0, size - sizeof(*st));
		size = sizeof(*st);
	}
	memcpy(stats, st, size);
	return 0;
}
