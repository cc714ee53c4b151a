/* SPDX-License-Identifier: MIT */
/*
 * wp_uffd.c - write detection without faults: userfaultfd's asynchronous
 * write protection (WP_ASYNC, Linux 6.7+).  Valid pages are mapped
 * read-write; the kernel resolves the first write to a write-protected
 * page itself and marks it written; at a release PAGEMAP_SCAN lists the
 * written pages and write-protects them again in one system call.  A
 * page's twin is made when it is fetched (and refreshed at each release),
 * since no fault announces its first write.
 *
 * Debian 12's kernel headers predate these interfaces: their constants
 * (stable ABI) are spelled out here when the headers lack them.
 */
#include "dsm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#ifndef PAGEMAP_SCAN
struct page_region {
	__u64 start;
	__u64 end;
	__u64 categories;
};

struct pm_scan_arg {
	__u64 size;
	__u64 flags;
	__u64 start;
	__u64 end;
	__u64 walk_end;
	__u64 vec;
	__u64 vec_len;
	__u64 max_pages;
	__u64 category_inverted;
	__u64 category_mask;
	__u64 category_anyof_mask;
	__u64 return_mask;
};

#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#define PAGE_IS_WRITTEN (1 << 1)
#endif

#define WP_FEATURES (UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED | \
		     UFFD_FEATURE_WP_HUGETLBFS_SHMEM)

int dsm_wp_open(struct dsm *d)
{
	d->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (d->uffd < 0)
		return -errno;

	struct uffdio_api api = { .api = UFFD_API, .features = WP_FEATURES };

	if (ioctl(d->uffd, UFFDIO_API, &api) < 0 || (api.features & WP_FEATURES) != WP_FEATURES)
		goto fail;

	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)d->base, .len = d->heap_size },
		.mode = UFFDIO_REGISTER_MODE_WP,
	};

	if (ioctl(d->uffd, UFFDIO_REGISTER, &reg) < 0)
		goto fail;
	d->pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (d->pagemap < 0)
		goto fail;
	return 0;

fail:;
	int err = errno ? -errno : -ENOTSUP;

	dsm_wp_close(d);
	return err;
}

void dsm_wp_close(struct dsm *d)
{
	if (d->uffd >= 0)
		close(d->uffd);
	if (d->pagemap >= 0)
		close(d->pagemap);
	d->uffd = d->pagemap = -1;
}

void dsm_wp_arm(struct dsm *d, uint32_t first, uint32_t n)
{
	struct uffdio_writeprotect wp = {
		.range = { .start = (uintptr_t)d->base + ((size_t)first << DSM_PAGE_SHIFT),
			   .len = (size_t)n << DSM_PAGE_SHIFT },
		.mode = UFFDIO_WRITEPROTECT_MODE_WP,
	};

	if (ioctl(d->uffd, UFFDIO_WRITEPROTECT, &wp) < 0)
		dsm_fatal("write-protecting shared pages %u..%u: %s", first, first + n - 1,
			  strerror(errno));
}

/* The written pages of [first, first + n), protected again. */
static void scan(struct dsm *d, uint32_t first, uint32_t npages)
{
	struct page_region regions[64];
	uintptr_t start = (uintptr_t)d->base + ((size_t)first << DSM_PAGE_SHIFT);
	uintptr_t end = start + ((size_t)npages << DSM_PAGE_SHIFT);

	while (start < end) {
		struct pm_scan_arg arg = {
			.size = sizeof(arg),
			.flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
			.start = start, .end = end,
			.vec = (uintptr_t)regions, .vec_len = 64,
			.category_mask = PAGE_IS_WRITTEN,
			.return_mask = PAGE_IS_WRITTEN,
		};
		long n = ioctl(d->pagemap, PAGEMAP_SCAN, &arg);

		if (n < 0)
			dsm_fatal("PAGEMAP_SCAN of the shared heap: %s", strerror(errno));
		for (long r = 0; r < n; r++)
			for (uintptr_t a = regions[r].start; a < regions[r].end; a += DSM_PAGE)
				pageset_add(&d->dirty,
					    (uint32_t)((a - (uintptr_t)d->base) >> DSM_PAGE_SHIFT));
		d->st->wp_scans++;
		start = arg.walk_end;
	}
}

void dsm_wp_collect(struct dsm *d)
{
	/* Only the pages whose writes the kernel may have recorded since they
	 * were armed are scanned: the valid copies and the home pages other
	 * ranks copy (READ; WRITE never comes with uffd-async).  Not those
	 * homed here that no other rank copies (OWN: never armed, a scan would
	 * find them "written" and arm them), nor the closed ones (INVALID,
	 * PREFETCHED: a write faults first and makes them READ), nor those
	 * outside the allocations.  A scan costs by the length of the range it
	 * walks, and most of a large heap is closed here or homed here
	 * unwatched (Jacobi on 2 ranks: 8 watched pages of 16384). */
	for (uint32_t i = 0; i < d->nextents; i++) {
		const struct dsm_extent *e = &d->extents[i];
		uint32_t end = e->first + e->pages;

		for (uint32_t p = e->first; e->used && p < end;) {
			p = (uint32_t)bytescan_find(d->state, p, end, PAGE_WATCHED_MASK, PAGE_READ,
						    true);

			uint32_t stop = (uint32_t)bytescan_find(d->state, p, end, PAGE_WATCHED_MASK,
								PAGE_READ, false);

			if (stop > p)
				scan(d, p, stop - p);
			p = stop;
		}
	}
}
