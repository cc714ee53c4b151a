/* SPDX-License-Identifier: MIT */
/*
 * The protocol's receiving half without PM: malformed or misdirected
 * messages are dropped and counted and change nothing; well-formed ones
 * change what they should.  (Handlers that answer, DIFF, WATCH and a
 * lock's grant to another rank, need PM and are covered by the mpirun
 * tests.)
 */
#include "check.h"
#include "dsm_internal.h"

#include <stdlib.h>
#include <string.h>

static void handle(struct dsm *d, int peer, uint8_t type, uint32_t arg, uint32_t epoch,
		   const void *payload, size_t len)
{
	struct dsm_hdr h = { .type = type, .arg = arg, .epoch = epoch };

	dsm_handle(d, peer, &h, payload, len);
}

int main(void)
{
	struct dsm *d = calloc(1, sizeof(*d));

	CHECK(d != NULL);
	d->rank = 1;
	d->size = 2;
	d->npages = 64;
	d->st = &d->own_stats;
	d->state = calloc(d->npages, 1);
	d->home = calloc(d->npages, sizeof(*d->home));
	d->rkeys = calloc(2, sizeof(*d->rkeys));
	d->copied_keys = calloc(2, sizeof(*d->copied_keys));
	CHECK_OK(dsm_sync_open(d));
	dsm_ctx = d;

	/* A hello of the wrong size (the first version's one key): dropped,
	 * no key.  Then the alias's key and the copied table's. */
	uint64_t keys[2] = { 0x1234, 0x5678 };

	handle(d, 0, MSG_HELLO, 0, 0, keys, sizeof(keys[0]));
	CHECK_EQ(d->st->dropped, 1);
	CHECK_EQ(d->hello_seen, 0);
	handle(d, 0, MSG_HELLO, 0, 0, keys, sizeof(keys));
	CHECK_EQ(d->hello_seen, 1);
	CHECK_U64(d->rkeys[0], ==, 0x1234);
	CHECK_U64(d->copied_keys[0], ==, 0x5678);

	/* Notices: a partial run, a page beyond the heap, a lock out of range. */
	uint8_t partial[5] = { 1, 0, 0, 0, 1 };
	uint8_t beyond[8] = { 60, 0, 0, 0, 10, 0, 0, 0 };

	handle(d, 0, MSG_NOTICES, DSM_NOTICE_BARRIER, 0, partial, sizeof(partial));
	handle(d, 0, MSG_NOTICES, DSM_NOTICE_BARRIER, 0, beyond, sizeof(beyond));
	handle(d, 0, MSG_NOTICES, PMDSM_LOCKS + 7, 0, beyond, 8);
	CHECK_EQ(d->st->dropped, 4);
	CHECK_EQ(d->depart_notices.count, 0);

	/* Well-formed barrier notices for this rank (not rank 0): kept. */
	uint8_t two[8] = { 3, 0, 0, 0, 2, 0, 0, 0 };

	handle(d, 0, MSG_NOTICES, DSM_NOTICE_BARRIER, 0, two, sizeof(two));
	CHECK_EQ(d->depart_notices.count, 2);
	CHECK(pageset_has(&d->depart_notices, 3) && pageset_has(&d->depart_notices, 4));

	/* Lock 0 is managed by rank 0, not here: its requests and releases
	 * are dropped.  Lock 1 is ours: a release by a rank that does not
	 * hold it is dropped; a request is granted... to rank 1 itself only
	 * when it asks locally (a remote grant would need PM). */
	handle(d, 0, MSG_LOCK_ACQUIRE, 0, 0, NULL, 0);
	handle(d, 0, MSG_LOCK_RELEASE, 0, 0, NULL, 0);
	handle(d, 0, MSG_LOCK_RELEASE, 1, 0, NULL, 0);
	CHECK_EQ(d->st->dropped, 7);
	CHECK_EQ(d->locks[1].holder, -1);

	/* An unknown type; an arrival at a barrier sent to a rank that is
	 * not the manager is ignored (only rank 0 counts). */
	handle(d, 0, 99, 0, 0, NULL, 0);
	CHECK_EQ(d->st->dropped, 8);
	handle(d, 0, MSG_BARRIER_ARRIVE, 0, 0, NULL, 0);
	CHECK_EQ(d->mgr_arrived, 0);

	/* An acknowledgement of more diffs than are outstanding changes
	 * nothing; a grant and a departure set their flags. */
	d->diffs_unacked = 2;
	handle(d, 0, MSG_DIFF_ACK, 5, 0, NULL, 0);
	CHECK_EQ(d->diffs_unacked, 2);
	handle(d, 0, MSG_DIFF_ACK, 2, 0, NULL, 0);
	CHECK_EQ(d->diffs_unacked, 0);
	handle(d, 0, MSG_LOCK_GRANT, 8, 0, NULL, 0);
	CHECK_EQ(d->granted_lock, 8);
	handle(d, 0, MSG_BARRIER_DEPART, 0, 0, NULL, 0);
	CHECK(d->departed);

	/* Synchronisation messages carry their notices (dsm_send_sync): taken
	 * as a NOTICES message of the same tag and epoch would be, before the
	 * message acts.  A departure's, a grant's (older than this rank's
	 * epoch: moot, as separate notices of that epoch would be), and a
	 * malformed payload: dropped and counted, the message still acts. */
	uint8_t nine[8] = { 9, 0, 0, 0, 3, 0, 0, 0 }, twenty[8] = { 20, 0, 0, 0, 1, 0, 0, 0 };

	pageset_clear(&d->depart_notices);
	d->departed = false;
	handle(d, 0, MSG_BARRIER_DEPART, 0, 0, nine, sizeof(nine));
	CHECK(d->departed);
	CHECK_EQ(d->depart_notices.count, 3);
	CHECK(pageset_has(&d->depart_notices, 9) && pageset_has(&d->depart_notices, 11));
	d->epoch = 2;
	handle(d, 0, MSG_LOCK_GRANT, 8, 2, twenty, sizeof(twenty));
	handle(d, 0, MSG_LOCK_GRANT, 8, 1, nine, sizeof(nine));
	CHECK_EQ(d->grant_notices.count, 1);
	CHECK(pageset_has(&d->grant_notices, 20));
	handle(d, 0, MSG_BARRIER_DEPART, 0, 0, partial, sizeof(partial));
	CHECK_EQ(d->st->dropped, 9);
	CHECK_EQ(d->depart_notices.count, 3);
	pageset_clear(&d->grant_notices);
	pageset_clear(&d->depart_notices);
	d->epoch = 0;

	/* First touch (home.c).  Questions for the home of a page this rank
	 * does not manage (page 2: rank 0's), of a page beyond the heap, or
	 * of the wrong size are dropped and decide nothing. */
	uint32_t claim = 1, answer = 0, bad = 7;

	memset(d->home, 0xff, d->npages * sizeof(*d->home));
	handle(d, 0, MSG_HOME_ASK, 2, 0, &claim, sizeof(claim));
	handle(d, 0, MSG_HOME_ASK, 99, 0, &claim, sizeof(claim));
	handle(d, 0, MSG_HOME_ASK, 3, 0, &claim, 2);
	CHECK_EQ(d->st->dropped, 12);
	CHECK_EQ(d->home[2], DSM_UNHOMED);
	CHECK_EQ(d->home[3], DSM_UNHOMED);
	/* Answers nobody asked for, from a rank that does not manage the
	 * page, or naming a rank that does not exist, are dropped; the
	 * manager's answer to the question out is taken. */
	struct dsm_home_query q = { .page = 4, .claim = true };

	handle(d, 0, MSG_HOME_IS, 4, 0, &answer, sizeof(answer));
	d->home_query = &q;
	handle(d, 1, MSG_HOME_IS, 4, 0, &answer, sizeof(answer));
	handle(d, 0, MSG_HOME_IS, 6, 0, &answer, sizeof(answer));
	handle(d, 0, MSG_HOME_IS, 4, 0, &bad, sizeof(bad));
	CHECK_EQ(d->st->dropped, 16);
	CHECK(!q.answered);
	handle(d, 0, MSG_HOME_IS, 4, 0, &answer, sizeof(answer));
	CHECK(q.answered);
	CHECK_EQ(q.home, 0);
	d->home_query = NULL;

	/* Diffs (applied on the service thread; their acknowledgement needs
	 * PM): for a page homed here, not allocated here yet, or first-touch
	 * and not yet known here to be homed here (the manager's answer still
	 * on its way: the sender learned it from the same manager); not for a
	 * page homed at another rank, nor beyond the heap. */
	d->state[5] = PAGE_OWN;
	d->home[5] = 1;
	d->state[6] = PAGE_UNUSED;
	d->home[6] = 0;
	d->state[7] = PAGE_INVALID;
	d->home[7] = DSM_UNHOMED;
	d->state[8] = PAGE_READ;
	d->home[8] = 0;
	CHECK(dsm_diff_for_here(d, 5));
	CHECK(dsm_diff_for_here(d, 6));
	CHECK(dsm_diff_for_here(d, 7));
	CHECK(!dsm_diff_for_here(d, 8));
	CHECK(!dsm_diff_for_here(d, d->npages));

	/* Pushes asked for (push.c): rank 0 asks for pages 9-11, then asks
	 * to stop 10; a malformed request of either kind changes nothing. */
	uint64_t dropped = d->st->dropped;
	uint8_t ten[8] = { 10, 0, 0, 0, 1, 0, 0, 0 };

	handle(d, 0, MSG_SUBSCRIBE, 0, 0, nine, sizeof(nine));
	CHECK_EQ(d->subs[0].count, 3);
	handle(d, 0, MSG_UNSUBSCRIBE, 0, 0, ten, sizeof(ten));
	CHECK_EQ(d->subs[0].count, 2);
	CHECK(pageset_has(&d->subs[0], 9) && !pageset_has(&d->subs[0], 10) &&
	      pageset_has(&d->subs[0], 11));
	handle(d, 0, MSG_UNSUBSCRIBE, 0, 0, partial, sizeof(partial));
	handle(d, 0, MSG_SUBSCRIBE, 0, 0, partial, sizeof(partial));
	CHECK_EQ(d->st->dropped, dropped + 2);
	CHECK_EQ(d->subs[0].count, 2);

	/* Watching before a first copy (home.c): a request of the wrong
	 * size, for no page or beyond the heap is dropped and watches
	 * nothing; an answer nobody waits for, from a rank that is not the
	 * page's home or for another page is dropped; the home's answer to
	 * the request out is taken.  (A well-formed request is answered
	 * through PM: the mpirun tests.) */
	uint32_t npages = 2, none = 0;

	dropped = d->st->dropped;
	d->state[12] = PAGE_OWN;
	d->home[12] = 1;
	handle(d, 0, MSG_WATCH, 12, 0, &npages, 2);
	handle(d, 0, MSG_WATCH, 12, 0, &none, sizeof(none));
	handle(d, 0, MSG_WATCH, 63, 0, &npages, sizeof(npages));
	CHECK_EQ(d->st->dropped, dropped + 3);
	CHECK_EQ(d->state[12], PAGE_OWN);
	CHECK_EQ(d->st->home_shared, 0);
	d->home[13] = 0;
	handle(d, 0, MSG_WATCHING, 13, 0, NULL, 0);
	d->watch_asked = 13;
	handle(d, 1, MSG_WATCHING, 13, 0, NULL, 0);
	handle(d, 0, MSG_WATCHING, 14, 0, NULL, 0);
	CHECK_EQ(d->st->dropped, dropped + 6);
	CHECK_EQ(d->watch_asked, 13);
	handle(d, 0, MSG_WATCHING, 13, 0, NULL, 0);
	CHECK_EQ(d->watch_asked, UINT32_MAX);

	dsm_ctx = NULL;
	dsm_sync_close(d);
	free(d->state);
	free(d->home);
	free(d->rkeys);
	free(d->copied_keys);
	free(d);
	return 0;
}
