/* SPDX-License-Identifier: MIT */
/*
 * pmdsm.h - page-based distributed shared memory over PM.
 *
 * The processes (ranks) of one job share a heap: the same range of
 * addresses in every rank, so pointers into it mean the same thing
 * everywhere.  Memory is coherent under home-based lazy release
 * consistency (HLRC): what a rank wrote before it released (pmdsm_unlock,
 * pmdsm_barrier) is seen by a rank that acquires afterwards (pmdsm_lock of
 * the same lock, leaving the same barrier).  Programs free of data races
 * (every conflicting pair of accesses ordered by a lock or a barrier) see
 * sequentially consistent memory; see docs/dsm/guide.md.
 *
 * The DSM is a documented process-wide context: one per process, opened by
 * pmdsm_init() and closed by pmdsm_finalize(); it owns a PM context, a
 * service thread that answers the other ranks, and the SIGSEGV handler that
 * turns accesses to shared pages into protocol.  One application thread per
 * rank touches shared memory and calls the API.
 *
 * Conventions: functions returning int return 0 (or a documented
 * non-negative value) on success and a negative errno on failure; the two
 * allocation functions return NULL and set errno.  A failure of the job
 * itself (a rank died, the network failed) cannot be returned from a page
 * fault: it ends the rank with a message on stderr naming the cause.
 */
#ifndef PMDSM_H
#define PMDSM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PMDSM_VERSION_MAJOR 0
#define PMDSM_VERSION_MINOR 1
#define PMDSM_VERSION_PATCH 0

/* Returns "MAJOR.MINOR.PATCH" of the library actually loaded. */
const char *pmdsm_version(void);

/* Like strerror(), for the negative errno values pmdsm returns, with the
 * DSM's meaning where it has one (-EPERM: "lock not held by this rank"). */
const char *pmdsm_strerror(int err);

/* How written pages are found (docs/dsm/design.md, "Write detection"). */
enum pmdsm_write_detect {
	PMDSM_WRITE_DEFAULT = 0,   /* PMDSM_WRITE_DETECT, else uffd-async where the
	                              kernel has it (Linux 6.7+), else segv     */
	PMDSM_WRITE_SEGV,          /* "segv": mprotect + SIGSEGV per first write */
	PMDSM_WRITE_UFFD_ASYNC,    /* "uffd-async": userfaultfd WP_ASYNC, the kernel
	                              marks written pages; PAGEMAP_SCAN at release */
	PMDSM_WRITE_UFFD_WP,       /* "uffd-wp": userfaultfd write protection, a
	                              handler thread takes each first write   */
};

/*
 * Opening the DSM.  Every field is optional: zero means the environment
 * variable named beside it, else the default.
 */
struct pmdsm_attr {
	size_t heap_size;          /* bytes of shared heap     PMDSM_HEAP_SIZE
	                              (default 1 GiB; suffixes K, M, G)       */
	enum pmdsm_write_detect write_detect; /*               PMDSM_WRITE_DETECT */
	const char *pm_device;     /* PM's device, as pm_open  PM_DEVICE      */
};

/*
 * Join the job's DSM.  Collective: every rank of the job calls it (under a
 * PMIx launcher: scrun, srun --mpi=pmix, mpirun; alone, the process is a
 * job of one).  attr may be NULL.
 *
 * Errors: -EALREADY initialised already; -EINVAL a bad attribute or
 * environment value; -ENOMEM the heap's address range is taken; those of
 * pm_open().
 */
int pmdsm_init(const struct pmdsm_attr *attr);

/* Leave the DSM.  Collective: a barrier, then every page and the PM
 * context are released.  Shared memory must not be touched afterwards (an
 * access ends the rank with a message). */
int pmdsm_finalize(void);

int pmdsm_rank(void);
int pmdsm_size(void);
/* The write detection in use: "segv", "uffd-async" or "uffd-wp" (NULL
 * outside pmdsm_init()..pmdsm_finalize()). */
const char *pmdsm_write_detect(void);

/* Where the pages of an allocation have their home. */
enum pmdsm_placement {
	PMDSM_BLOCK = 0,           /* rank r homes the r-th of size contiguous
	                              blocks of pages (matches a block-row
	                              partition of an array)                   */
	PMDSM_CYCLIC,              /* page p is homed at rank p % size         */
	PMDSM_FIRST_TOUCH,         /* the first rank to touch a page (read or
	                              write) homes it; a page's first touch
	                              asks its manager, rank h % size for the
	                              page's index h in the whole heap (not in
	                              the allocation)                           */
};

/*
 * Allocate size bytes of shared memory, page-aligned and zero-filled.
 * Collective: every rank makes the same sequence of pmdsm_alloc/pmdsm_malloc
 * and pmdsm_free calls with the same arguments, and gets the same address.
 * It takes no message and does not synchronise: a rank may use the memory
 * at once, before the others have made the call.
 * Returns NULL with errno ENOMEM when the heap (PMDSM_HEAP_SIZE) has no
 * room (the message on stderr says how much is free), EINVAL for size 0,
 * ENXIO before pmdsm_init().
 */
void *pmdsm_alloc(size_t size, enum pmdsm_placement placement);
void *pmdsm_malloc(size_t size);   /* pmdsm_alloc(size, PMDSM_BLOCK) */

/*
 * Where a large allocation goes (cache colouring): an allocation of
 * PMDSM_COLOUR_MIN_PAGES pages or more, made while k others of that size
 * are allocated, starts pmdsm_colour_pages(k) pages into the free range it
 * is placed in, when the range has room for that too; the pages skipped
 * stay free for smaller allocations (an allocation freed and made again
 * comes back to its place).  Two arrays of a power-of-two size then do not
 * sit a multiple of a large power of two apart, which slows a loop that
 * walks both at the same index (docs/dsm/design.md, "Memory layout").
 * Given here so that a program's non-DSM version can lay out its arrays
 * the same way.
 */
#define PMDSM_COLOUR_MIN_PAGES 256u
static inline unsigned pmdsm_colour_pages(unsigned k)
{
	return k * 17u % 64u;
}

/*
 * The rank that homes the page holding addr; -ENODATA for a page of a
 * PMDSM_FIRST_TOUCH allocation that no rank has touched yet (asking does
 * not touch it), -EINVAL when addr is in no allocation, -ENXIO before
 * pmdsm_init().
 */
int pmdsm_home(const void *addr);

/* Return an allocation.  Collective, with two barriers (nobody uses it any
 * more; nobody's next allocation writes there before it is zeroed);
 * -EINVAL, without a barrier, if ptr is not an allocation's start. */
int pmdsm_free(void *ptr);

/* Every rank's writes before the barrier are seen by every rank after it. */
int pmdsm_barrier(void);

/*
 * A barrier among this rank and the n ranks in peers only: what this rank
 * wrote before it is seen by each peer after it, and what each peer wrote
 * before it is seen here after it.  Each peer must call it naming this rank
 * (the k-th call here that names a peer meets that peer's k-th call that
 * names this rank), so a stencil's ranks can each name their neighbours.
 * Unlike pmdsm_barrier() it passes on only the writes of the ranks that
 * meet, not what they had seen of others' writes: a rank that reads data
 * a third rank wrote must meet that rank, or all meet in pmdsm_barrier().
 * Lock releases after it pass the peers' writes on, as after a grant.
 * Errors: -EINVAL peers NULL with n > 0, a rank out of range, this rank,
 * or a rank named twice; -ENXIO outside pmdsm_init()..pmdsm_finalize().
 */
int pmdsm_barrier_with(const int *peers, unsigned n);

/*
 * pmdsm_barrier_with() in two halves, so that the program computes while
 * the ranks meet (the split-phase barrier of UPC's upc_notify/upc_wait):
 *
 *   pmdsm_barrier_with_notify(peers, n)   the arrival: this rank's writes
 *                                         before it go to the peers
 *   ... compute on data no peer writes in this phase ...
 *   pmdsm_barrier_with_wait()             the departure: returns once the
 *                                         peers have notified; what they
 *                                         wrote before their notify is
 *                                         seen here after it
 *
 * Between the two, the program may read and write shared memory that no
 * peer writes before its notify and that it does not hand to a peer at
 * this meeting: a stencil's interior rows, not its edge rows.  What it
 * writes there is passed on at its next release, as any write after a
 * barrier.  No synchronisation may come in between: pmdsm_barrier(),
 * pmdsm_barrier_with(), another notify, pmdsm_lock(), pmdsm_unlock(),
 * pmdsm_free() and pmdsm_finalize() return -EBUSY until the wait.
 * Errors: those of pmdsm_barrier_with(); -EBUSY as said; -ENOMSG
 * pmdsm_barrier_with_wait() with no notify before it.
 */
int pmdsm_barrier_with_notify(const int *peers, unsigned n);
int pmdsm_barrier_with_wait(void);

/* Number of locks, numbered 0..PMDSM_LOCKS-1; lock l is managed by rank
 * l % size. */
#define PMDSM_LOCKS 1024

/*
 * Acquire and release lock l.  What a rank wrote before it released l is
 * seen by the next rank that acquires l, and everything that rank had seen.
 * Errors: -EINVAL l out of range; -EDEADLK l held by this rank already;
 * -EPERM pmdsm_unlock of a lock this rank does not hold.
 */
int pmdsm_lock(unsigned l);
int pmdsm_unlock(unsigned l);

/*
 * What a barrier does with the pages it prefetches (docs/dsm/guide.md,
 * "Prefetch at barriers"): the pages this rank had read that other ranks
 * wrote, fetched again from their homes.
 *
 *   PMDSM_PREFETCH_WAIT     the barrier returns when they are here
 *                           (default): for a program that reads them first
 *   PMDSM_PREFETCH_OVERLAP  the barrier returns once their reads have
 *                           started; the program computes meanwhile, and
 *                           a first access to a page whose read is still
 *                           in flight waits for it: for a program that
 *                           works on its own pages first (a stencil that
 *                           computes the rows that read a neighbour's
 *                           last)
 *
 * The environment's PMDSM_PREFETCH_MODE (wait or overlap) sets it at
 * pmdsm_init(); pmdsm_prefetch_mode() changes it for the barriers that
 * follow, in this rank.  Either way the pages are what a fault would have
 * fetched: the mode changes when the program waits, never what it reads.
 * Errors: -EINVAL an unknown mode; -ENXIO outside pmdsm_init()..finalize.
 */
enum pmdsm_prefetch_mode {
	PMDSM_PREFETCH_WAIT = 0,
	PMDSM_PREFETCH_OVERLAP,
};
int pmdsm_prefetch_mode(enum pmdsm_prefetch_mode mode);

/* What the DSM did in this rank, counted since pmdsm_init(). */
struct pmdsm_stats {
	uint64_t read_faults;      /* an invalid page read: fetched from home   */
	uint64_t write_faults;     /* a page's first write since a release      */
	uint64_t pages_fetched, fetch_bytes;
	uint64_t twins;            /* copies made of pages before a write       */
	uint64_t diffs_sent, diff_bytes;   /* diffs of pages sent to their home */
	uint64_t diffs_applied;    /* diffs other ranks sent to pages homed here */
	uint64_t invalidations;    /* cached pages dropped at an acquire        */
	uint64_t barriers, locks, lock_remote; /* lock_remote: managed elsewhere */
	uint64_t wp_scans;         /* PAGEMAP_SCAN calls (write detection uffd-async) */
	uint64_t dropped;          /* messages dropped: malformed, or not for this rank */
	uint64_t fault_ns, fetch_ns, release_ns, barrier_ns, lock_ns;
	uint64_t read_ahead_pages; /* of pages_fetched, those fetched beside a
	                              faulted page (PMDSM_READ_AHEAD)          */
	uint64_t home_shared;      /* pages homed here whose writes began to be
	                              watched: another rank fetched them        */
	uint64_t prefetched_pages; /* of pages_fetched, those fetched again at a
	                              barrier (PMDSM_PREFETCH)                  */
	uint64_t prefetch_used;    /* of those that landed closed, pages touched
	                              before the next barrier (the others are
	                              not fetched again)                      */
	uint64_t home_asks;        /* questions to another rank for the home of a
	                              PMDSM_FIRST_TOUCH page: a round trip each
	                              (a first touch, or pmdsm_home)            */
	uint64_t cold_pages;       /* uffd-async: valid pages left unwritten for
	                              8 to 16 releases, taken out of the
	                              release's scan (read-only until written)  */
	uint64_t cold_writes;      /* of those, written again: a fault each     */
	uint64_t prefetch_overlapped; /* of prefetched_pages, those whose read a
	                              barrier left in flight when it returned
	                              (PMDSM_PREFETCH_OVERLAP)                */
	uint64_t prefetch_waits;   /* accesses that found their page's read
	                              still in flight and waited for it       */
	uint64_t peer_barriers;    /* pmdsm_barrier_with calls (a notify and
	                              its wait are one)                       */
	uint64_t peer_barrier_ns;  /* time in them (split: in the notify and in
	                              the wait, not between them)             */
	uint64_t pushed_pages;     /* pages homed here sent to a peer that asked
	                              for them, at a pmdsm_barrier_with        */
	uint64_t push_taken;       /* pages a home pushed that this rank took
	                              instead of fetching them                */
	uint64_t prefetch_opened;  /* of prefetched_pages and push_taken, those
	                              opened as they landed, without waiting
	                              for a first access (not in prefetch_used:
	                              their use is not seen)                  */
};

/*
 * Copy this rank's counters into stats; size is sizeof(struct pmdsm_stats)
 * as the caller was compiled.  Counters are only ever added at the end of
 * the structure, so a program built against an older pmdsm.h gets the
 * ones it knows and a newer one finds the rest zeroed.
 * Errors: -ENXIO outside pmdsm_init()..pmdsm_finalize(), -EINVAL.
 */
int pmdsm_stats_get(struct pmdsm_stats *stats, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* PMDSM_H */
