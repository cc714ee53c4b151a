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
_Static_assert(sizeof(struct pm_stats_page) == 1000, "stats page layout");
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
	    (size_t)st.st_size < sizeof(struct pm_stats_page)) {
		close(fd);
		return -EPROTO;
	}
	const struct pm_stats_page *p = mmap(NULL, sizeof(*p), PROT_READ, MAP_SHARED, fd, 0);

	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	if (memcmp(p->magic, PM_STATS_MAGIC, sizeof(p->magic)) != 0 ||
	    p->version != PM_STATS_VERSION) {
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
