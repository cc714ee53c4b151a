/* SPDX-License-Identifier: MIT */
/*
 * home.c - what the home of a page answers for it: who the home is, and
 * watching the page before another rank's first copy.
 *
 * First-touch homes (PMDSM_FIRST_TOUCH): the rank that touches a page
 * first becomes its home (docs/dsm/design.md, "First touch").
 *
 * A page of a first-touch allocation starts with no home (DSM_UNHOMED) on
 * every rank.  Its *manager*, rank page % size, decides: the first rank
 * that asks it for the page's home while it has none becomes the home, and
 * every later ask gets that answer.  A rank asks at its first fault on the
 * page (claiming it) or through pmdsm_home() (only asking).  The manager's
 * own d->home[] is its record: one table serves as the manager's directory
 * and as its cache of homes, as everywhere else in the library.
 *
 * Runs on the service thread, like all the protocol.
 */
#include "dsm_internal.h"

#include <string.h>

static int manager_of(const struct dsm *d, uint32_t page)
{
	return (int)(page % (uint32_t)d->size);
}

/* The manager's answer: the page's home, given to `who` when it has none
 * and claim is set. */
static uint16_t decide(struct dsm *d, uint32_t page, int who, bool claim)
{
	/* Atomic: the application thread reads it (fault.c, pmdsm_home). */
	if (d->home[page] == DSM_UNHOMED && claim)
		__atomic_store_n(&d->home[page], (uint16_t)who, __ATOMIC_RELAXED);
	return d->home[page];
}

static bool home_known(struct dsm *d, const void *arg)
{
	const struct dsm_home_query *q = arg;

	(void)d;
	return q->answered;
}

int dsm_home_resolve(struct dsm *d, void *arg)
{
	struct dsm_home_query *q = arg;
	int mgr = manager_of(d, q->page);

	if (d->home[q->page] != DSM_UNHOMED)
		return d->home[q->page];
	if (mgr == d->rank)
		return decide(d, q->page, d->rank, q->claim);

	uint32_t claim = q->claim;

	q->answered = false;
	d->home_query = q;
	dsm_send(d, mgr, MSG_HOME_ASK, q->page, &claim, sizeof(claim));
	d->st->home_asks++;
	dsm_wait_until(d, home_known, q);
	d->home_query = NULL;
	/* Kept: a page's home never changes while it is allocated. */
	if (q->home != DSM_UNHOMED)
		__atomic_store_n(&d->home[q->page], q->home, __ATOMIC_RELAXED);
	return q->home;
}

void dsm_on_home_ask(struct dsm *d, int peer, uint32_t page, const uint8_t *p, size_t len)
{
	uint32_t claim, home;

	if (len != sizeof(claim) || page >= d->npages || manager_of(d, page) != d->rank) {
		dsm_log("dropped a malformed question for the home of page %u from rank %d",
			page, peer);
		d->st->dropped++;
		return;
	}
	memcpy(&claim, p, sizeof(claim));
	/* Allocation takes no message: the asker may have allocated the page
	 * before this rank did.  Its home is decided all the same; this
	 * rank's own allocation keeps it (heap.c). */
	home = decide(d, page, peer, claim != 0);
	dsm_send(d, peer, MSG_HOME_IS, page, &home, sizeof(home));
}

void dsm_on_home_is(struct dsm *d, int peer, uint32_t page, const uint8_t *p, size_t len)
{
	struct dsm_home_query *q = d->home_query;
	uint32_t home;

	if (len != sizeof(home) || !q || q->page != page || manager_of(d, page) != peer) {
		dsm_log("dropped an unasked answer for the home of page %u from rank %d", page,
			peer);
		d->st->dropped++;
		return;
	}
	memcpy(&home, p, sizeof(home));
	if (home != DSM_UNHOMED && home >= (uint32_t)d->size) {
		dsm_log("dropped an answer naming rank %u the home of page %u", home, page);
		d->st->dropped++;
		return;
	}
	q->home = (uint16_t)home;
	q->answered = true;
}

/*
 * Watching before the first copy (docs/dsm/design.md, "Pages no other rank
 * copies").  A page homed here that no other rank has copied is OWN: open,
 * its writes unwatched.  Before a rank first copies pages from us it asks
 * us to watch them, and waits for the answer: a write of ours before the
 * arming is in the copy (taken after the answer), and one after it is
 * seen and named in a notice as any other.  A page not allocated here yet
 * is left to the copied byte the same fetch writes (sync.c,
 * share_home_pages), as is one whose home runs an older build.
 */
static bool watch_answered(struct dsm *d, const void *arg)
{
	(void)arg;
	return d->watch_asked == UINT32_MAX;
}

void dsm_watch_ask(struct dsm *d, uint32_t first, uint32_t n)
{
	d->watch_asked = first;
	dsm_send(d, d->home[first], MSG_WATCH, first, &n, sizeof(n));
	dsm_wait_until(d, watch_answered, NULL);
}

void dsm_on_watch(struct dsm *d, int peer, uint32_t first, const uint8_t *p, size_t len)
{
	uint32_t n;

	if (len != sizeof(n)) {
		dsm_log("dropped a malformed request to watch pages from rank %d", peer);
		d->st->dropped++;
		return;
	}
	memcpy(&n, p, sizeof(n));
	if (n == 0 || first >= d->npages || n > d->npages - first) {
		dsm_log("dropped a request to watch pages %u..+%u from rank %d: beyond the heap",
			first, n, peer);
		d->st->dropped++;
		return;
	}
	for (uint32_t q = first; q < first + n;) {
		uint32_t run = 0;

		while (q + run < first + n && d->home[q + run] == d->rank &&
		       d->state[q + run] == PAGE_OWN)
			run++;
		if (!run) {
			q++;
			continue;
		}
		/* The application reads states without a lock (fault.c). */
		for (uint32_t k = q; k < q + run; k++)
			__atomic_store_n(&d->state[k], PAGE_READ, __ATOMIC_RELEASE);
		dsm_watch(d, q, run);
		d->nown -= run;
		d->st->home_shared += run;
		q += run;
	}
	dsm_send(d, peer, MSG_WATCHING, first, NULL, 0);
}

void dsm_on_watching(struct dsm *d, int peer, uint32_t first)
{
	if (d->watch_asked != first || d->home[first] != peer) {
		dsm_log("dropped an unasked answer to watch page %u from rank %d", first, peer);
		d->st->dropped++;
		return;
	}
	d->watch_asked = UINT32_MAX;
}
