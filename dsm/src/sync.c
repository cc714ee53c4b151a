/* SPDX-License-Identifier: MIT */
/*
 * sync.c - home-based lazy release consistency (docs/dsm/design.md).
 *
 * Release (unlock, barrier arrival): the diff of every page written since
 * the last release goes to the page's home, which applies it and
 * acknowledges; once all are acknowledged the written pages are protected
 * again and named in the rank's write notices of this epoch.
 *
 * Acquire (lock grant, barrier departure): the pages named in the notices
 * the acquire brings are dropped from this rank's cache (a page homed here
 * is always current), so that the next access fetches them from home.
 *
 * Barrier: rank 0 collects every rank's notices of the epoch and sends
 * their union with the departure; afterwards every page is current
 * everywhere, so notices start over (the epoch counts barriers).
 *
 * Locks: lock l's manager, rank l % size, queues requests and keeps the
 * union of the notices its releasers passed on in the epoch; a grant
 * carries them.  A rank passes on everything it knows written this epoch
 * (its own writes and what its acquires brought), so that what happened
 * before a release reaches whoever acquires after it, transitively.
 *
 * Barriers among a few ranks (pmdsm_barrier_with): each passes to each
 * peer its own writes not yet told to that peer, and waits for the peers'
 * arrivals; what they bring is dropped as a barrier's departure is.  Only
 * the ranks' own writes travel, not what they had heard of: passed on, a
 * page would go round a ring of neighbours for ever (nothing here orders
 * two notices of one page), and a stencil reads only what its neighbours
 * wrote.  A barrier of all makes them moot, as it does a lock's.
 */
#include "dsm_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int dsm_sync_open(struct dsm *d)
{
	int err = 0;

	d->granted_lock = -1;
	d->locks = calloc(PMDSM_LOCKS, sizeof(*d->locks));
	d->held = calloc(PMDSM_LOCKS, 1);
	if (!d->locks || !d->held)
		return -ENOMEM;
	for (unsigned l = (unsigned)d->rank; l < PMDSM_LOCKS; l += (unsigned)d->size) {
		struct dsm_lock_mgr *L = &d->locks[l];

		L->holder = -1;
		L->wait = calloc((size_t)d->size, sizeof(*L->wait));
		if (!L->wait)
			return -ENOMEM;
		/* The notice sets of locks are made on first release. */
	}
	/* Diff batches, one per home; the buffers are address space until a
	 * release writes to a home (calloc of this size maps zero pages). */
	size_t room = d->max_msg > sizeof(struct dsm_hdr) ? d->max_msg - sizeof(struct dsm_hdr) : 0;

	d->batch_cap = room < DSM_DIFF_BATCH ? (uint32_t)room : DSM_DIFF_BATCH;
	d->batches = calloc((size_t)d->size, sizeof(*d->batches));
	d->batched = calloc((size_t)d->size, sizeof(*d->batched));
	d->batch_bufs = calloc((size_t)d->size, DSM_DIFF_BATCH);
	if (!d->batches || !d->batched || !d->batch_bufs)
		return -ENOMEM;
	d->prefetch = calloc(d->prefetch_max ? d->prefetch_max : 1, sizeof(*d->prefetch));
	if (!d->prefetch)
		return -ENOMEM;
	err = pageset_init(&d->dirty, d->npages);
	err = err ?: pageset_init(&d->told, d->npages);
	d->watch_asked = UINT32_MAX;
	err = err ?: pageset_init(&d->cool, d->npages);
	err = err ?: pageset_init(&d->epoch_notices, d->npages);
	err = err ?: pageset_init(&d->mgr_union, d->npages);
	err = err ?: pageset_init(&d->depart_notices, d->npages);
	err = err ?: pageset_init(&d->grant_notices, d->npages);
	err = err ?: pageset_init(&d->own_notices, d->npages);
	err = err ?: pageset_init(&d->peer_notices, d->npages);
	err = err ?: pageset_init(&d->peer_departing, d->npages);
	if (err)
		return err;
	d->owed = calloc((size_t)d->size, sizeof(*d->owed));
	d->met = calloc((size_t)d->size, sizeof(*d->met));
	d->peer_calls = calloc((size_t)d->size, sizeof(*d->peer_calls));
	d->peer_arrivals = calloc((size_t)d->size, sizeof(*d->peer_arrivals));
	d->notify_peers = calloc((size_t)d->size, sizeof(*d->notify_peers));
	if (!d->owed || !d->met || !d->peer_calls || !d->peer_arrivals || !d->notify_peers)
		return -ENOMEM;
	return dsm_push_open(d);
}

void dsm_sync_close(struct dsm *d)
{
	if (d->locks) {
		for (unsigned l = 0; l < PMDSM_LOCKS; l++) {
			free(d->locks[l].wait);
			pageset_fini(&d->locks[l].notices);
		}
	}
	DSM_FREE(d->locks);
	DSM_FREE(d->held);
	DSM_FREE(d->batches);
	DSM_FREE(d->batched);
	DSM_FREE(d->batch_bufs);
	DSM_FREE(d->prefetch);
	pageset_fini(&d->dirty);
	pageset_fini(&d->told);
	pageset_fini(&d->cool);
	pageset_fini(&d->epoch_notices);
	pageset_fini(&d->mgr_union);
	pageset_fini(&d->depart_notices);
	pageset_fini(&d->grant_notices);
	pageset_fini(&d->own_notices);
	pageset_fini(&d->peer_notices);
	pageset_fini(&d->peer_departing);
	for (uint32_t i = 0; d->owed && i < d->nmet; i++)
		pageset_fini(&d->owed[d->met[i]]);
	DSM_FREE(d->owed);
	DSM_FREE(d->met);
	DSM_FREE(d->peer_calls);
	DSM_FREE(d->peer_arrivals);
	DSM_FREE(d->notify_peers);
	d->nmet = 0;
	dsm_push_close(d);
}

/* ---- release and acquire ---- */

/* A page this rank wrote (or, homed here, may have written unwatched):
 * named in what its releases pass on, to the lock or barrier of all, and
 * owed to every peer it has met in a barrier of a few. */
static void note_own_write(struct dsm *d, uint32_t page)
{
	pageset_add(&d->epoch_notices, page);
	pageset_add(&d->own_notices, page);
	if (d->home[page] != d->rank)
		dsm_push_refuse(d, page);
	for (uint32_t i = 0; i < d->nmet; i++)
		pageset_add(&d->owed[d->met[i]], page);
}

/*
 * Diffs travel in batches, one message per home: a release that wrote 256
 * pages homed at one rank sends it one message (or a few) and gets one
 * acknowledgement each, not 256 of both; on a network device every
 * message is a system call at each end.  A rank's batch for a home fills
 * in place (per home, DSM_DIFF_BATCH bytes at most) and goes when full or
 * when the release or invalidation that made it ends (dsm_flush_diffs).
 */
static void flush_batch(struct dsm *d, int home)
{
	struct dsm_batch *b = &d->batches[home];

	if (!b->n)
		return;
	dsm_send(d, home, MSG_DIFF, b->n, dsm_batch_buf(d, home), b->len);
	d->diffs_unacked += b->n;
	b->n = 0;
	b->len = 0;
}

static void dsm_flush_diffs(struct dsm *d)
{
	for (uint32_t i = 0; i < d->nbatched; i++) {
		flush_batch(d, d->batched[i]);
		d->batches[d->batched[i]].queued = false;
	}
	d->nbatched = 0;
}

/* The diff of page into its home's batch (nothing if the page was written
 * back to what it was); with sync_twin the twin takes the page's new bytes
 * too and is the next diff's baseline (a page that stays open). */
static void add_diff(struct dsm *d, uint32_t page, bool sync_twin)
{
	int home = d->home[page];
	struct dsm_batch *b = &d->batches[home];

	if (b->len + DIFF_ENTRY_MAX > d->batch_cap)
		flush_batch(d, home);

	uint8_t *out = dsm_batch_buf(d, home) + b->len;
	size_t n = sync_twin ? dsm_diff_entry_make_sync(page, dsm_page_alias(d, page),
						       dsm_page_twin(d, page), out)
			     : dsm_diff_entry_make(page, dsm_page_alias(d, page),
						   dsm_page_twin(d, page), out);

	if (n == 0)
		return;
	b->len += (uint32_t)n;
	b->n++;
	if (!b->queued) {
		b->queued = true;
		d->batched[d->nbatched++] = home;
	}
	d->st->diffs_sent++;
	d->st->diff_bytes += n - DIFF_ENTRY_HDR;
}

static bool diffs_acked(struct dsm *d, const void *arg)
{
	(void)arg;
	return d->diffs_unacked == 0;
}

/*
 * Pages homed here that another rank has fetched since we last looked,
 * still OWN: copied before this rank allocated them (a copy after it asks
 * us to watch the pages first: home.c, WATCH).  The copier set their byte
 * in our `copied` table (a remote write) before its read,
 * and PM applies one peer's remote operations in order, so the byte was
 * there before the copy was taken.  From now on their writes are watched,
 * so that their notices reach the copy; and what we wrote to them unwatched
 * may be newer than the copy (written after it was taken), so they are
 * named in this release's notices, once, whether written or not.
 */
static void share_home_pages(struct dsm *d)
{
	if (!d->nown)
		return;
	atomic_thread_fence(memory_order_acquire);

	/* The copied table eight bytes at a time (bytescan.h): of a large
	 * heap, few pages are copied. */
	const uint8_t *copied = (const uint8_t *)(uintptr_t)d->copied;

	for (uint32_t i = 0; i < d->nextents; i++) {
		const struct dsm_extent *e = &d->extents[i];
		uint32_t end = e->first + e->pages;

		for (uint32_t p = e->first; e->used && p < end;) {
			uint32_t run = 0;

			p = (uint32_t)bytescan_find(copied, p, end, 0xff, 0, false);
			while (p + run < end && d->state[p + run] == PAGE_OWN && copied[p + run])
				run++;
			if (!run) {
				p++;
				continue;
			}
			for (uint32_t q = p; q < p + run; q++) {
				d->state[q] = PAGE_READ;
				note_own_write(d, q);
			}
			dsm_watch(d, p, run);
			d->nown -= run;
			d->st->home_shared += run;
			p += run;
		}
	}
}

void dsm_release(struct dsm *d)
{
	uint64_t t0 = dsm_now_ns();

	/* A release or an acquire changes pages' states: first the last
	 * barrier's prefetches in flight land (dsm_prefetch). */
	dsm_prefetch_drain(d);
	share_home_pages(d);

	/* uffd-async: the kernel's record, protected again by the same call;
	 * the pages stay open and their twins become the next baseline.
	 * segv and uffd-wp: the pages are watched again, a run of them per
	 * call (read-only, or armed). */
	if (dsm_uffd(d))
		dsm_wp_collect(d);
	for (uint32_t p = pageset_next(&d->dirty, 0); p != PAGESET_NONE;) {
		uint32_t run = 0;

		while (pageset_has(&d->dirty, p + run)) {
			uint32_t q = p + run;

			/* uffd-async's pages stay open: the diff brings
			 * their twins up to date as it goes.  Written: not
			 * cold (dsm_wp_cool). */
			if (d->home[q] != d->rank)
				add_diff(d, q, dsm_uffd(d));
			pageset_del(&d->cool, q);
			if (!dsm_uffd(d))
				d->state[q] = PAGE_READ;
			note_own_write(d, q);
			run++;
		}
		if (!dsm_uffd(d))
			dsm_watch(d, p, run);
		p = pageset_next(&d->dirty, p + run);
	}
	pageset_clear(&d->dirty);
	dsm_flush_diffs(d);
	dsm_wait_until(d, diffs_acked, NULL);
	if (dsm_uffd(d))
		dsm_wp_cool(d);
	d->st->release_ns += dsm_now_ns() - t0;
}

void dsm_invalidate(struct dsm *d, const struct pageset *set, bool written_since_release)
{
	bool flushed = false;
	struct dsm_protect_runs closing = { .prot = PROT_NONE };

	dsm_prefetch_drain(d);

	/* uffd-async: which of the pages it drops were written since the last
	 * release is the kernel's to tell, unless nothing ran since (a
	 * barrier).  Only those are asked for: the others' writes stay
	 * recorded until the next release's scan. */
	if (dsm_uffd(d) && set->count && written_since_release)
		dsm_wp_collect_set(d, set);
	for (uint32_t p = pageset_next(set, 0); p != PAGESET_NONE; p = pageset_next(set, p + 1)) {
		if (d->home[p] == d->rank || d->state[p] == PAGE_INVALID ||
		    d->state[p] == PAGE_UNUSED)
			continue;
		if (pageset_has(&d->dirty, p)) {
			/* Written here since our last release: its diff goes
			 * home first, then the page is fetched merged. */
			add_diff(d, p, false);
			pageset_del(&d->dirty, p);
			note_own_write(d, p);
			flushed = true;
		}
		d->state[p] = PAGE_INVALID;
		pageset_del(&d->cool, p);
		d->st->invalidations++;
		dsm_protect_add(d, &closing, p);
	}
	dsm_protect_flush(d, &closing);
	if (flushed) {
		dsm_flush_diffs(d);
		dsm_wait_until(d, diffs_acked, NULL);
	}
}

/* ---- barriers ---- */

/*
 * Prefetch at a barrier: the pages this rank had valid that the departure's
 * notices drop (at most prefetch_max), which it is likely to read again:
 * a stencil's boundary rows in every sweep.  Fetched before the barrier
 * returns, while the other ranks are in it too, their service threads
 * polling, rather than at a read fault while the home's application
 * computes and its service thread waits for the core (docs/dsm/design.md,
 * "Prefetch at barriers").  Coherent as any fetch after the acquire.
 */
static uint32_t prefetch_list(struct dsm *d, const struct pageset *drop)
{
	uint32_t n = 0;

	for (uint32_t p = pageset_next(drop, 0); p != PAGESET_NONE && n < d->prefetch_max;
	     p = pageset_next(drop, p + 1))
		if (d->home[p] != d->rank && (d->state[p] == PAGE_READ ||
					       d->state[p] == PAGE_WRITE || d->state[p] == PAGE_COLD))
			d->prefetch[n++] = p;
	return n;
}

/* Of pages, those still INVALID (not taken from a push), in order. */
static uint32_t still_invalid(const struct dsm *d, uint32_t *pages, uint32_t n)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n; i++)
		if (d->state[pages[i]] == PAGE_INVALID)
			pages[k++] = pages[i];
	return k;
}

/* An acquire that ends a barrier (of all, or of a few: then w names the
 * peers): the pages the notices name are dropped, and those of them this
 * rank had valid are fetched again, or taken from the peers' pushes.
 * Unless the barrier was split (written), the application has waited in
 * it since its release: nothing it wrote since needs the kernel's word. */
static void depart(struct dsm *d, struct pageset *notices, const struct dsm_peers *w,
		   bool written)
{
	uint32_t again = prefetch_list(d, notices);

	if (again)
		d->prefetch_open = d->prefetch_departures++ % DSM_PREFETCH_PROBE != 0;
	if (w)
		dsm_push_lapse(d, w, notices);

	dsm_invalidate(d, notices, written);
	if (w) {
		dsm_push_take(d, notices);
		again = still_invalid(d, d->prefetch, again);
	}
	dsm_prefetch(d, d->prefetch, again);
	if (w)
		dsm_push_subscribe(d, w, d->prefetch, again);
	pageset_clear(notices);
}

/* Rank 0: every rank arrived: the union of their notices goes out with
 * the departure. */
static void barrier_complete(struct dsm *d)
{
	for (int r = 1; r < d->size; r++) {
		dsm_send_sync(d, r, MSG_BARRIER_DEPART, d->mgr_epoch, DSM_NOTICE_BARRIER,
			      d->mgr_epoch, &d->mgr_union);
	}
	pageset_union(&d->depart_notices, &d->mgr_union);
	pageset_clear(&d->mgr_union);
	d->mgr_arrived = 0;
	d->mgr_epoch++;
	d->departed = true;
}

static void barrier_arrival(struct dsm *d, int from, uint32_t epoch)
{
	if (epoch != d->mgr_epoch) {
		dsm_log("dropped rank %d's arrival at barrier %u while counting barrier %u", from,
			epoch, d->mgr_epoch);
		d->st->dropped++;
		return;
	}
	if (++d->mgr_arrived == (uint32_t)d->size)
		barrier_complete(d);
}

static bool departed(struct dsm *d, const void *arg)
{
	(void)arg;
	return d->departed;
}

int dsm_barrier(struct dsm *d)
{
	uint64_t t0 = dsm_now_ns();

	dsm_release(d);
	d->departed = false;
	if (d->rank == 0) {
		pageset_union(&d->mgr_union, &d->epoch_notices);
		barrier_arrival(d, 0, d->epoch);
	} else {
		dsm_send_sync(d, 0, MSG_BARRIER_ARRIVE, d->epoch, DSM_NOTICE_BARRIER, d->epoch,
			      &d->epoch_notices);
	}
	dsm_wait_until(d, departed, NULL);
	depart(d, &d->depart_notices, NULL, false);
	/* Every page is current everywhere: nothing is owed to anyone.  (The
	 * notices of barriers of a few already here are a peer's next one's:
	 * they stay.) */
	pageset_clear(&d->epoch_notices);
	pageset_clear(&d->own_notices);
	for (uint32_t i = 0; i < d->nmet; i++)
		pageset_clear(&d->owed[d->met[i]]);
	d->epoch++;
	d->st->barriers++;
	d->st->barrier_ns += dsm_now_ns() - t0;
	return 0;
}

/* ---- barriers of a few ---- */

/* What this rank owes peer: made from this epoch's own writes when they
 * first meet, kept up by note_own_write from then on. */
static struct pageset *owed_to(struct dsm *d, int peer)
{
	struct pageset *o = &d->owed[peer];

	if (!o->bits) {
		if (pageset_init(o, d->npages))
			dsm_fatal("no memory for the notices owed to rank %d", peer);
		pageset_union(o, &d->own_notices);
		d->met[d->nmet++] = peer;
	}
	return o;
}

static bool peers_arrived(struct dsm *d, const void *arg)
{
	const struct dsm_peers *w = arg;

	for (unsigned i = 0; i < w->n; i++)
		if (d->peer_arrivals[w->peers[i]] < d->peer_calls[w->peers[i]])
			return false;
	return true;
}

/* The departure of a barrier of a few begun by dsm_barrier_notify. */
static int peer_depart(struct dsm *d, bool written)
{
	struct dsm_peers w = { d->notify_peers, d->notify_n };
	uint64_t t0 = dsm_now_ns();

	dsm_wait_until(d, peers_arrived, &w);
	d->notified = false;

	/* The notices here now are this departure's; those that come while
	 * it fetches (a peer already at its next meeting) are the next one's. */
	struct pageset departing = d->peer_notices;

	d->peer_notices = d->peer_departing;
	d->peer_departing = departing;
	/* What the peers wrote is passed on by our next release to a lock,
	 * as a grant's notices are. */
	pageset_union(&d->epoch_notices, &d->peer_departing);
	depart(d, &d->peer_departing, &w, written);
	d->st->peer_barriers++;
	d->st->peer_barrier_ns += dsm_now_ns() - t0;
	return 0;
}

/* The arrival: the peers are checked (pmdsm.c), and kept for the wait. */
int dsm_barrier_notify(struct dsm *d, const struct dsm_peers *w)
{
	uint64_t t0 = dsm_now_ns();

	dsm_release(d);
	for (unsigned i = 0; i < w->n; i++) {
		int peer = w->peers[i];
		struct pageset *o = owed_to(d, peer);

		dsm_push_to(d, peer, o);
		dsm_send_sync(d, peer, MSG_PEER_ARRIVE, ++d->peer_calls[peer], DSM_NOTICE_PEER,
			      d->epoch, o);
		pageset_clear(o);
		d->notify_peers[i] = peer;
	}
	d->notify_n = w->n;
	d->notified = true;
	/* The time in the barrier: in its notify and in its wait, not in
	 * what the application computes between them. */
	d->st->peer_barrier_ns += dsm_now_ns() - t0;
	return 0;
}

/* The departure, once the peers of the notify have arrived: the
 * application may have computed, and written, since its release. */
int dsm_barrier_wait(struct dsm *d)
{
	return peer_depart(d, true);
}

int dsm_barrier_with(struct dsm *d, const struct dsm_peers *w)
{
	dsm_barrier_notify(d, w);
	return peer_depart(d, false);
}

/* ---- locks ---- */

static int lock_manager(const struct dsm *d, unsigned l)
{
	return (int)(l % (unsigned)d->size);
}

/* Add notices a releaser of L passed on in epoch. */
static int lock_add_notices(struct dsm *d, struct dsm_lock_mgr *L, uint32_t epoch,
			    const uint8_t *runs, size_t len, const struct pageset *set)
{
	if (!L->notices.bits) {
		int err = pageset_init(&L->notices, d->npages);

		if (err)
			dsm_fatal("no memory for the notices of a lock");
	}
	if (epoch < L->epoch)
		return 0;       /* a barrier since has made them moot */
	if (epoch > L->epoch) {
		pageset_clear(&L->notices);
		L->epoch = epoch;
	}
	if (set) {
		pageset_union(&L->notices, set);
		return 0;
	}
	return pageset_decode(&L->notices, runs, len);
}

static void lock_grant(struct dsm *d, unsigned l, int to)
{
	struct dsm_lock_mgr *L = &d->locks[l];

	L->holder = to;
	if (to == d->rank) {
		if (L->notices.bits && L->epoch == d->epoch)
			pageset_union(&d->grant_notices, &L->notices);
		d->granted_lock = (int32_t)l;
		return;
	}
	dsm_send_sync(d, to, MSG_LOCK_GRANT, l, l, L->epoch, &L->notices);
}

static void lock_request(struct dsm *d, unsigned l, int from)
{
	struct dsm_lock_mgr *L = &d->locks[l];

	if (L->holder < 0) {
		lock_grant(d, l, from);
		return;
	}
	L->wait[(L->head + L->nwait) % (uint32_t)d->size] = from;
	L->nwait++;
}

static void lock_release(struct dsm *d, unsigned l, int from)
{
	struct dsm_lock_mgr *L = &d->locks[l];

	if (L->holder != from) {
		dsm_log("dropped a release of lock %u by rank %d, which does not hold it", l, from);
		d->st->dropped++;
		return;
	}
	L->holder = -1;
	if (L->nwait) {
		int next = L->wait[L->head];

		L->head = (L->head + 1) % (uint32_t)d->size;
		L->nwait--;
		lock_grant(d, l, next);
	}
}

static bool granted(struct dsm *d, const void *arg)
{
	return d->granted_lock == (int32_t)*(const unsigned *)arg;
}

int dsm_lock(struct dsm *d, unsigned l)
{
	if (l >= PMDSM_LOCKS)
		return -EINVAL;
	if (d->held[l])
		return -EDEADLK;

	uint64_t t0 = dsm_now_ns();
	int mgr = lock_manager(d, l);

	if (mgr == d->rank) {
		lock_request(d, l, d->rank);
	} else {
		dsm_send(d, mgr, MSG_LOCK_ACQUIRE, l, NULL, 0);
		d->st->lock_remote++;
	}
	dsm_wait_until(d, granted, &l);
	d->granted_lock = -1;
	dsm_invalidate(d, &d->grant_notices, true);
	/* Written by whom the grant does not say: never taken from a push. */
	pageset_union(&d->no_push, &d->grant_notices);
	/* What came before the grant is passed on by our next release. */
	pageset_union(&d->epoch_notices, &d->grant_notices);
	pageset_clear(&d->grant_notices);
	d->held[l] = 1;
	d->st->locks++;
	d->st->lock_ns += dsm_now_ns() - t0;
	return 0;
}

int dsm_unlock(struct dsm *d, unsigned l)
{
	if (l >= PMDSM_LOCKS)
		return -EINVAL;
	if (!d->held[l])
		return -EPERM;

	uint64_t t0 = dsm_now_ns();
	int mgr = lock_manager(d, l);

	dsm_release(d);
	if (mgr == d->rank) {
		lock_add_notices(d, &d->locks[l], d->epoch, NULL, 0, &d->epoch_notices);
		lock_release(d, l, d->rank);
	} else {
		dsm_send_sync(d, mgr, MSG_LOCK_RELEASE, l, l, d->epoch, &d->epoch_notices);
	}
	d->held[l] = 0;
	d->st->lock_ns += dsm_now_ns() - t0;
	return 0;
}

/* ---- the dispatcher's half ---- */

/* A batch of n diffs (arg) from peer: each applied to the page it names
 * if that page is homed here; then one acknowledgement of all n. */
static void handle_diffs(struct dsm *d, int peer, uint32_t n, const uint8_t *p, size_t len)
{
	size_t off = 0;
	uint32_t page, seen = 0;
	const uint8_t *diff;
	size_t diff_len;
	int more;

	while ((more = dsm_diff_entry_next(p, len, &off, &page, &diff, &diff_len)) == 1) {
		seen++;
		if (!dsm_diff_for_here(d, page) ||
		    dsm_diff_apply(dsm_page_alias(d, page), diff, diff_len) < 0) {
			dsm_log("dropped a diff of page %u from rank %d: not homed here, or "
				"malformed", page, peer);
			d->st->dropped++;
		} else {
			d->st->diffs_applied++;
		}
	}
	if (more < 0 || seen != n) {
		dsm_log("dropped the end of a batch of diffs from rank %d: %u of %u entries "
			"whole", peer, seen, n);
		d->st->dropped++;
	}
	/* All n acknowledged either way: the sender must not wait forever. */
	dsm_send(d, peer, MSG_DIFF_ACK, n, NULL, 0);
}

/* A peer's notices (unless a barrier of all came since: moot).  A page it
 * names that is not homed there has a writer other than its home: never
 * taken from a push (push.c). */
static int peer_notices(struct dsm *d, int peer, const uint8_t *p, size_t len)
{
	int err = pageset_decode(&d->scratch, p, len);

	for (uint32_t q = pageset_next(&d->scratch, 0); !err && q != PAGESET_NONE;
	     q = pageset_next(&d->scratch, q + 1))
		if (d->home[q] != peer)
			dsm_push_refuse(d, q);
	if (!err)
		pageset_union(&d->peer_notices, &d->scratch);
	pageset_clear(&d->scratch);
	return err;
}

static void handle_notices(struct dsm *d, int peer, const struct dsm_hdr *h, const uint8_t *p,
			   size_t len)
{
	int err;

	if (h->arg == DSM_NOTICE_BARRIER)
		err = pageset_decode(d->rank == 0 ? &d->mgr_union : &d->depart_notices, p, len);
	else if (h->arg == DSM_NOTICE_PEER)
		err = h->epoch < d->epoch ? 0 : peer_notices(d, peer, p, len);
	else if (h->arg >= PMDSM_LOCKS)
		err = -EINVAL;
	else if (lock_manager(d, h->arg) == d->rank)
		err = lock_add_notices(d, &d->locks[h->arg], h->epoch, p, len, NULL);
	else
		/* A grant's notices; moot if a barrier came since. */
		err = h->epoch < d->epoch ? 0 : pageset_decode(&d->grant_notices, p, len);
	if (err) {
		dsm_log("dropped malformed notices from rank %d", peer);
		d->st->dropped++;
	}
}

/* The notices a synchronisation message carries (dsm_send_sync), taken
 * as a NOTICES message tagged tag would be, before the message itself. */
static void carried_notices(struct dsm *d, int peer, const struct dsm_hdr *h, uint32_t tag,
			    const uint8_t *p, size_t len)
{
	struct dsm_hdr notices = { .type = MSG_NOTICES, .arg = tag, .epoch = h->epoch };

	if (len)
		handle_notices(d, peer, &notices, p, len);
}

void dsm_handle(struct dsm *d, int peer, const struct dsm_hdr *h, const uint8_t *p, size_t len)
{
	bool managed = h->arg < PMDSM_LOCKS && lock_manager(d, h->arg) == d->rank;

	switch (h->type) {
	case MSG_HELLO:
		if (len == 2 * sizeof(uint64_t) && peer != d->rank) {
			memcpy(&d->rkeys[peer], p, sizeof(uint64_t));
			memcpy(&d->copied_keys[peer], p + sizeof(uint64_t), sizeof(uint64_t));
			d->hello_seen++;
		} else {
			dsm_log("dropped a malformed hello from rank %d", peer);
			d->st->dropped++;
		}
		return;
	case MSG_DIFF:
		handle_diffs(d, peer, h->arg, p, len);
		return;
	case MSG_DIFF_ACK:
		if (h->arg <= d->diffs_unacked)
			d->diffs_unacked -= h->arg;
		return;
	case MSG_NOTICES:
		handle_notices(d, peer, h, p, len);
		return;
	case MSG_BARRIER_ARRIVE:
		if (d->rank == 0) {
			carried_notices(d, peer, h, DSM_NOTICE_BARRIER, p, len);
			barrier_arrival(d, peer, h->arg);
		}
		return;
	case MSG_BARRIER_DEPART:
		carried_notices(d, peer, h, DSM_NOTICE_BARRIER, p, len);
		d->departed = true;
		return;
	case MSG_LOCK_ACQUIRE:
		if (managed) {
			lock_request(d, h->arg, peer);
		} else {
			dsm_log("dropped a request for lock %u, not managed here", h->arg);
			d->st->dropped++;
		}
		return;
	case MSG_LOCK_GRANT:
		carried_notices(d, peer, h, h->arg, p, len);
		d->granted_lock = (int32_t)h->arg;
		return;
	case MSG_LOCK_RELEASE:
		if (managed) {
			carried_notices(d, peer, h, h->arg, p, len);
			lock_release(d, h->arg, peer);
		} else {
			dsm_log("dropped a release of lock %u, not managed here", h->arg);
			d->st->dropped++;
		}
		return;
	case MSG_BYE:
		d->bye_seen++;
		return;
	case MSG_SUBSCRIBE:
	case MSG_UNSUBSCRIBE:
		dsm_on_subscribe(d, peer, h->type == MSG_SUBSCRIBE, p, len);
		return;
	case MSG_PUSH:
		dsm_on_push(d, peer, h, p, len);
		return;
	case MSG_PEER_ARRIVE:
		if (h->arg == d->peer_arrivals[peer] + 1) {
			carried_notices(d, peer, h, DSM_NOTICE_PEER, p, len);
			d->peer_arrivals[peer] = h->arg;
		} else {
			dsm_log("dropped rank %d's arrival %u at a barrier of a few: %u came before",
				peer, h->arg, d->peer_arrivals[peer]);
			d->st->dropped++;
		}
		return;
	case MSG_HOME_ASK:
		dsm_on_home_ask(d, peer, h->arg, p, len);
		return;
	case MSG_HOME_IS:
		dsm_on_home_is(d, peer, h->arg, p, len);
		return;
	case MSG_WATCH:
		dsm_on_watch(d, peer, h->arg, p, len);
		return;
	case MSG_WATCHING:
		dsm_on_watching(d, peer, h->arg);
		return;
	default:
		dsm_log("dropped a message of unknown type %u from rank %d", h->type, peer);
		d->st->dropped++;
	}
}
