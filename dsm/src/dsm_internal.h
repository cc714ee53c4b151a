/* SPDX-License-Identifier: MIT */
/*
 * dsm_internal.h - the DSM's one context and what its files share.
 *
 * Layout of the source (docs/dsm/design.md, "Source layout"):
 *   diff.c      twins and diffs of a page (pure)
 *   pageset.c   sets of pages as bitmaps and runs (pure)
 *   bytescan.c  the next byte of a class in a table, 8 at a time (pure)
 *   heap.c      the shared range: memfd, the application's view and the
 *               library's alias, allocations and homes
 *   fault.c     write detection and page faults (SIGSEGV)
 *   comm.c      PM messages, the service thread that alone uses PM
 *   sync.c      release, acquire, barriers and locks (the HLRC protocol)
 *   pmdsm.c     the API: init, finalize, statistics
 */
#ifndef DSM_INTERNAL_H
#define DSM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "pm.h"
#include "pmdsm.h"
#include "diff.h"
#include "pageset.h"
#include "bytescan.h"

#define DSM_PAGE 4096u
#define DSM_PAGE_SHIFT 12

/* The shared range starts here in every rank (a pointer means the same
 * thing everywhere); MAP_FIXED_NOREPLACE refuses it if it is taken. */
#define DSM_HEAP_BASE ((uintptr_t)0x5d5000000000ull)
#define DSM_HEAP_DEFAULT (1ull << 30)
#define DSM_HEAP_MAX (1ull << 40)
#define DSM_MAX_ALLOCS 4096

/* Read-ahead (fault.c): at most this many pages per fetch, the faulted one
 * included, unless PMDSM_READ_AHEAD says otherwise (0 or 1: none).  PM's
 * remote read has no size limit of its own below 4 GiB - 1 (the udp
 * device's READ body, docs/pm/wire.md; shm copies any length); the cap
 * keeps one fetch, and the home's answer to it, short. */
#define DSM_READ_AHEAD_DEFAULT 16u
#define DSM_READ_AHEAD_MAX 256u

/* Prefetch at a barrier (sync.c): at most this many of the pages that the
 * departure's notices drop from this rank's cache are fetched again before
 * the barrier returns, unless PMDSM_PREFETCH says otherwise (0: none). */
#define DSM_PREFETCH_DEFAULT 64u
#define DSM_PREFETCH_MAX 4096u

/* How long the service thread polls for an answer the application waits
 * for (comm.c, dsm_await) before it sleeps, unless PMDSM_SPIN_US says
 * otherwise (0: sleep at once); PM's own pm_wait() spins as long. */
#define DSM_SPIN_US_DEFAULT 200u
#define DSM_SPIN_US_MAX 1000000u

/* The most bytes of diffs one message to a home carries (less when PM's
 * messages are smaller): 7 whole-page diffs, hundreds of small ones. */
#define DSM_DIFF_BATCH (32u * 1024u)

/* How the service thread is scheduled (comm.c, service_sched). */
enum dsm_service_sched {
	PMDSM_SCHED_SHORT = 0,  /* SCHED_OTHER, the shortest slice (default) */
	PMDSM_SCHED_FIFO,       /* SCHED_FIFO 1: needs the privilege         */
	PMDSM_SCHED_NONE,       /* as created                                */
	PMDSM_SCHED_POLL,       /* as created, and never asleep: it polls and
	                           yields while the application computes    */
};

/* A page's state in this rank; the application's view is protected to
 * match, so that the first access that needs the protocol faults. */
enum page_state {
	PAGE_UNUSED = 0,        /* not allocated: an access is a bug        */
	PAGE_INVALID,           /* cached copy stale or absent: PROT_NONE   */
	PAGE_READ,              /* valid, not written since the last release:
	                           PROT_READ                                */
	PAGE_WRITE,             /* valid and written: PROT_READ|PROT_WRITE,
	                           a twin unless the page is homed here     */
	PAGE_OWN,               /* homed here and fetched by no other rank
	                           yet: PROT_READ|PROT_WRITE, writes not
	                           watched (no copy to tell of them)        */
	PAGE_PREFETCHED,        /* fetched at a barrier, not touched since:
	                           PROT_NONE; the first access makes it
	                           valid without a fetch                    */
	PAGE_COLD,              /* uffd-async: valid, left unwritten for a
	                           while: PROT_READ, out of the release's
	                           scan; its next write faults and makes it
	                           READ again (wp_uffd.c, dsm_wp_cool)      */
	PAGE_INFLIGHT,          /* its prefetch is in flight: PROT_NONE; the
	                           service thread makes it PREFETCHED when
	                           the read lands, a first access waits for
	                           it (fault.c)                             */
};

/* The valid pages that are watched, READ and WRITE, are one class of the
 * state table for bytescan_find(): (state & ~1) == PAGE_READ. */
#define PAGE_WATCHED_MASK 0xfeu
_Static_assert(PAGE_WRITE == (PAGE_READ | 1) && !(PAGE_READ & 1) &&
	       (PAGE_OWN & PAGE_WATCHED_MASK) != PAGE_READ &&
	       (PAGE_INVALID & PAGE_WATCHED_MASK) != PAGE_READ &&
	       (PAGE_PREFETCHED & PAGE_WATCHED_MASK) != PAGE_READ &&
	       (PAGE_COLD & PAGE_WATCHED_MASK) != PAGE_READ &&
	       (PAGE_INFLIGHT & PAGE_WATCHED_MASK) != PAGE_READ,
	       "READ and WRITE alone make the watched class");

/* uffd-async: how many releases apart the valid pages are looked over
 * for ones to make COLD (wp_uffd.c, dsm_wp_cool).  A page goes cold when
 * no write to it was found between two of these looks in a row: after 8
 * to 16 releases. */
#define DSM_COLD_SWEEP 8u

/* A fetch of pages [first, first + n), all homed at one rank, in flight
 * (fault.c): the read, and before it the write that tells the home a copy
 * exists here (tell), the first time. */
struct dsm_fetch_op {
	uint32_t first, n;
	bool tell;
	struct pm_op op, told;
};

/* Runs of pages a barrier's prefetch has in flight at once: PM's
 * operations in flight stay few (the udp device keeps a table of them). */
#define DSM_PREFETCH_RUNS 16u

/* One departure's prefetch in this many lands its pages closed, so that a
 * page no longer read stops being fetched again within as many of the
 * barriers that drop it (sync.c, depart; docs/dsm/design.md "Prefetch at
 * barriers").  Prime: a page dropped every k-th departure (a stencil's
 * two grids: every other one) meets a probe within that many of its own
 * drops for every k it does not divide; with 8, the probes of a program
 * of two grids all fell on the same grid, and the other's pages read
 * ahead once were fetched at every barrier for good. */
#define DSM_PREFETCH_PROBE 7u

/* One allocation of the heap (the allocator keeps them sorted). */
struct dsm_extent {
	uint32_t first, pages;  /* in pages from the heap's start */
	bool used;
};

/* A lock as its manager sees it. */
struct dsm_lock_mgr {
	int32_t holder;         /* -1: free */
	uint32_t nwait, head;   /* FIFO of waiting ranks in wait[] */
	int32_t *wait;          /* size entries */
	struct pageset notices; /* pages written before its releases ...   */
	uint32_t epoch;         /* ... in this barrier epoch (older ones are
	                           covered by the barrier that ended it)      */
};

/* A page's home in d->home[] when it has none yet (PMDSM_FIRST_TOUCH), or
 * none is known here yet.  No rank has this number: size <= UINT16_MAX. */
#define DSM_UNHOMED UINT16_MAX

/* A question for the home of a page, to its manager (home.c). */
struct dsm_home_query {
	uint32_t page;
	bool claim;             /* become the home if it has none */
	bool answered;
	uint16_t home;          /* the answer: a rank, or DSM_UNHOMED */
};

/* The documented process-wide context (one DSM per process). */
struct dsm {
	int rank, size;
	pm_context_t *pm;
	const char *pm_device;  /* pmdsm_attr's, for pm_open */
	size_t max_msg;         /* the smallest pm_max_message over the peers */

	/* The heap: the application's view (base) and the library's alias of
	 * the same memfd, always writable, registered with PM (remote reads
	 * of pages homed here, diffs applied here). */
	uint8_t *base, *alias, *twins;
	size_t heap_size;
	uint32_t npages;
	int memfd;
	pm_mr_t *mr;
	uint64_t *rkeys;        /* every rank's key of its alias */
	/* A byte per page that another rank sets here (a remote write)
	 * before it first fetches the page from us: then a copy exists and
	 * our writes to it must be watched (sync.c, share_home_pages).  Its
	 * registration, every rank's key of its own, the pages this rank
	 * has told their homes of, and how many of ours are still PAGE_OWN.
	 * The same first fetch asks the home to watch the pages at once
	 * (home.c, MSG_WATCH); the byte is for a home that has not
	 * allocated them yet.  watch_asked: the first page of the WATCH
	 * out, or UINT32_MAX. */
	volatile uint8_t *copied;
	size_t copied_len;
	pm_mr_t *copied_mr;
	uint64_t *copied_keys;
	struct pageset told;
	uint32_t nown;
	uint32_t watch_asked;
	uint8_t *state;         /* enum page_state per page */
	uint16_t *home;         /* home rank per page; DSM_UNHOMED: first
	                           touch, not decided or not known here yet */
	struct dsm_home_query *home_query; /* the question out (home.c) */
	struct dsm_extent extents[DSM_MAX_ALLOCS];
	uint32_t nextents;
	uint32_t ncoloured;     /* large allocations live (heap.c, colour_gap) */
	enum pmdsm_write_detect write_detect;
	int uffd, pagemap;      /* write detection uffd-* (wp_uffd.c) */
	/* uffd-wp: the thread that takes the write faults, and the pipe that
	 * tells it to end. */
	pthread_t wp_thread;
	bool wp_running;
	int wp_stop[2];

	/* Read-ahead, on the application thread (fault.c): the largest window
	 * in pages (1: none), the window of the last fetch, and the page after
	 * it (a fault there is sequential and doubles the window). */
	uint32_t ra_max, ra_window, ra_next;

	/* Prefetch at a barrier (sync.c): the most pages, and room for them;
	 * the reads of its last runs, still in flight when the barrier
	 * returned (fault.c; the service thread's alone). */
	uint32_t prefetch_max;
	uint32_t *prefetch;
	bool prefetch_overlap;          /* PMDSM_PREFETCH_OVERLAP: leave them */
	/* Whether the pages of this departure's prefetch open as they land
	 * (READ), or stay closed until touched (PREFETCHED): one departure in
	 * DSM_PREFETCH_PROBE lands them closed, to see which are still read. */
	bool prefetch_open;
	uint32_t prefetch_departures;
	struct dsm_fetch_op inflight[DSM_PREFETCH_RUNS];
	uint32_t nslots, ninflight;     /* slots used, of them in flight */

	/* Pages written since the last release (their diffs or, homed here,
	 * their notices are owed), and every page known written this epoch
	 * (ours and what acquires told us): what our releases pass on. */
	struct pageset dirty, epoch_notices;

	/* uffd-async (wp_uffd.c, dsm_wp_cool): the READ pages found unwritten
	 * at the last look for cold pages and not written, dropped or freed
	 * since, and the releases since that look. */
	struct pageset cool;
	uint32_t releases_since_cool;

	/* The service thread, the one thread that uses PM (comm.c), and the
	 * one request the application may have posted to it. */
	pthread_t service;
	bool service_running, stop;
	int (*open_fn)(struct dsm *);
	void (*close_fn)(struct dsm *);
	_Atomic uint32_t req;
	int (*req_fn)(struct dsm *, void *);
	void *req_arg;
	int req_ret;
	uint64_t spin_ns;       /* PMDSM_SPIN_US: dsm_wait_until() polls this long */
	unsigned call_spin;     /* dsm_call() spins this often before it sleeps */
	enum dsm_service_sched service_sched;   /* PMDSM_SERVICE_SCHED */
	bool log_stats;         /* PMDSM_STATS: the counters on stderr at finalize */

	/* Protocol state, touched only by the service thread. */
	uint32_t diffs_unacked;
	uint32_t hello_seen;
	uint32_t epoch;                 /* barriers this rank has left      */
	uint32_t mgr_epoch, mgr_arrived;/* rank 0: the barrier it counts    */
	struct pageset mgr_union;       /* rank 0: the notices of that one  */
	bool departed;                  /* this rank: departure received    */
	struct pageset depart_notices;  /* what the departure named         */
	uint32_t bye_seen;              /* rank 0 at finalize               */
	struct dsm_lock_mgr *locks;     /* PMDSM_LOCKS, those managed here used */
	struct pageset grant_notices;   /* the notices of a grant to us     */
	int32_t granted_lock;           /* -1, or the lock just granted     */
	uint8_t *held;                  /* PMDSM_LOCKS: held by this rank   */

	/* Barriers among a few ranks (sync.c, pmdsm_barrier_with).  This
	 * rank's own writes this epoch; per peer ever met in one, the own
	 * writes not told to it yet (owed[p].bits NULL: never met), the
	 * calls that named it and the arrivals it sent; the notices those
	 * arrivals brought, dropped at this rank's next such barrier (then
	 * as peer_departing, while the next ones come into peer_notices). */
	struct pageset own_notices;
	struct pageset *owed;           /* size entries */
	int *met;                       /* the peers whose owed is made */
	uint32_t nmet;
	uint32_t *peer_calls, *peer_arrivals;   /* size entries each */
	struct pageset peer_notices, peer_departing;
	/* A barrier of a few begun (pmdsm_barrier_with_notify) and not ended
	 * yet: its peers (size entries), for the wait. */
	int *notify_peers;
	unsigned notify_n;
	bool notified;

	/* Pushes (push.c): a home sends the pages a peer asked for when it
	 * meets it in a barrier of a few, so that the peer need not fetch
	 * them.  As a reader: the pages asked for (subscribed); those never
	 * to take from a push (no_push: written here, or named by a rank
	 * other than their home); the pushes come and not yet taken (stash,
	 * their bytes in stash_bytes, stash_cap at most).  As a home: per
	 * peer, the pages it asked for (subs[p].bits NULL: none). */
	bool push;                      /* PMDSM_PUSH */
	struct pageset subscribed, no_push, scratch;
	struct dsm_stashed *stash;
	uint8_t *stash_bytes;
	uint32_t nstash, stash_cap;
	struct pageset *subs;           /* size entries */

	/* The counters: in PM's statistics page (pm_stats_layer, layer "dsm"),
	 * where pminfo and scored's agent read them, else in own_stats. */
	struct pmdsm_stats *st, own_stats;

	/* Diff batches, one per home (sync.c): batch_bufs holds size buffers
	 * of DSM_DIFF_BATCH bytes, of which batch_cap are used (PM's message
	 * size allowing); batched lists the homes with a batch open. */
	struct dsm_batch *batches;
	uint8_t *batch_bufs;
	int *batched;
	uint32_t nbatched, batch_cap;
};

struct dsm_batch {
	uint32_t n, len;        /* diffs in it, bytes */
	bool queued;            /* in batched[] */
};

static inline uint8_t *dsm_batch_buf(struct dsm *d, int home)
{
	return d->batch_bufs + (size_t)home * DSM_DIFF_BATCH;
}

/* free() what p points to and forget it (a close may run twice). */
#define DSM_FREE(p) do { free(p); (p) = NULL; } while (0)

/* The context, NULL outside pmdsm_init()..pmdsm_finalize(). */
extern struct dsm *dsm_ctx;

/* ---- messages (docs/dsm/design.md, "Messages") ---- */

enum dsm_msg_type {
	MSG_HELLO = 1,          /* arg: 0; payload: u64 rkey of the alias     */
	MSG_DIFF,               /* arg: diffs; payload: entries (diff.h)      */
	MSG_DIFF_ACK,           /* arg: diffs applied                         */
	MSG_NOTICES,            /* arg: lock, DSM_NOTICE_BARRIER or
	                           DSM_NOTICE_PEER; payload: runs (pageset.h) */
	MSG_BARRIER_ARRIVE,     /* arg: epoch                                 */
	MSG_BARRIER_DEPART,     /* arg: epoch                                 */
	MSG_LOCK_ACQUIRE,       /* arg: lock                                  */
	MSG_LOCK_GRANT,         /* arg: lock (its notices came before)        */
	MSG_LOCK_RELEASE,       /* arg: lock (the releaser's notices before)  */
	MSG_BYE,                /* arg: 0; the departure of finalize arrived   */
	MSG_HOME_ASK,           /* arg: page; payload: u32 claim (0 or 1)     */
	MSG_HOME_IS,            /* arg: page; payload: u32 home or UNHOMED    */
	MSG_PEER_ARRIVE,        /* arg: the sender's calls of
	                           pmdsm_barrier_with that named the receiver
	                           (its notices, DSM_NOTICE_PEER, came before) */
	MSG_SUBSCRIBE,          /* arg: 0; payload: runs of pages homed at the
	                           receiver, to push to the sender (push.c)   */
	MSG_PUSH,               /* arg: n pages; payload: n u32 page numbers,
	                           then the n pages' bytes (push.c)           */
	MSG_UNSUBSCRIBE,        /* arg: 0; payload: runs of pages homed at the
	                           receiver, no longer to push (push.c)       */
	MSG_WATCH,              /* arg: first page; payload: u32 pages: homed
	                           at the receiver, to watch before the
	                           sender's first copy (home.c)               */
	MSG_WATCHING,           /* arg: first page of the WATCH answered      */
};

#define DSM_NOTICE_BARRIER 0xffffffffu
#define DSM_NOTICE_PEER 0xfffffffeu

/* 12 bytes before every payload, little-endian (this is x86-64 and
 * aarch64; docs/dsm/design.md has the layout). */
struct dsm_hdr {
	uint8_t type;
	uint8_t _pad[3];
	uint32_t arg;
	uint32_t epoch;         /* the sender's barrier epoch (notices, locks) */
};

/* ---- comm.c ---- */

/* Start the service thread, which runs open_fn (PM's context and what
 * needs it) and returns its result here; then it serves until d->stop,
 * and runs close_fn before it ends (also when open_fn failed). */
int dsm_service_start(struct dsm *d, int (*open_fn)(struct dsm *), void (*close_fn)(struct dsm *));
/* Wait for the service thread's end (after a call that set d->stop). */
void dsm_service_join(struct dsm *d);
/* Run fn(d, arg) on the service thread and return its result. */
int dsm_call(struct dsm *d, int (*fn)(struct dsm *, void *), void *arg);

/* Send a message (header + payload) to peer; progresses while the peer
 * has no room.  Fatal if the peer is gone. */
void dsm_send(struct dsm *d, int peer, uint8_t type, uint32_t arg,
	      const void *payload, size_t len);
/* A PM error that says a peer is gone: the rank ends, naming which one
 * (or PM's error, when every peer is still there). */
_Noreturn void dsm_peer_gone(struct dsm *d, int err);
/* pm_wait, with a dead peer fatal. */
void dsm_pm_wait(struct dsm *d, int timeout_ms);
/* Handle every message that has arrived; returns how many. */
int dsm_progress(struct dsm *d);
/* Progress until done(d, arg) is true: poll for up to spin_ns after the
 * last message, then sleep in pm_wait() (comm.c says why). */
void dsm_wait_until(struct dsm *d, bool (*done)(struct dsm *, const void *),
		    const void *arg);
/* Send a page set as messages of type (runs, chunked) with arg tag. */
void dsm_send_runs(struct dsm *d, int peer, uint8_t type, uint32_t tag, uint32_t epoch,
		   const struct pageset *set);
/*
 * A synchronisation message (BARRIER_ARRIVE, BARRIER_DEPART, LOCK_GRANT,
 * LOCK_RELEASE, PEER_ARRIVE: type, arg) with the notices that go before
 * it (set, or NULL for none): the last chunk of their runs is its payload
 * and epoch the notices' epoch in its header; any chunks before go ahead as
 * NOTICES (tag, epoch).  One message where the notices fit in one: on a
 * network device each is a system call at both ends.
 */
void dsm_send_sync(struct dsm *d, int peer, uint8_t type, uint32_t arg, uint32_t tag,
		   uint32_t epoch, const struct pageset *set);
/* One PUSH of n pages homed here, their bytes from the alias (n at most
 * dsm_push_per_msg). */
void dsm_send_pages(struct dsm *d, int peer, const uint32_t *pages, uint32_t n);

/* The end of the rank: message on stderr, exit status 1. */
_Noreturn void dsm_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A line on stderr, prefixed "pmdsm[rank]:". */
void dsm_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- home.c ---- */

/* dsm_call()'s function: the home of the page of a struct dsm_home_query,
 * known here or asked of its manager (claiming it with q->claim); the
 * rank, or DSM_UNHOMED when it has none and q->claim is not set. */
int dsm_home_resolve(struct dsm *d, void *q);
/* The manager's half: an ask for the home of page from peer, answered. */
void dsm_on_home_ask(struct dsm *d, int peer, uint32_t page, const uint8_t *p, size_t len);
/* The asker's half: the manager's answer. */
void dsm_on_home_is(struct dsm *d, int peer, uint32_t page, const uint8_t *p, size_t len);
/* Before the first copy of pages [first, first + n), all homed at one
 * rank: that home watches them from now on (MSG_WATCH, answered). */
void dsm_watch_ask(struct dsm *d, uint32_t first, uint32_t n);
/* The home's half: the pages of a WATCH from peer watched, answered. */
void dsm_on_watch(struct dsm *d, int peer, uint32_t first, const uint8_t *p, size_t len);
/* The asker's half: the home's answer. */
void dsm_on_watching(struct dsm *d, int peer, uint32_t first);

/* ---- heap.c ---- */

int dsm_heap_open(struct dsm *d, size_t size);
void dsm_heap_close(struct dsm *d);
void *dsm_heap_alloc(struct dsm *d, size_t size, enum pmdsm_placement placement);
/* The allocation that starts at ptr (its index), or -1. */
int dsm_heap_find(const struct dsm *d, const void *ptr);
/* Zero an allocation and make its range free (between two barriers). */
void dsm_heap_free(struct dsm *d, int index);
/* Set the protection of the application's view of pages [first, first+n). */
void dsm_protect(struct dsm *d, uint32_t first, uint32_t n, int prot);

/* Pages given one protection one at a time, in increasing order, gathered
 * into runs of consecutive pages: one mprotect() per run, since each call
 * costs its own VMA split and TLB flush (a stencil's boundary row is a run
 * of pages).  Start with { .prot = P }, add pages, end with the flush. */
struct dsm_protect_runs {
	uint32_t first, n;
	int prot;
};
void dsm_protect_add(struct dsm *d, struct dsm_protect_runs *r, uint32_t page);
void dsm_protect_flush(struct dsm *d, struct dsm_protect_runs *r);

static inline uint8_t *dsm_page_alias(const struct dsm *d, uint32_t page)
{
	return d->alias + ((size_t)page << DSM_PAGE_SHIFT);
}

static inline uint8_t *dsm_page_twin(const struct dsm *d, uint32_t page)
{
	return d->twins + ((size_t)page << DSM_PAGE_SHIFT);
}

/* The page as it is now becomes the baseline of its next diff. */
static inline void dsm_make_twin(struct dsm *d, uint32_t page)
{
	memcpy(dsm_page_twin(d, page), dsm_page_alias(d, page), DSM_PAGE);
}

/* ---- push.c ---- */

/* The ranks of a barrier of a few: distinct, none of them this one. */
struct dsm_peers {
	const int *peers;
	unsigned n;
};

/* A page pushed to this rank by its home, not taken yet. */
struct dsm_stashed {
	uint32_t page, epoch;
	int from;
};

int dsm_push_open(struct dsm *d);
void dsm_push_close(struct dsm *d);
/* Pages per PUSH message (0: PM's messages cannot carry one). */
uint32_t dsm_push_per_msg(const struct dsm *d);
/* Before this rank's notices to peer: the pages owed to it that it
 * asked for and that are homed here. */
void dsm_push_to(struct dsm *d, int peer, const struct pageset *owed);
/* At the departure of a barrier of a few, after the notices' pages are
 * dropped: the pushed ones among them made PREFETCHED (no fetch); the
 * pushes of pages the notices do not name stay for the next. */
void dsm_push_take(struct dsm *d, const struct pageset *notices);
/* At that departure, before the notices' pages are dropped: tell the
 * homes among peers to stop pushing the pages the notices name that a
 * probing departure left closed and the application never touched since
 * (PREFETCHED): a page the program stopped reading lapses as its
 * prefetch does. */
void dsm_push_lapse(struct dsm *d, const struct dsm_peers *w, const struct pageset *notices);
/* After that departure: ask the homes among peers to push, from now on,
 * the pages of list (fetched again, pages[0..n)) homed at them. */
void dsm_push_subscribe(struct dsm *d, const struct dsm_peers *w, const uint32_t *pages,
			uint32_t n);
/* A page this rank cannot take from a push any more. */
static inline void dsm_push_refuse(struct dsm *d, uint32_t page)
{
	pageset_add(&d->no_push, page);
}
/* Freed pages: their pushes, asked for or not, start over. */
void dsm_push_forget(struct dsm *d, uint32_t first, uint32_t n);
void dsm_on_push(struct dsm *d, int peer, const struct dsm_hdr *h, const uint8_t *p, size_t len);
/* SUBSCRIBE (subscribe) or UNSUBSCRIBE from peer. */
void dsm_on_subscribe(struct dsm *d, int peer, bool subscribe, const uint8_t *p, size_t len);

/* ---- fault.c ---- */

/* Make sure the SIGSEGV handler is ours (it stays after finalize). */
int dsm_fault_install(struct dsm *d);
/* Bring pages [first, first+n) up to date from their home, in one remote
 * read (they are contiguous, homed at one rank, not here). */
void dsm_fetch(struct dsm *d, uint32_t first, uint32_t n);
/* Fetch pages (ascending, INVALID, not homed here), runs of them at once,
 * for a first access to make valid without a message: on the service
 * thread while the application waits (a barrier).  With prefetch_overlap
 * the last runs are left in flight (PAGE_INFLIGHT) for the application to
 * compute meanwhile. */
void dsm_prefetch(struct dsm *d, const uint32_t *pages, uint32_t n);
/* Service thread, after a progress pass: the prefetches in flight that
 * have landed become PREFETCHED; dsm_prefetch_drain waits for all of them
 * (before anything changes the pages' states: a release, an acquire). */
void dsm_prefetch_poll(struct dsm *d);
void dsm_prefetch_drain(struct dsm *d);
/* Pages [first, first + n), just fetched, become valid (fault.c). */
void dsm_pages_valid(struct dsm *d, uint32_t first, uint32_t n);
/* Pages [first, first + n) of a departure's prefetch or pushes, just
 * landed (service thread): valid and open when the departure says so
 * (prefetch_open), else PREFETCHED, closed until the first access. */
void dsm_prefetched_valid(struct dsm *d, uint32_t first, uint32_t n);
/* Pages [first, first + n), valid and READ, are watched again: their next
 * write is seen (segv: read-only; uffd-wp and uffd-async: armed). */
void dsm_watch(struct dsm *d, uint32_t first, uint32_t n);
/* The first write to a valid page since the last release: its twin (not
 * homed here), WRITE, dirty (segv's fault and uffd-wp's thread). */
void dsm_start_write(struct dsm *d, uint32_t page);

/* ---- wp_uffd.c: write detection uffd-async and uffd-wp ---- */

/* userfaultfd write protection over the view: asynchronous (uffd-async),
 * or synchronous with the thread that takes the faults started (uffd-wp).
 * -ENOTSUP (or the system call's error) where the kernel lacks it. */
int dsm_wp_open(struct dsm *d);
void dsm_wp_close(struct dsm *d);
/* Write-protect pages [first, first+n): their next write is recorded
 * (uffd-async) or faults to the thread (uffd-wp). */
void dsm_wp_arm(struct dsm *d, uint32_t first, uint32_t n);
/* Add the pages written since they were protected to d->dirty, and
 * protect them again. */
void dsm_wp_collect(struct dsm *d);
/* The same for the pages of set alone (an acquire: what it drops). */
void dsm_wp_collect_set(struct dsm *d, const struct pageset *set);
/* uffd-async, at the end of a release: every DSM_COLD_SWEEP releases,
 * the READ pages unwritten since the last such look become COLD. */
void dsm_wp_cool(struct dsm *d);
/* uffd-async: a write to a COLD page (the SIGSEGV handler): READ again,
 * open, its write recorded by the kernel as any other. */
void dsm_wp_warm(struct dsm *d, uint32_t page);

/* uffd-async: valid pages are open, the kernel records their writes. */
static inline bool dsm_uffd(const struct dsm *d)
{
	return d->write_detect == PMDSM_WRITE_UFFD_ASYNC;
}

/* uffd-wp: valid pages are open and armed, a first write faults to the
 * library's thread. */
static inline bool dsm_uffd_wp(const struct dsm *d)
{
	return d->write_detect == PMDSM_WRITE_UFFD_WP;
}

/* segv: a valid page is read-only until its first write faults. */
static inline bool dsm_segv(const struct dsm *d)
{
	return d->write_detect == PMDSM_WRITE_SEGV;
}

/* ---- sync.c ---- */

/*
 * Whether a diff of page, sent to this rank as its home, is to be applied
 * here.  Allocation takes no message, so a diff may come for a page this
 * rank has not allocated yet (UNUSED: the alias keeps it until the
 * allocation here), or for a first-touch page whose home this rank has
 * not heard of yet (UNHOMED): its manager's answer, which made this rank
 * the home, is on its way from the manager while the diff came from a
 * third rank that asked the same manager after it, and PM orders no
 * messages of different senders.  The sender's home is the manager's, so
 * the diff is for here then too.
 */
static inline bool dsm_diff_for_here(const struct dsm *d, uint32_t page)
{
	/* home[] is written on the service thread, which runs this. */
	return page < d->npages &&
	       (d->state[page] == PAGE_UNUSED || d->home[page] == d->rank ||
		d->home[page] == DSM_UNHOMED);
}

/* Release: diffs of written pages to their homes (acknowledged), written
 * pages protected again, their numbers added to epoch_notices. */
void dsm_release(struct dsm *d);
/* Acquire: drop cached pages named in set (a page written here since the
 * last release sends its diff first); written_since_release false: the
 * application has not run since (a barrier), nothing new to look for. */
void dsm_invalidate(struct dsm *d, const struct pageset *set, bool written_since_release);
int dsm_barrier(struct dsm *d);
int dsm_barrier_with(struct dsm *d, const struct dsm_peers *w);
/* The two halves of dsm_barrier_with, the application free to compute
 * between them (pmdsm_barrier_with_notify, pmdsm_barrier_with_wait). */
int dsm_barrier_notify(struct dsm *d, const struct dsm_peers *w);
int dsm_barrier_wait(struct dsm *d);
int dsm_lock(struct dsm *d, unsigned l);
int dsm_unlock(struct dsm *d, unsigned l);
/* A message of the protocol (comm.c's dispatcher calls it). */
void dsm_handle(struct dsm *d, int peer, const struct dsm_hdr *h,
		const uint8_t *payload, size_t len);
int dsm_sync_open(struct dsm *d);
void dsm_sync_close(struct dsm *d);

/* ---- time ---- */
uint64_t dsm_now_ns(void);

#endif /* DSM_INTERNAL_H */
