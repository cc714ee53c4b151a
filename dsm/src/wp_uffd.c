/* SPDX-License-Identifier: MIT */
/*
 * wp_uffd.c - write detection by userfaultfd's write protection.
 *
 * uffd-async (WP_ASYNC, Linux 6.7+), without faults: valid pages are mapped
 * read-write; the kernel resolves the first write to a write-protected
 * page itself and marks it written; at a release PAGEMAP_SCAN lists the
 * written pages and write-protects them again in one system call.  A
 * page's twin is made when it is fetched (and refreshed at each release),
 * since no fault announces its first write.
 *
 * uffd-wp (synchronous write protection on shared memory, Linux 6.4+):
 * valid pages are mapped read-write and armed; the first write stops the
 * writing thread and queues a fault on the userfaultfd, which a thread of
 * the library takes: it starts the write as segv's handler does (twin,
 * WRITE, dirty) and lifts the protection, which lets the writer go on.  A
 * release arms the written pages again.  The third method, kept
 * selectable beside the other two (docs/dsm/bench.md measures all three).
 *
 * Debian 12's kernel headers predate these interfaces: their constants
 * (stable ABI) are spelled out here when the headers lack them.
 */
#include "dsm_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <linux/fs.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
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

/* How many times a write-protect fault yields for a page whose landing the
 * service thread is finishing (wp_fault) before it calls it a bug. */
#define WP_LANDING_SPINS 1000000u
#define WP_SHARED_FEATURES (UFFD_FEATURE_WP_UNPOPULATED | UFFD_FEATURE_WP_HUGETLBFS_SHMEM)
#define WP_ASYNC_FEATURES (UFFD_FEATURE_WP_ASYNC | WP_SHARED_FEATURES)

/* The faults one read() takes at most. */
#define WP_FAULT_BATCH 16

static void unprotect(struct dsm *d, uintptr_t page_addr)
{
	struct uffdio_writeprotect wp = {
		.range = { .start = page_addr, .len = DSM_PAGE },
		.mode = 0,      /* and wake the writer */
	};

	if (ioctl(d->uffd, UFFDIO_WRITEPROTECT, &wp) < 0)
		dsm_fatal("lifting the write protection of shared page %#lx: %s",
			  (unsigned long)page_addr, strerror(errno));
}

/* uffd-wp: a write to an armed page, whose writer waits until this
 * returns.  A valid page is armed (READ; WRITE when another thread of the
 * application wrote it first); so may be one homed here that no other rank
 * copies (OWN), armed in an allocation before: the kernel keeps a page's
 * protection across the hole a free punches.  Its writes are not watched:
 * the protection is just lifted. */
static void wp_fault(struct dsm *d, uint64_t address)
{
	uint64_t t0 = dsm_now_ns();
	uintptr_t a = (uintptr_t)address & ~(uintptr_t)(DSM_PAGE - 1);
	size_t off = a - (uintptr_t)d->base;

	if (a < (uintptr_t)d->base || off >= d->heap_size)
		dsm_fatal("a write-protect fault at %#lx, outside the shared heap",
			  (unsigned long)address);

	uint32_t page = (uint32_t)(off >> DSM_PAGE_SHIFT);

	/* A prefetch landing on the service thread opens its pages before it
	 * says they are valid (dsm_pages_valid): a write in between waits
	 * for the word, a few instructions away. */
	for (unsigned spins = 0;
	     __atomic_load_n(&d->state[page], __ATOMIC_ACQUIRE) == PAGE_INFLIGHT; spins++) {
		if (spins == WP_LANDING_SPINS)
			dsm_fatal("a write-protect fault on shared page %u, still in flight", page);
		sched_yield();
	}
	if (d->state[page] == PAGE_READ)
		dsm_start_write(d, page);
	else if (d->state[page] != PAGE_WRITE && d->state[page] != PAGE_OWN)
		dsm_fatal("a write-protect fault on shared page %u in state %u", page,
			  d->state[page]);
	unprotect(d, a);
	d->st->fault_ns += dsm_now_ns() - t0;
}

static void *wp_thread(void *arg)
{
	struct dsm *d = arg;
	struct pollfd fds[2] = { { .fd = d->uffd, .events = POLLIN },
				 { .fd = d->wp_stop[0], .events = POLLIN } };

	for (;;) {
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			dsm_fatal("waiting for write-protect faults: %s", strerror(errno));
		}
		if (fds[1].revents)
			return NULL;

		struct uffd_msg msgs[WP_FAULT_BATCH];
		ssize_t n = read(d->uffd, msgs, sizeof(msgs));

		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			dsm_fatal("reading write-protect faults: %s", strerror(errno));
		}
		for (size_t i = 0; i < (size_t)n / sizeof(msgs[0]); i++) {
			if (msgs[i].event == UFFD_EVENT_PAGEFAULT &&
			    (msgs[i].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP))
				wp_fault(d, msgs[i].arg.pagefault.address);
			else
				dsm_fatal("an unexpected userfaultfd event %u at %#llx",
					  msgs[i].event,
					  (unsigned long long)msgs[i].arg.pagefault.address);
		}
	}
}

/* uffd-wp: the thread that takes the faults, signals blocked (they are the
 * application's, and PM's preemption signal its context's thread's). */
static int wp_thread_start(struct dsm *d)
{
	sigset_t all, old;

	if (pipe2(d->wp_stop, O_CLOEXEC) < 0)
		return -errno;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);

	int err = pthread_create(&d->wp_thread, NULL, wp_thread, d);

	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return -err;
	d->wp_running = true;
	return 0;
}

int dsm_wp_open(struct dsm *d)
{
	bool sync = dsm_uffd_wp(d);
	uint64_t want = sync ? WP_SHARED_FEATURES : WP_ASYNC_FEATURES;

	d->uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
	if (d->uffd < 0)
		return -errno;

	struct uffdio_api api = { .api = UFFD_API, .features = want };

	errno = 0;
	if (ioctl(d->uffd, UFFDIO_API, &api) < 0 || (api.features & want) != want)
		goto fail;

	struct uffdio_register reg = {
		.range = { .start = (uintptr_t)d->base, .len = d->heap_size },
		.mode = UFFDIO_REGISTER_MODE_WP,
	};

	if (ioctl(d->uffd, UFFDIO_REGISTER, &reg) < 0)
		goto fail;
	if (sync) {
		int err = wp_thread_start(d);

		if (err) {
			errno = -err;
			goto fail;
		}
		return 0;
	}
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
	if (d->wp_running) {
		if (write(d->wp_stop[1], "", 1) != 1)
			dsm_fatal("stopping the write-protect thread: %s", strerror(errno));
		pthread_join(d->wp_thread, NULL);
		d->wp_running = false;
	}
	for (int i = 0; i < 2; i++) {
		if (d->wp_stop[i] >= 0)
			close(d->wp_stop[i]);
		d->wp_stop[i] = -1;
	}
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

/* Each run of watched pages (READ, and WRITE) inside the allocations, in
 * increasing order, to fn. */
static void for_each_watched_run(struct dsm *d,
				 void (*fn)(struct dsm *d, uint32_t first, uint32_t n, void *arg),
				 void *arg)
{
	for (uint32_t i = 0; i < d->nextents; i++) {
		const struct dsm_extent *e = &d->extents[i];
		uint32_t end = e->first + e->pages;

		for (uint32_t p = e->first; e->used && p < end;) {
			p = (uint32_t)bytescan_find(d->state, p, end, PAGE_WATCHED_MASK, PAGE_READ,
						    true);

			uint32_t stop = (uint32_t)bytescan_find(d->state, p, end, PAGE_WATCHED_MASK,
								PAGE_READ, false);

			if (stop > p)
				fn(d, p, stop - p, arg);
			p = stop;
		}
	}
}

static void scan_run(struct dsm *d, uint32_t first, uint32_t n, void *arg)
{
	(void)arg;
	scan(d, first, n);
}

void dsm_wp_collect(struct dsm *d)
{
	/* Only the pages whose writes the kernel may have recorded since they
	 * were armed are scanned: the valid copies and the home pages other
	 * ranks copy (READ; WRITE never comes with uffd-async).  Not those
	 * homed here that no other rank copies (OWN: never armed, a scan would
	 * find them "written" and arm them), nor the closed ones (INVALID,
	 * PREFETCHED, COLD: a write faults first and makes them READ), nor
	 * those outside the allocations.  A scan costs by the length of the
	 * range it walks, and most of a large heap is closed here or homed here
	 * unwatched (Jacobi on 2 ranks: 8 watched pages of 16384). */
	for_each_watched_run(d, scan_run, NULL);
}

/*
 * Cold pages (uffd-async).  A release scans every READ page, so a rank that
 * keeps thousands of pages valid and writes few of them between releases
 * (the histogram: item pages read once, a lock per task) pays that walk at
 * every release.  So every DSM_COLD_SWEEP releases the READ pages are
 * looked over, and one found unwritten at the last look and not written
 * since becomes COLD: read-only (mprotect), out of the scans.  Reading it
 * costs nothing; its first write faults (fault.c) and makes it READ again
 * (dsm_wp_warm), the write then recorded by the kernel like any other:
 * the page is still armed, by the scan that last found it unwritten.
 * Done at the end of a release, when every written page's diff is home and
 * every twin current: a COLD page owes nothing until it is written.  Pages
 * written at least once every 8 releases (Jacobi's boundary rows) never go
 * cold; the look itself walks the state table, in user space.
 */
static void cool_run(struct dsm *d, uint32_t first, uint32_t n, void *closing)
{
	for (uint32_t p = first; p < first + n; p++) {
		/* (WRITE, of the same class, never comes with uffd-async; a
		 * page in it must not go cold.) */
		if (d->state[p] != PAGE_READ)
			continue;
		if (!pageset_has(&d->cool, p)) {
			pageset_add(&d->cool, p);
			continue;
		}
		pageset_del(&d->cool, p);
		d->state[p] = PAGE_COLD;
		d->st->cold_pages++;
		dsm_protect_add(d, closing, p);
	}
}

void dsm_wp_cool(struct dsm *d)
{
	struct dsm_protect_runs closing = { .prot = PROT_READ };

	if (++d->releases_since_cool < DSM_COLD_SWEEP)
		return;
	d->releases_since_cool = 0;
	for_each_watched_run(d, cool_run, &closing);
	dsm_protect_flush(d, &closing);
}

void dsm_wp_warm(struct dsm *d, uint32_t page)
{
	d->state[page] = PAGE_READ;
	d->st->cold_writes++;
	dsm_protect(d, page, 1, PROT_READ | PROT_WRITE);
}

void dsm_wp_collect_set(struct dsm *d, const struct pageset *set)
{
	for (uint32_t p = pageset_next(set, 0); p != PAGESET_NONE;) {
		uint32_t run = 0;

		while (p + run < d->npages && pageset_has(set, p + run) &&
		       (d->state[p + run] & PAGE_WATCHED_MASK) == PAGE_READ)
			run++;
		if (run)
			scan(d, p, run);
		p = pageset_next(set, p + run + 1);
	}
}
