/* SPDX-License-Identifier: MIT */
/* stats.c - publishing and reading the statistics page (see stats.h). */
#include "stats.h"
#include "pm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

_Static_assert(offsetof(struct pm_stats_page, stats) == 368, "stats page layout");
_Static_assert(offsetof(struct pm_stats_page, nics) == 552, "stats page layout");
_Static_assert(sizeof(struct pm_stats_nic) == 56, "stats page layout");
_Static_assert(offsetof(struct pm_stats_page, layer) == PM_STATS_V2_BYTES, "stats page layout");
_Static_assert(offsetof(struct pm_stats_page, layer.count) == 1016, "stats page layout");
_Static_assert(offsetof(struct pm_stats_page, layer.names) == 1024, "stats page layout");
_Static_assert(offsetof(struct pm_stats_page, layer.values) == 2048, "stats page layout");
_Static_assert(sizeof(struct pm_stats_page) == 2304, "stats page layout");
/* Readers map a whole page whatever its version (pm_stats_map): a page of
 * version 2 is shorter than the mapping, which stays within the file's
 * last memory page, so nothing past its end faults. */
_Static_assert(sizeof(struct pm_stats_page) <= 4096, "a page within one memory page");
#define PM_COUNT_ONE(m) + 1
_Static_assert(sizeof(struct pm_stats) == 8 * (0 PM_STATS_COUNTERS(PM_COUNT_ONE)),
	       "PM_STATS_COUNTERS (stats.h) lists every counter of struct pm_stats");
#undef PM_COUNT_ONE

/* Several contexts in one process get distinct files. */
static _Atomic unsigned stats_seq;

const char *pm_stats_dir(void)
{
	const char *dir = getenv("PM_STATS_DIR");

	return dir && *dir ? dir : "/dev/shm";
}

static int page_path(char *buf, size_t len, pid_t pid, unsigned seq)
{
	int n = snprintf(buf, len, "%s/pm-stats.%d.%u", pm_stats_dir(), (int)pid, seq);

	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Names tried before giving up: each taken name (a dead process's page
 * under a reused pid, or a file somebody planted) costs one. */
#define PUBLISH_ATTEMPTS 64

/*
 * The page's file, created anew and ours alone: the directory is shared
 * (/dev/shm is writable by every user), so an existing name is never opened
 * -- not a file left there, not a link planted to make us write elsewhere --
 * only skipped.  Mode 0600: scored's agent (root) and our own user read it.
 */
static int create_page_file(char *path, size_t len)
{
	for (int attempt = 0; attempt < PUBLISH_ATTEMPTS; attempt++) {
		unsigned seq = atomic_fetch_add(&stats_seq, 1);
		int err = page_path(path, len, getpid(), seq);

		if (err)
			return err;
		int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

		if (fd >= 0 || errno != EEXIST)
			return fd >= 0 ? fd : -errno;
	}
	return -EEXIST;
}

int pm_stats_publish(struct pm_context *ctx, const char *device)
{
	char *path = ctx->stats_path;
	int err;
	int fd = create_page_file(path, sizeof(ctx->stats_path));

	if (fd < 0)
		return fd;
	if (ftruncate(fd, sizeof(struct pm_stats_page)) < 0) {
		err = -errno;
		close(fd);
		unlink(path);
		return err;
	}
	struct pm_stats_page *page = mmap(NULL, sizeof(*page), PROT_READ | PROT_WRITE,
					  MAP_SHARED, fd, 0);
	close(fd);
	if (page == MAP_FAILED) {
		unlink(path);
		return -errno;
	}

	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	page->version = PM_STATS_VERSION;
	page->page_bytes = sizeof(*page);
	page->pid = getpid();
	page->rank = ctx->rank;
	page->size = ctx->size;
	page->nlocal = ctx->boot.nlocal;
	snprintf(page->job, sizeof(page->job), "%s", ctx->boot.job);
	snprintf(page->device, sizeof(page->device), "%s", device);
	page->start_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	atomic_store(&page->state, PM_STATS_OPEN);
	/* The magic goes last: a reader never sees a half-made page as valid. */
	atomic_thread_fence(memory_order_release);
	memcpy(page->magic, PM_STATS_MAGIC, sizeof(page->magic));
	ctx->page = page;
	ctx->stats = &page->stats;
	return 0;
}

bool pm_stats_name_ok(const char *name, size_t max)
{
	size_t len = strnlen(name, max + 1);

	if (len == 0 || len > max)
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
			return false;
	}
	return true;
}

unsigned pm_stats_layer_count(const struct pm_stats_page *page)
{
	if (page->version < 3)
		return 0;

	unsigned n = atomic_load_explicit(&page->layer.count, memory_order_acquire);

	return n <= PM_STATS_LAYER_MAX ? n : 0;
}

/* Layer names whose metrics could be PM's or scored's agent's own
 * (score_pm_*, score_agent_*): pm, agent, pm_..., agent_... */
static bool reserved_layer(const char *layer)
{
	static const char *const reserved[] = { "pm", "agent" };

	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
		size_t len = strlen(reserved[i]);

		if (strncmp(layer, reserved[i], len) == 0 && (layer[len] == 0 || layer[len] == '_'))
			return true;
	}
	return false;
}

int pm_stats_layer(pm_context_t *ctx, const char *layer, const char *const *names,
		   unsigned n, uint64_t **counters)
{
	if (counters)
		*counters = NULL;
	if (!ctx || !ctx->page || !layer || !names || !counters || n == 0)
		return -EINVAL;
	if (n > PM_STATS_LAYER_MAX)
		return -E2BIG;
	if (!pm_stats_name_ok(layer, PM_STATS_LAYER_NAME - 1) || reserved_layer(layer))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (!names[i] || !pm_stats_name_ok(names[i], PM_STATS_COUNTER_NAME - 1))
			return -EINVAL;
		for (unsigned j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				return -EINVAL;
	}

	struct pm_stats_layer *area = &ctx->page->layer;

	/* One thread uses a context at a time (pm.h): no race for the area. */
	if (atomic_load_explicit(&area->count, memory_order_relaxed) != 0)
		return -EEXIST;
	snprintf(area->name, sizeof(area->name), "%s", layer);
	for (unsigned i = 0; i < n; i++) {
		snprintf(area->names[i], sizeof(area->names[i]), "%s", names[i]);
		area->values[i] = 0;
	}
	/* The count goes last: a reader that sees it sees the names. */
	atomic_store_explicit(&area->count, n, memory_order_release);
	*counters = area->values;
	return 0;
}

void pm_stats_unpublish(struct pm_context *ctx)
{
	if (!ctx->page)
		return;
	atomic_store(&ctx->page->state, PM_STATS_CLOSED);
	unlink(ctx->stats_path);
	munmap(ctx->page, sizeof(*ctx->page));
	ctx->page = NULL;
	ctx->stats = NULL;
}

int pm_stats_map(const char *path, const struct pm_stats_page **page)
{
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return errno == ELOOP ? -EPROTO : -errno;

	struct stat st;

	/* A page is a regular file of one link, as pm_stats_publish makes it. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
	    (size_t)st.st_size < PM_STATS_V2_BYTES) {
		close(fd);
		return -EPROTO;
	}
	/* The whole structure, whatever the version: see the assertion above. */
	const struct pm_stats_page *p = mmap(NULL, sizeof(*p), PROT_READ, MAP_SHARED, fd, 0);

	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	/* Version 2 is version 3 without the layer area: its readers' fields
	 * are where they were; pm_stats_layer_count() says 0 for it. */
	size_t need = p->version >= 3 ? sizeof(*p) : PM_STATS_V2_BYTES;

	if (memcmp(p->magic, PM_STATS_MAGIC, sizeof(p->magic)) != 0 ||
	    p->version < PM_STATS_VERSION_MIN || p->version > PM_STATS_VERSION ||
	    (size_t)st.st_size < need) {
		munmap((void *)p, sizeof(*p));
		return -EPROTO;
	}
	*page = p;
	return 0;
}

void pm_stats_unmap(const struct pm_stats_page *page)
{
	munmap((void *)page, sizeof(*page));
}
