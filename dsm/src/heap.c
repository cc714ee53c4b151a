/* SPDX-License-Identifier: MIT */
/*
 * heap.c - the shared range.  One memfd backs two mappings: the
 * application's view at DSM_HEAP_BASE, whose protection follows each
 * page's state, and the library's alias, always writable, through which
 * pages are fetched into, diffs applied and remote ranks read (it is the
 * region registered with PM).  Twins live in a third, private mapping at
 * the page's offset.  Allocation is deterministic: every rank makes the
 * same calls and gets the same addresses, without a message.
 */
#include "dsm_internal.h"
#include "diff.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

_Static_assert(DSM_PAGE == DIFF_PAGE, "one page size");

int dsm_heap_open(struct dsm *d, size_t size)
{
	long sys_page = sysconf(_SC_PAGESIZE);

	if (sys_page != (long)DSM_PAGE)
		return -ENOTSUP;
	size = (size + DSM_PAGE - 1) & ~(size_t)(DSM_PAGE - 1);
	if (size == 0 || size > DSM_HEAP_MAX)
		return -EINVAL;

	d->memfd = memfd_create("pmdsm-heap", MFD_CLOEXEC);
	if (d->memfd < 0)
		return -errno;
	if (ftruncate(d->memfd, (off_t)size) < 0)
		goto fail_errno;

	void *base = mmap((void *)DSM_HEAP_BASE, size, PROT_NONE,
			  MAP_SHARED | MAP_FIXED_NOREPLACE, d->memfd, 0);

	if (base == MAP_FAILED)
		goto fail_errno;
	if (base != (void *)DSM_HEAP_BASE) {
		/* A kernel without MAP_FIXED_NOREPLACE took it as a hint. */
		munmap(base, size);
		errno = EEXIST;
		goto fail_errno;
	}
	d->base = base;
	d->alias = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, d->memfd, 0);
	d->twins = mmap(NULL, size, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->alias == MAP_FAILED || d->twins == MAP_FAILED)
		goto fail_errno;
	d->heap_size = size;
	d->npages = (uint32_t)(size >> DSM_PAGE_SHIFT);
	/* Written by the other ranks (remote writes): a page of its own. */
	d->copied_len = (d->npages + DSM_PAGE - 1) & ~(size_t)(DSM_PAGE - 1);
	d->copied = mmap(NULL, d->copied_len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (d->copied == MAP_FAILED) {
		d->copied = NULL;
		goto fail_errno;
	}
	d->state = calloc(d->npages, 1);
	d->home = calloc(d->npages, sizeof(*d->home));
	if (d->home)
		memset(d->home, 0xff, d->npages * sizeof(*d->home));  /* DSM_UNHOMED */
	if (!d->state || !d->home) {
		errno = ENOMEM;
		goto fail_errno;
	}
	d->extents[0] = (struct dsm_extent){ .first = 0, .pages = d->npages };
	d->nextents = 1;
	return 0;

fail_errno:;
	int err = -errno;

	dsm_heap_close(d);
	return err;
}

void dsm_heap_close(struct dsm *d)
{
	if (d->base && d->base != MAP_FAILED)
		munmap(d->base, d->heap_size);
	if (d->alias && d->alias != MAP_FAILED)
		munmap(d->alias, d->heap_size);
	if (d->twins && d->twins != MAP_FAILED)
		munmap(d->twins, d->heap_size);
	if (d->copied)
		munmap((void *)d->copied, d->copied_len);
	d->copied = NULL;
	if (d->memfd > 0)
		close(d->memfd);
	free(d->state);
	free(d->home);
	d->base = d->alias = d->twins = NULL;
	d->state = NULL;
	d->home = NULL;
	d->memfd = -1;
}

void dsm_protect(struct dsm *d, uint32_t first, uint32_t n, int prot)
{
	if (mprotect(d->base + ((size_t)first << DSM_PAGE_SHIFT), (size_t)n << DSM_PAGE_SHIFT,
		     prot) < 0)
		dsm_fatal("mprotect of shared pages %u..%u failed: %s (vm.max_map_count may be "
			  "too small for this many separately protected pages)",
			  first, first + n - 1, strerror(errno));
}

void dsm_protect_add(struct dsm *d, struct dsm_protect_runs *r, uint32_t page)
{
	if (r->n && r->first + r->n == page) {
		r->n++;
		return;
	}
	dsm_protect_flush(d, r);
	r->first = page;
	r->n = 1;
}

void dsm_protect_flush(struct dsm *d, struct dsm_protect_runs *r)
{
	if (r->n)
		dsm_protect(d, r->first, r->n, r->prot);
	r->n = 0;
}

/* The home of page i of an allocation of bytes bytes over pages pages. */
static uint16_t home_of(const struct dsm *d, enum pmdsm_placement placement, uint32_t i,
			size_t bytes)
{
	if (placement == PMDSM_CYCLIC)
		return (uint16_t)(i % (uint32_t)d->size);

	/* Block: the rank whose share of the bytes holds the page's first
	 * byte, as a block partition of an array gives them out. */
	uint64_t r = (uint64_t)i * DSM_PAGE * (uint64_t)d->size / bytes;

	return (uint16_t)(r < (uint64_t)d->size ? r : (uint64_t)d->size - 1);
}

static size_t free_bytes(const struct dsm *d)
{
	size_t n = 0;

	for (uint32_t i = 0; i < d->nextents; i++)
		if (!d->extents[i].used)
			n += (size_t)d->extents[i].pages << DSM_PAGE_SHIFT;
	return n;
}

/* Cache colouring (pmdsm.h, pmdsm_colour_pages; docs/dsm/design.md,
 * "Memory layout"): deterministic, as allocation must be, since every rank
 * makes the same calls and frees and counts the same k. */
static uint32_t colour_gap(const struct dsm *d, uint32_t pages)
{
	return pages < PMDSM_COLOUR_MIN_PAGES ? 0 : pmdsm_colour_pages(d->ncoloured);
}

/* The first free extent with room for gap + pages, or nextents. */
static uint32_t first_fit(const struct dsm *d, uint32_t gap, uint32_t pages)
{
	for (uint32_t i = 0; i < d->nextents; i++)
		if (!d->extents[i].used && d->extents[i].pages >= gap + pages)
			return i;
	return d->nextents;
}

/* Extent i keeps its first pages; the rest becomes a free extent after it. */
static void split_extent(struct dsm *d, uint32_t i, uint32_t pages)
{
	struct dsm_extent *e = &d->extents[i];

	memmove(e + 2, e + 1, (d->nextents - i - 1) * sizeof(*e));
	e[1] = (struct dsm_extent){ .first = e->first + pages, .pages = e->pages - pages };
	d->nextents++;
	e->pages = pages;
}

void *dsm_heap_alloc(struct dsm *d, size_t size, enum pmdsm_placement placement)
{
	if (size == 0 || (placement != PMDSM_BLOCK && placement != PMDSM_CYCLIC &&
			  placement != PMDSM_FIRST_TOUCH)) {
		errno = EINVAL;
		return NULL;
	}
	if (size > d->heap_size) {
		dsm_log("pmdsm_alloc(%zu bytes): larger than the whole shared heap (%zu bytes; "
			"PMDSM_HEAP_SIZE sets it)", size, d->heap_size);
		errno = ENOMEM;
		return NULL;
	}

	uint32_t pages = (uint32_t)((size + DSM_PAGE - 1) >> DSM_PAGE_SHIFT);
	uint32_t gap = colour_gap(d, pages);
	uint32_t i = first_fit(d, gap, pages);

	/* A gap and a rest take two more extents: without room for both, the
	 * allocation goes where it would have gone uncoloured. */
	if (gap && (i == d->nextents || d->nextents + 2 > DSM_MAX_ALLOCS)) {
		gap = 0;
		i = first_fit(d, 0, pages);
	}
	if (i == d->nextents || (d->extents[i].pages > pages && d->nextents == DSM_MAX_ALLOCS)) {
		dsm_log("pmdsm_alloc(%zu bytes): no free range that large in the shared heap "
			"(%zu of %zu bytes free%s; PMDSM_HEAP_SIZE sets the heap's size)", size,
			free_bytes(d), d->heap_size,
			i < d->nextents ? ", too many allocations" : "");
		errno = ENOMEM;
		return NULL;
	}
	if (gap) {
		split_extent(d, i, gap);        /* the gap stays free */
		i++;
	}
	if (pages >= PMDSM_COLOUR_MIN_PAGES)
		d->ncoloured++;

	struct dsm_extent *e = &d->extents[i];

	if (e->pages > pages)
		split_extent(d, i, pages);      /* the rest stays free after it */
	e->used = true;

	for (uint32_t k = 0; k < pages; k++) {
		uint32_t p = e->first + k;

		if (placement == PMDSM_FIRST_TOUCH) {
			/* No home until a rank touches it (its manager may
			 * have decided it already for a rank that allocated
			 * first: not read here).  Closed
			 * and armed as a page homed elsewhere; its first
			 * fault here learns the home (fault.c). */
			d->state[p] = PAGE_INVALID;
			continue;
		}
		d->home[p] = home_of(d, placement, k, size);
		d->state[p] = d->home[p] == d->rank ? PAGE_OWN : PAGE_INVALID;
	}
	if (placement == PMDSM_FIRST_TOUCH) {
		if (dsm_uffd(d))
			dsm_wp_arm(d, e->first, pages);
		return d->base + ((size_t)e->first << DSM_PAGE_SHIFT);
	}
	/* Pages homed here are valid at once (zero) and no other rank has a
	 * copy: they are open, and their writes go unwatched until another
	 * rank fetches one (home.c, WATCH; sync.c, share_home_pages, for a
	 * copy taken before this allocation).  Pages homed elsewhere
	 * stay closed; with uffd-async they are armed, so that the kernel
	 * records their writes once they are fetched and opened (uffd-wp arms
	 * them as they become valid). */
	for (uint32_t k = 0; k < pages;) {
		uint32_t p = e->first + k, run = 0;
		bool own = d->home[p] == d->rank;

		while (k + run < pages && (d->home[p + run] == d->rank) == own)
			run++;
		if (own) {
			dsm_protect(d, p, run, PROT_READ | PROT_WRITE);
			d->nown += run;
		} else if (dsm_uffd(d)) {
			dsm_wp_arm(d, p, run);
		}
		k += run;
	}
	return d->base + ((size_t)e->first << DSM_PAGE_SHIFT);
}

/* The index of the allocation that starts at ptr, or -1. */
int dsm_heap_find(const struct dsm *d, const void *ptr)
{
	uintptr_t a = (uintptr_t)ptr;

	if (a < (uintptr_t)d->base || a >= (uintptr_t)d->base + d->heap_size ||
	    (a & (DSM_PAGE - 1)))
		return -1;

	uint32_t first = (uint32_t)((a - (uintptr_t)d->base) >> DSM_PAGE_SHIFT);

	for (uint32_t i = 0; i < d->nextents; i++)
		if (d->extents[i].first == first && d->extents[i].used)
			return (int)i;
	return -1;
}

void dsm_heap_free(struct dsm *d, int index)
{
	uint32_t i = (uint32_t)index;
	struct dsm_extent *e = &d->extents[i];
	size_t off = (size_t)e->first << DSM_PAGE_SHIFT, len = (size_t)e->pages << DSM_PAGE_SHIFT;

	/* The barrier before left its prefetch in flight (overlap): those
	 * reads land first, or they would write into the hole and mark pages
	 * of the next allocation there valid. */
	dsm_prefetch_drain(d);
	if (e->pages >= PMDSM_COLOUR_MIN_PAGES)
		d->ncoloured--;
	/* Zero it (the next allocation is zero-filled) and give the memory
	 * back; its pages are nobody's until allocated again. */
	dsm_protect(d, e->first, e->pages, PROT_NONE);
	for (uint32_t p = e->first; p < e->first + e->pages; p++) {
		d->nown -= d->state[p] == PAGE_OWN;
		pageset_del(&d->told, p);
		pageset_del(&d->cool, p);
	}
	dsm_push_forget(d, e->first, e->pages);
	/* Whoever fetches these pages after the next allocation tells us
	 * again (a late byte only makes a page shared sooner: no harm). */
	memset((void *)(d->copied + e->first), 0, e->pages);
	if (fallocate(d->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off,
		      (off_t)len) < 0)
		memset(d->alias + off, 0, len);
	madvise(d->twins + off, len, MADV_DONTNEED);
	memset(d->state + e->first, PAGE_UNUSED, e->pages);
	/* No home until the next allocation gives one (or first touch). */
	memset(d->home + e->first, 0xff, e->pages * sizeof(*d->home));
	e->used = false;

	/* Merge with free neighbours. */
	if (i + 1 < d->nextents && !e[1].used) {
		e->pages += e[1].pages;
		memmove(e + 1, e + 2, (d->nextents - i - 2) * sizeof(*e));
		d->nextents--;
	}
	if (i > 0 && !e[-1].used) {
		e[-1].pages += e->pages;
		memmove(e, e + 1, (d->nextents - i - 1) * sizeof(*e));
		d->nextents--;
	}
}
