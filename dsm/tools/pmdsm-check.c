/* SPDX-License-Identifier: MIT */
/*
 * pmdsm-check - does the DSM give race-free programs the sequential
 * result?  Every rank runs the same generated program (from --seed) and
 * checks what it reads against the sequential result, which it computes
 * itself since it knows every rank's part of the program:
 *
 *   rounds of barrier phases: every byte of a shared array gets a writer
 *   rank drawn at random (or none), so ranks write disjoint bytes of the
 *   same pages (false sharing), then a barrier, then every rank reads the
 *   whole array;
 *
 *   and lock phases: every rank adds to random shared counters, each under
 *   its lock, reading the value the previous holder wrote; after a barrier
 *   every counter must hold the sum of everyone's additions;
 *
 *   then rounds of barriers of a few (peer_check): each rank meets only
 *   its neighbours in a ring and reads what they wrote; in the last, they
 *   meet in two halves and write elsewhere between them (split-phase).
 *
 * (with 2 ranks or more, the pages a barrier drops that a rank read come
 * back at the barrier: prefetch, checked by the counters at the end) and,
 * with 2 ranks or more, a home's writes to pages another rank copied
 * before the home knew (home_copy_check), pages homed where they were
 * first touched (first_touch_check), writes to pages left unwritten for
 * many releases (cold_check), notices too many for one message
 * (scatter_check), and read-ahead phases
 * (read_ahead_check): pages
 * fetched beside a faulted one hold the home's values, are invalidated by
 * the next barrier's write notices like any other, have the twin that
 * keeps another rank's write to the same page, and read-ahead stops at a
 * page of another home and at the end of an allocation.
 *
 * --heap BYTES fills an allocation of that size from every rank (each its
 * own block) and has every rank read back the next rank's block.
 *
 * A mismatch prints the seed, the round and the place, and exits 1.  Rank 0
 * prints one JSON line on success.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pmdsm.h"

#define LOCKS_USED 16u

struct options {
	uint64_t seed;
	unsigned rounds;
	size_t bytes;
	unsigned counters, adds;
	size_t heap;
	enum pmdsm_placement placement;     /* of the array and the counters */
	int prefetch_mode;                  /* -1: the library's (PMDSM_PREFETCH_MODE) */
	bool quiet;
};

static int rank, size;

static uint64_t mix(uint64_t x)
{
	/* splitmix64's finaliser: every input bit reaches every output bit. */
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t draw(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
	return mix(seed ^ mix(a ^ mix(b ^ mix(c))));
}

__attribute__((noreturn, format(printf, 1, 2)))
static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pmdsm-check: rank %d: ", rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void call(int err, const char *what)
{
	if (err < 0)
		fail("%s: %s", what, pmdsm_strerror(err));
}

/* Writer of byte i in round r: a rank, or size for "nobody". */
static int writer(const struct options *o, unsigned r, size_t i)
{
	return (int)(draw(o->seed, r, i, 1) % (uint64_t)(size + 1));
}

static uint8_t value(const struct options *o, unsigned r, size_t i)
{
	return (uint8_t)draw(o->seed, r, i, 2);
}

static void barrier_rounds(const struct options *o, uint8_t *data, uint8_t *expect, unsigned r)
{
	for (size_t i = 0; i < o->bytes; i++) {
		int w = writer(o, r, i);

		if (w == rank)
			data[i] = value(o, r, i);
		if (w < size)
			expect[i] = value(o, r, i);
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (size_t i = 0; i < o->bytes; i++)
		if (data[i] != expect[i])
			fail("seed %" PRIu64 " round %u: byte %zu of the shared array is %u, expected "
			     "%u (written by rank %d in round %u)", o->seed, r, i, data[i], expect[i],
			     writer(o, r, i), r);
}

static void lock_rounds(const struct options *o, uint64_t *ctr, uint64_t *expect, unsigned r)
{
	for (unsigned k = 0; k < o->adds; k++) {
		unsigned c = (unsigned)(draw(o->seed, r, (uint64_t)rank << 32 | k, 3) % o->counters);
		uint64_t add = draw(o->seed, r, (uint64_t)rank << 32 | k, 4) % 1000 + 1;

		call(pmdsm_lock(c % LOCKS_USED), "pmdsm_lock");
		ctr[c] += add;
		call(pmdsm_unlock(c % LOCKS_USED), "pmdsm_unlock");
	}
	/* Everyone's additions, as the sequential program makes them. */
	for (int q = 0; q < size; q++)
		for (unsigned k = 0; k < o->adds; k++) {
			unsigned c = (unsigned)(draw(o->seed, r, (uint64_t)q << 32 | k, 3) % o->counters);

			expect[c] += draw(o->seed, r, (uint64_t)q << 32 | k, 4) % 1000 + 1;
		}
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned c = 0; c < o->counters; c++)
		if (ctr[c] != expect[c])
			fail("seed %" PRIu64 " round %u: counter %u is %" PRIu64 ", expected %" PRIu64
			     " (additions under lock %u lost or seen late)", o->seed, r, c, ctr[c],
			     expect[c], c % LOCKS_USED);
}

/*
 * Barriers of a few: the ranks stand in a ring and each meets only its two
 * neighbours (pmdsm_barrier_with), round after round with no barrier of
 * all between.  Every byte of two shared arrays has an owner, the only
 * rank that writes it; round r writes a new value into every owned byte of
 * array r % 2, as a stencil's sweep writes one grid of two, then each rank
 * meets its neighbours and reads the bytes it or they own: what a
 * neighbour wrote before they met must be there, not the value of round
 * r - 2 still cached.  A barrier of all ends the phase, and then every
 * rank reads every byte of both arrays.  Three ways to own the bytes:
 *
 *   OWN_RANDOM  an owner drawn at random per byte: the pages are falsely
 *               shared, among neighbours and not;
 *   OWN_HOME    the home of the byte's page: pages a neighbour reads again
 *               every round, written by their home alone, which the home
 *               pushes (push.c; counted by push_taken);
 *   OWN_PAIR    the home or the rank after it, drawn per byte: a page is
 *               pushed by its home while another rank writes it too, which
 *               the reader may meet; it must see that rank's bytes too.
 *               Rank 1 writes late in each round, so that the home of the
 *               pages it shares (rank 0) has pushed them before rank 1's
 *               diffs reach it: a reader that took such a push would miss
 *               rank 1's bytes (with 3 ranks, rank 2 reads them).
 *
 * Split, the ranks meet in two halves (pmdsm_barrier_with_notify, then
 * _wait) and, between them, each reads and writes the bytes it owns of a
 * third array that only it uses during the phase, as a stencil computes
 * its interior rows while its edge rows travel.  Their owners are drawn
 * at random, so the pages are falsely shared: a neighbour's notice drops
 * a page this rank wrote since its notify, whose diff must go home first.
 */
enum ownership { OWN_RANDOM, OWN_HOME, OWN_PAIR };

static int owner(const struct options *o, enum ownership how, const uint8_t *a, size_t i)
{
	if (how == OWN_RANDOM)
		return (int)(draw(o->seed, 0, i, 5) % (uint64_t)size);

	int home = pmdsm_home(a + i);

	if (home < 0)
		fail("pmdsm_home: %s", pmdsm_strerror(home));
	if (how == OWN_PAIR && draw(o->seed, 0, i, 7) % 2)
		return (home + 1) % size;
	return home;
}

/* The values of the split rounds' windows are those of rounds shifted by
 * this much, so that they differ from the arrays'. */
#define SPLIT_ROUNDS 100000u

static uint8_t peer_value(const struct options *o, unsigned r, size_t i)
{
	return (uint8_t)draw(o->seed, r, i, 6);
}

/* The window of a split meeting, round r: this rank's bytes of priv hold
 * what it wrote in the window before, and get round r's value. */
static void split_window(const struct options *o, uint8_t *priv, const int *own, unsigned r,
			 enum ownership how)
{
	for (size_t i = 0; i < o->bytes; i++) {
		if (own[i] != rank)
			continue;
		if (r && priv[i] != peer_value(o, r - 1 + SPLIT_ROUNDS, i))
			fail("seed %" PRIu64 " split peer round %u (ownership %d): byte %zu of "
			     "the window's array is %u, expected %u (written by this rank in the "
			     "window before)", o->seed, r, how, i, priv[i],
			     peer_value(o, r - 1 + SPLIT_ROUNDS, i));
		priv[i] = peer_value(o, r + SPLIT_ROUNDS, i);
	}
}

static void peer_rounds(const struct options *o, enum ownership how, bool split)
{
	int left = (rank + size - 1) % size, right = (rank + 1) % size;
	int peers[2] = { left, right };
	unsigned npeers = size == 1 ? 0 : size == 2 ? 1 : 2;
	uint8_t *arr[2] = { pmdsm_alloc(o->bytes, o->placement), pmdsm_alloc(o->bytes, o->placement) };
	unsigned last[2] = { 0, 0 };        /* the round that wrote each array last, + 1 */
	int *own[2] = { malloc(o->bytes * sizeof(int)), malloc(o->bytes * sizeof(int)) };

	if (!arr[0] || !arr[1])
		fail("pmdsm_alloc: %s", strerror(errno));
	if (!own[0] || !own[1])
		fail("out of memory");
	for (unsigned k = 0; k < 2; k++)
		for (size_t i = 0; i < o->bytes; i++)
			own[k][i] = owner(o, how, arr[k], i);

	/* Split: the window's array and its owners. */
	uint8_t *priv = split ? pmdsm_alloc(o->bytes, o->placement) : NULL;
	int *priv_own = split ? malloc(o->bytes * sizeof(int)) : NULL;

	if (split && (!priv || !priv_own))
		fail("out of memory for the split rounds: %s", strerror(errno));
	for (size_t i = 0; split && i < o->bytes; i++)
		priv_own[i] = (int)(draw(o->seed, 0, i, 8) % (uint64_t)size);

	for (unsigned r = 0; r < o->rounds; r++) {
		uint8_t *a = arr[r % 2];
		const int *ow = own[r % 2];

		if (how == OWN_PAIR && rank == 1)
			nanosleep(&(struct timespec){ .tv_nsec = 5000000 }, NULL);
		for (size_t i = 0; i < o->bytes; i++)
			if (ow[i] == rank)
				a[i] = peer_value(o, r, i);
		if (split) {
			call(pmdsm_barrier_with_notify(peers, npeers), "pmdsm_barrier_with_notify");
			split_window(o, priv, priv_own, r, how);
			call(pmdsm_barrier_with_wait(), "pmdsm_barrier_with_wait");
		} else {
			call(pmdsm_barrier_with(peers, npeers), "pmdsm_barrier_with");
		}
		last[r % 2] = r + 1;
		for (size_t i = 0; i < o->bytes; i++) {
			int w = ow[i];

			if ((w == rank || w == left || w == right) && a[i] != peer_value(o, r, i))
				fail("seed %" PRIu64 " peer round %u (ownership %d): byte %zu of array "
				     "%u is %u, expected %u (written by rank %d, a neighbour, before "
				     "they met)", o->seed, r, how, i, r % 2, a[i], peer_value(o, r, i), w);
		}
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned k = 0; k < 2; k++)
		for (size_t i = 0; last[k] && i < o->bytes; i++)
			if (arr[k][i] != peer_value(o, last[k] - 1, i))
				fail("seed %" PRIu64 " after the peer rounds (ownership %d): byte %zu of "
				     "array %u is %u, expected %u (written by rank %d in peer round %u)",
				     o->seed, how, i, k, arr[k][i], peer_value(o, last[k] - 1, i),
				     own[k][i], last[k] - 1);
	for (size_t i = 0; split && o->rounds && i < o->bytes; i++)
		if (priv[i] != peer_value(o, o->rounds - 1 + SPLIT_ROUNDS, i))
			fail("seed %" PRIu64 " after the split peer rounds (ownership %d): byte %zu "
			     "of the window's array is %u, expected %u (written by rank %d in the "
			     "last window)", o->seed, how, i, priv[i],
			     peer_value(o, o->rounds - 1 + SPLIT_ROUNDS, i), priv_own[i]);
	if (split) {
		free(priv_own);
		call(pmdsm_free(priv), "pmdsm_free");
	}
	free(own[1]);
	free(own[0]);
	call(pmdsm_free(arr[1]), "pmdsm_free");
	call(pmdsm_free(arr[0]), "pmdsm_free");
}

static void peer_check(const struct options *o)
{
	if (size > 1) {
		int left = (rank + size - 1) % size, twice[2] = { left, left };

		if (pmdsm_barrier_with(twice, 2) != -EINVAL)
			fail("pmdsm_barrier_with accepted rank %d named twice", left);
	}
	peer_rounds(o, OWN_RANDOM, false);
	/* Owned by homes: homes known before the first write. */
	if (o->placement != PMDSM_FIRST_TOUCH) {
		peer_rounds(o, OWN_HOME, false);
		peer_rounds(o, OWN_PAIR, false);
		peer_rounds(o, OWN_PAIR, true);
	} else {
		peer_rounds(o, OWN_RANDOM, true);
	}
}

static void heap_check(const struct options *o)
{
	size_t words = o->heap / sizeof(uint64_t);
	uint64_t *h = pmdsm_malloc(words * sizeof(uint64_t));

	if (!h)
		fail("pmdsm_malloc(%zu): %s", o->heap, strerror(errno));
	/* Each rank writes its block: the pages homed at it. */
	size_t lo = words * (size_t)rank / (size_t)size, hi = words * (size_t)(rank + 1) / (size_t)size;

	for (size_t i = lo; i < hi; i++)
		h[i] = draw(o->seed, i, 5, 5);
	call(pmdsm_barrier(), "pmdsm_barrier");
	/* Each rank reads back the next rank's block: every byte is read by a
	 * rank other than its home (one alone, rank 0, on a job of one). */
	int next = (rank + 1) % size;
	size_t from = words * (size_t)next / (size_t)size, to = words * (size_t)(next + 1) / (size_t)size;

	for (size_t i = from; i < to; i++)
		if (h[i] != draw(o->seed, i, 5, 5))
			fail("seed %" PRIu64 ": word %zu of the %zu-byte heap block (homed at rank %d) "
			     "is %#" PRIx64 ", expected %#" PRIx64, o->seed, i, o->heap, next, h[i],
			     draw(o->seed, i, 5, 5));
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(h), "pmdsm_free");
}

/* ---- a home's writes to pages another rank has copied ---- */

/*
 * A fresh allocation's pages are copied nowhere yet, so their home's writes
 * go unwatched (docs/dsm/design.md, "Pages no other rank copies").  Rank 1
 * copies rank 0's pages (reads a word of each) under a lock and sets a flag
 * there; rank 0, holding the lock once it sees the flag, writes another
 * word of each page in the same interval, before any release of its own
 * could learn of the copies.  After a barrier rank 1 must read rank 0's
 * values: the release that ends that interval names the pages it found
 * copied.  Then rank 0 writes a third word, its writes watched now, and
 * after a barrier rank 1 reads that too.  Other ranks only take part in
 * the barriers.
 */
#define HC_PAGES 8u
#define HC_WORDS (4096u / sizeof(uint64_t))
#define HC_LOCK 0u
#define HC_WAIT_S 20

static void home_copy_check(const struct options *o)
{
	if (size < 2)
		return;

	/* Block placement: rank r homes pages [r * HC_PAGES, (r + 1) * HC_PAGES). */
	uint64_t *a = pmdsm_alloc((size_t)size * HC_PAGES * 4096u, PMDSM_BLOCK);
	uint64_t *flag = pmdsm_malloc(sizeof(uint64_t));

	if (!a || !flag)
		fail("pmdsm_alloc: %s", strerror(errno));
	call(pmdsm_barrier(), "pmdsm_barrier");
	if (rank == 1) {
		uint64_t sum = 0;

		call(pmdsm_lock(HC_LOCK), "pmdsm_lock");
		for (unsigned p = 0; p < HC_PAGES; p++)
			sum += a[p * HC_WORDS];
		*flag = 1;
		call(pmdsm_unlock(HC_LOCK), "pmdsm_unlock");
		if (sum != 0)
			fail("seed %" PRIu64 ": a fresh allocation read %" PRIu64 ", not zeros",
			     o->seed, sum);
	} else if (rank == 0) {
		time_t end = time(NULL) + HC_WAIT_S;

		for (;;) {
			call(pmdsm_lock(HC_LOCK), "pmdsm_lock");
			if (*flag)
				break;
			call(pmdsm_unlock(HC_LOCK), "pmdsm_unlock");
			if (time(NULL) > end)
				fail("rank 1 never copied rank 0's pages within %d s", HC_WAIT_S);
		}
		for (unsigned p = 0; p < HC_PAGES; p++)
			a[p * HC_WORDS + 1] = draw(o->seed, p, 6, 1);
		call(pmdsm_unlock(HC_LOCK), "pmdsm_unlock");
	}
	for (unsigned phase = 1; phase <= 2; phase++) {
		call(pmdsm_barrier(), "pmdsm_barrier");
		for (unsigned p = 0; rank == 1 && p < HC_PAGES; p++)
			if (a[p * HC_WORDS + phase] != draw(o->seed, p, 6, phase))
				fail("seed %" PRIu64 ": word %u of page %u (homed at rank 0) is %#"
				     PRIx64 ", expected %#" PRIx64 ": rank 0's write %s was lost",
				     o->seed, phase, p, a[p * HC_WORDS + phase],
				     draw(o->seed, p, 6, phase), phase == 1 ?
				     "after rank 1 copied the page, before rank 0 knew" :
				     "to a page it knew copied");
		if (phase == 1 && rank == 0)
			for (unsigned p = 0; p < HC_PAGES; p++)
				a[p * HC_WORDS + 2] = draw(o->seed, p, 6, 2);
	}
	if (rank == 0) {
		struct pmdsm_stats st;

		call(pmdsm_stats_get(&st, sizeof(st)), "pmdsm_stats_get");
		if (st.home_shared < HC_PAGES)
			fail("rank 0 counted %" PRIu64 " of its pages copied elsewhere, fewer than "
			     "the %u rank 1 read", st.home_shared, HC_PAGES);
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(flag), "pmdsm_free");
	call(pmdsm_free(a), "pmdsm_free");
}

/* ---- first touch ---- */

/*
 * First touch (PMDSM_FIRST_TOUCH, 2 ranks or more): pages nobody touched
 * have no home (pmdsm_home says so, and asking does not touch them); rank r
 * writes page (r + 1) % size first and reads page size + r first, and then
 * homes both on every rank, with what it wrote; a write by another rank to
 * a page first touched elsewhere reaches every rank after a barrier (its
 * diff goes to that home).
 */
static void first_touch_check(const struct options *o)
{
	if (size < 2)
		return;

	size_t words = 4096u / sizeof(uint64_t);
	unsigned pages = 2u * (unsigned)size + 1u, untouched = pages - 1u;
	uint64_t *a = pmdsm_alloc(pages * 4096u, PMDSM_FIRST_TOUCH);

	if (!a)
		fail("pmdsm_alloc: %s", strerror(errno));
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned p = 0; p < pages; p++)
		if (pmdsm_home(&a[p * words]) != -ENODATA)
			fail("seed %" PRIu64 ": page %u of a first-touch allocation that no rank "
			     "touched has a home: pmdsm_home says %d", o->seed, p,
			     pmdsm_home(&a[p * words]));
	call(pmdsm_barrier(), "pmdsm_barrier");

	unsigned mine = (unsigned)(rank + 1) % (unsigned)size, read = (unsigned)size + (unsigned)rank;

	a[mine * words + 1] = 0xf100 + (uint64_t)rank;
	if (a[read * words] != 0)
		fail("seed %" PRIu64 ": page %u, first touched by a read, is not zero", o->seed,
		     read);
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (int r = 0; r < size; r++) {
		unsigned w = (unsigned)(r + 1) % (unsigned)size, rd = (unsigned)size + (unsigned)r;

		if (pmdsm_home(&a[w * words]) != r || pmdsm_home(&a[rd * words]) != r)
			fail("seed %" PRIu64 ": rank %d touched pages %u and %u first, but they are "
			     "homed at %d and %d", o->seed, r, w, rd, pmdsm_home(&a[w * words]),
			     pmdsm_home(&a[rd * words]));
		if (a[w * words + 1] != 0xf100 + (uint64_t)r)
			fail("seed %" PRIu64 ": page %u holds %#" PRIx64 ", not what rank %d wrote "
			     "there", o->seed, w, a[w * words + 1], r);
	}
	if (pmdsm_home(&a[untouched * words]) != -ENODATA)
		fail("seed %" PRIu64 ": the untouched page %u got a home", o->seed, untouched);
	if (pmdsm_home(o) != -EINVAL)
		fail("pmdsm_home answers %d for an address outside the shared heap",
		     pmdsm_home(o));

	/* Rank r writes a word of page (r + 2) % size, first touched (and
	 * homed) by rank r + 1: a diff to a first-touch home. */
	unsigned other = (unsigned)(rank + 2) % (unsigned)size;

	a[other * words + 2] = 0xf200 + (uint64_t)rank;
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (int r = 0; r < size; r++) {
		unsigned w = (unsigned)(r + 2) % (unsigned)size;

		if (a[w * words + 2] != 0xf200 + (uint64_t)r)
			fail("seed %" PRIu64 ": page %u holds %#" PRIx64 " where rank %d wrote "
			     "%#" PRIx64 " (homed at %d)", o->seed, w, a[w * words + 2], r,
			     0xf200 + (uint64_t)r, pmdsm_home(&a[w * words]));
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(a), "pmdsm_free");
}

/* This rank's counters now. */
static struct pmdsm_stats stats_now(void)
{
	struct pmdsm_stats st;

	call(pmdsm_stats_get(&st, sizeof(st)), "pmdsm_stats_get");
	return st;
}

/* ---- cold pages ---- */

/*
 * Pages left unwritten (uffd-async takes them out of its scans and makes
 * them read-only: docs/dsm/design.md, "Cold pages"; the other methods have
 * no such state, and the phase checks them all the same).  Block placement,
 * CP_PAGES pages per rank.  Every rank writes word 0 of its own pages and,
 * after a barrier, reads the next rank's (copies there, and its own pages
 * copied by the rank before it), twice.  Then CP_RELEASES releases that write
 * nothing, enough for both kinds of page to go cold.  Then rank r writes
 * word 1 of each page of its copies (a diff from a cold copy) and word 2 of
 * each of its own pages (a home's write to a cold copied page: it must be
 * named in the notices); after a barrier every rank reads every page.
 * With uffd-async each rank's counters must show its pages went cold and
 * were written again.
 */
#define CP_PAGES 8u
#define CP_RELEASES 17u         /* 2 x DSM_COLD_SWEEP + 1 */
#define CP_LOCK 1u

static uint64_t cp_value(const struct options *o, unsigned page, unsigned word)
{
	return draw(o->seed, page, 7, word);
}

static void cold_check(const struct options *o)
{
	if (size < 2)
		return;

	size_t words = 4096u / sizeof(uint64_t);
	unsigned own = (unsigned)rank * CP_PAGES;
	unsigned next = (unsigned)((rank + 1) % size) * CP_PAGES;
	uint64_t *a = pmdsm_alloc((size_t)size * CP_PAGES * 4096u, PMDSM_BLOCK);
	struct pmdsm_stats st0 = stats_now();

	if (!a)
		fail("pmdsm_alloc: %s", strerror(errno));
	for (unsigned p = own; p < own + CP_PAGES; p++)
		a[p * words] = cp_value(o, p, 0);
	/* Read twice: the home names its pages in its notices when it first
	 * sees them copied (a release of the first two barriers), which drops
	 * the copies; read again after that, they stay. */
	for (int pass = 0; pass < 2; pass++) {
		call(pmdsm_barrier(), "pmdsm_barrier");
		for (unsigned p = next; p < next + CP_PAGES; p++)
			if (a[p * words] != cp_value(o, p, 0))
				fail("seed %" PRIu64 ": word 0 of page %u is %#" PRIx64 ", expected %#"
				     PRIx64, o->seed, p, a[p * words], cp_value(o, p, 0));
		call(pmdsm_barrier(), "pmdsm_barrier");
	}
	for (unsigned i = 0; i < CP_RELEASES; i++) {
		call(pmdsm_lock(CP_LOCK), "pmdsm_lock");
		call(pmdsm_unlock(CP_LOCK), "pmdsm_unlock");
	}
	for (unsigned p = next; p < next + CP_PAGES; p++)
		a[p * words + 1] = cp_value(o, p, 1);
	for (unsigned p = own; p < own + CP_PAGES; p++)
		a[p * words + 2] = cp_value(o, p, 2);
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned p = 0; p < (unsigned)size * CP_PAGES; p++)
		for (unsigned w = 0; w < 3; w++)
			if (a[p * words + w] != cp_value(o, p, w))
				fail("seed %" PRIu64 ": word %u of page %u (homed at rank %u) is %#"
				     PRIx64 ", expected %#" PRIx64 ": a write after %u releases "
				     "that wrote nothing was lost", o->seed, w, p, p / CP_PAGES,
				     a[p * words + w], cp_value(o, p, w), CP_RELEASES);

	struct pmdsm_stats st1 = stats_now();

	if (strcmp(pmdsm_write_detect(), "uffd-async") == 0 &&
	    (st1.cold_pages - st0.cold_pages < 2 * CP_PAGES ||
	     st1.cold_writes - st0.cold_writes < 2 * CP_PAGES))
		fail("seed %" PRIu64 ": rank %d's %u copies and %u copied pages, unwritten for "
		     "%u releases, made %" PRIu64 " pages cold and %" PRIu64 " writes to cold "
		     "pages (at least %u of each expected)", o->seed, rank, CP_PAGES, CP_PAGES,
		     CP_RELEASES, st1.cold_pages - st0.cold_pages,
		     st1.cold_writes - st0.cold_writes, 2 * CP_PAGES);
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(a), "pmdsm_free");
}

/* ---- notices longer than a message ---- */

/*
 * A synchronisation message carries its notices, and those that do not
 * fit in one message go ahead of it as NOTICES (dsm_send_sync: 1024 runs,
 * 8 KiB, a message at most).  Every other page of SC_PAGES written makes
 * SC_PAGES / 2 runs, more than that, at every step:
 *
 *   barrier: every rank writes its word of every even page, so that each
 *   arrival and the departure's union take two messages;
 *
 *   lock: the ranks take SC_LOCK in turn and each writes its word of every
 *   odd page, so that each release to the manager and each grant after the
 *   first take two.
 *
 * Every rank reads every page first, so that it holds copies that only the
 * notices can drop: a run of them lost would leave a page stale, and the
 * values read after the barrier, or under the lock, would show it.
 */
#define SC_PAGES 2200u
#define SC_LOCK 2u
#define SC_WORDS (4096u / sizeof(uint64_t))

static uint64_t sc_value(const struct options *o, unsigned page, int writer_rank)
{
	return draw(o->seed, page, (uint64_t)writer_rank, 8) | 1;     /* never 0 */
}

static void sc_expect(const struct options *o, const uint64_t *a, unsigned page, int w,
		      bool written, const char *after)
{
	uint64_t want = written ? sc_value(o, page, w) : 0, got = a[page * SC_WORDS + w];

	if (got != want)
		fail("seed %" PRIu64 ": word %d of page %u is %#" PRIx64 ", expected %#" PRIx64
		     " after %s (notices of more than one message)", o->seed, w, page, got, want,
		     after);
}

static void scatter_check(const struct options *o)
{
	if (size < 2)
		return;

	uint64_t *a = pmdsm_alloc(SC_PAGES * 4096u, PMDSM_CYCLIC);
	/* turns[0]: how many ranks held SC_LOCK so far; turns[1 + k]: the k-th. */
	uint64_t *turns = pmdsm_alloc((size_t)(size + 1) * sizeof(uint64_t), PMDSM_CYCLIC);
	volatile uint64_t sum = 0;

	if (!a || !turns)
		fail("pmdsm_alloc: %s", strerror(errno));
	for (unsigned p = 0; p < SC_PAGES; p++)
		sum += a[p * SC_WORDS];
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned p = 0; p < SC_PAGES; p += 2)
		a[p * SC_WORDS + rank] = sc_value(o, p, rank);
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned p = 0; p < SC_PAGES; p++)
		for (int w = 0; w < size; w++)
			sc_expect(o, a, p, w, p % 2 == 0, "a barrier");
	call(pmdsm_barrier(), "pmdsm_barrier");

	call(pmdsm_lock(SC_LOCK), "pmdsm_lock");
	uint64_t held = turns[0];

	if (held >= (uint64_t)size)
		fail("seed %" PRIu64 ": %" PRIu64 " ranks held lock %u before rank %d, of %d",
		     o->seed, held, SC_LOCK, rank, size);
	for (uint64_t k = 0; k < held; k++)
		for (unsigned p = 1; p < SC_PAGES; p += 2)
			sc_expect(o, a, p, (int)turns[1 + k], true, "a lock's grant");
	for (unsigned p = 1; p < SC_PAGES; p += 2)
		a[p * SC_WORDS + rank] = sc_value(o, p, rank);
	turns[1 + held] = (uint64_t)rank;
	turns[0] = held + 1;
	call(pmdsm_unlock(SC_LOCK), "pmdsm_unlock");
	call(pmdsm_barrier(), "pmdsm_barrier");
	for (unsigned p = 1; p < SC_PAGES; p += 2)
		for (int w = 0; w < size; w++)
			sc_expect(o, a, p, w, true, "a barrier after the lock");
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(turns), "pmdsm_free");
	call(pmdsm_free(a), "pmdsm_free");
}

/* ---- read-ahead ---- */

/* Pages per rank of the read-ahead allocation: a sequential sweep over one
 * block grows the DSM's window to its default largest (16 pages) and ends
 * with a fault whose window runs past the block. */
#define RA_PAGES 32u
#define RA_PAGE 4096u
#define RA_WORDS (RA_PAGE / sizeof(uint64_t))

static uint64_t ra_value(const struct options *o, unsigned phase, size_t page, size_t word)
{
	return draw(o->seed, phase, page, word) | 1;  /* never 0, what is never fetched */
}

/* Rank r writes phase's values into every word of its own block. */
static void ra_write_block(const struct options *o, uint64_t *ra, unsigned phase)
{
	for (size_t p = (size_t)rank * RA_PAGES; p < (size_t)(rank + 1) * RA_PAGES; p++)
		for (size_t w = 0; w < RA_WORDS; w++)
			ra[p * RA_WORDS + w] = ra_value(o, phase, p, w);
}

/* Read pages [from, to) in order, every word, against phase's values. */
static void ra_read(const struct options *o, const uint64_t *ra, size_t from, size_t to,
		    unsigned phase, const char *what)
{
	for (size_t p = from; p < to; p++)
		for (size_t w = 0; w < RA_WORDS; w++)
			if (ra[p * RA_WORDS + w] != ra_value(o, phase, p, w))
				fail("seed %" PRIu64 " read-ahead, %s: word %zu of page %zu (homed at "
				     "rank %zu) is %#" PRIx64 ", expected %#" PRIx64 " of phase %u",
				     o->seed, what, w, p, p / RA_PAGES, ra[p * RA_WORDS + w],
				     ra_value(o, phase, p, w), phase);
}

static bool read_ahead_on(void)
{
	const char *env = getenv("PMDSM_READ_AHEAD");

	return !env || !*env || strtoul(env, NULL, 10) > 1;
}

/*
 * An allocation of RA_PAGES pages per rank, block placement (rank r homes
 * block r), the last of the heap.  B (rank 2, or rank 1 with 2 ranks)
 * reads the block of A (rank 0); C (rank 1: B itself with 2 ranks) homes
 * the block after it.
 *
 *   1. Every rank writes its block; barrier.  B reads the first half of
 *      A's block in order: the DSM reads ahead into the second half.
 *   2. Every rank writes its block again; barrier: its write notices must
 *      invalidate the pages read ahead too.  B reads A's block and the
 *      first page of C's in order, and must see phase 2's values: its last
 *      fault in A's block reads ahead up to A's last page and not into C's
 *      (fetched from A, that page would be A's copy, zeros: A never had it).
 *   3. B's pages of A's block are valid, some read ahead; an empty barrier
 *      leaves them so.  A, holding a lock from before that barrier, writes
 *      word 0 of each page of its block and releases; B writes word 1 of
 *      each, then acquires the lock, whose notices make B send its diffs
 *      home after A's writes: a diff against a wrong twin would carry word
 *      0 back and undo A's.  Barrier; A's block must hold both writes.
 *   4. Rank 0 reads the last block, the allocation's end, in order: exactly
 *      RA_PAGES pages fetched (read-ahead stops at the unallocated page).
 */
static void read_ahead_check(const struct options *o)
{
	if (size < 2)
		return;

	const unsigned A = 0, C = 1, B = size > 2 ? 2 : 1, Z = (unsigned)size - 1;
	const unsigned L = 3;   /* a lock */
	size_t pages = (size_t)size * RA_PAGES;
	struct pmdsm_stats st0, st1;

	/* The page after the allocation is unallocated; an allocation there
	 * before, one page per rank larger, left it homed at Z (with up to 33
	 * ranks), so that only its being unallocated stops read-ahead. */
	uint64_t *ra = pmdsm_alloc((pages + (size_t)size) * RA_PAGE, PMDSM_BLOCK);

	if (!ra)
		fail("pmdsm_alloc: %s", strerror(errno));
	call(pmdsm_free(ra), "pmdsm_free");
	if (pmdsm_alloc(pages * RA_PAGE, PMDSM_BLOCK) != ra)
		fail("pmdsm_alloc: not at the place of the allocation just freed");

	/* 1 */
	ra_write_block(o, ra, 1);
	call(pmdsm_barrier(), "pmdsm_barrier");
	if ((unsigned)rank == B) {
		st0 = stats_now();
		ra_read(o, ra, A * RA_PAGES, A * RA_PAGES + RA_PAGES / 2, 1,
			"phase 1, first half of rank 0's block");
		st1 = stats_now();
		if (read_ahead_on() && st1.read_ahead_pages == st0.read_ahead_pages)
			fail("read-ahead: a sequential read of %u pages read none ahead "
			     "(%" PRIu64 " read faults)", RA_PAGES / 2,
			     st1.read_faults - st0.read_faults);
	}
	call(pmdsm_barrier(), "pmdsm_barrier");

	/* 2 */
	ra_write_block(o, ra, 2);
	call(pmdsm_barrier(), "pmdsm_barrier");
	if ((unsigned)rank == B) {
		ra_read(o, ra, A * RA_PAGES, A * RA_PAGES + RA_PAGES, 2,
			"phase 2, rank 0's block after its rewrite");
		ra_read(o, ra, C * RA_PAGES, C * RA_PAGES + 1, 2,
			"phase 2, the first page of the next block (another home)");
	}

	/* 3 */
	if ((unsigned)rank == A)
		call(pmdsm_lock(L), "pmdsm_lock");
	call(pmdsm_barrier(), "pmdsm_barrier");
	if ((unsigned)rank == A) {
		for (size_t p = A * RA_PAGES; p < A * RA_PAGES + RA_PAGES; p++)
			ra[p * RA_WORDS] = ra_value(o, 3, p, 0);
		call(pmdsm_unlock(L), "pmdsm_unlock");
	} else if ((unsigned)rank == B) {
		for (size_t p = A * RA_PAGES; p < A * RA_PAGES + RA_PAGES; p++)
			ra[p * RA_WORDS + 1] = ra_value(o, 3, p, 1);
		call(pmdsm_lock(L), "pmdsm_lock");
		call(pmdsm_unlock(L), "pmdsm_unlock");
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	if ((unsigned)rank == A || (unsigned)rank == B) {
		for (size_t p = A * RA_PAGES; p < A * RA_PAGES + RA_PAGES; p++)
			for (size_t w = 0; w < RA_WORDS; w++) {
				uint64_t want = ra_value(o, w < 2 ? 3 : 2, p, w);

				if (ra[p * RA_WORDS + w] != want)
					fail("seed %" PRIu64 " read-ahead, phase 3: word %zu of page %zu "
					     "(homed at rank 0) is %#" PRIx64 ", expected %#" PRIx64
					     " (written by rank %u%s)", o->seed, w, p,
					     ra[p * RA_WORDS + w], want, w == 0 ? A : w == 1 ? B : A,
					     w < 2 ? " in phase 3" : " in phase 2");
			}
	}
	call(pmdsm_barrier(), "pmdsm_barrier");

	/* 4 */
	if ((unsigned)rank == A) {
		st0 = stats_now();
		ra_read(o, ra, (size_t)Z * RA_PAGES, pages, 2, "phase 4, the allocation's last block");
		st1 = stats_now();
		if (st1.pages_fetched - st0.pages_fetched != RA_PAGES)
			fail("read-ahead: reading the %u pages at the end of an allocation fetched %"
			     PRIu64 " (it must stop at the unallocated page after them)", RA_PAGES,
			     st1.pages_fetched - st0.pages_fetched);
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(ra), "pmdsm_free");
}

static size_t parse_size(const char *s, const char *what)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	switch (*end) {
	case 'K': v <<= 10; end++; break;
	case 'M': v <<= 20; end++; break;
	case 'G': v <<= 30; end++; break;
	default: break;
	}
	if (end == s || *end) {
		fprintf(stderr, "pmdsm-check: %s %s: not a size (a number, K, M or G)\n", what, s);
		exit(2);
	}
	return (size_t)v;
}

/* --placement's names, indexed by enum pmdsm_placement. */
static const char *const placement_names[] = {
	[PMDSM_BLOCK] = "block", [PMDSM_CYCLIC] = "cyclic", [PMDSM_FIRST_TOUCH] = "first-touch",
};

/* --prefetch-mode's names, indexed by enum pmdsm_prefetch_mode. */
static const char *const prefetch_mode_names[] = {
	[PMDSM_PREFETCH_WAIT] = "wait", [PMDSM_PREFETCH_OVERLAP] = "overlap",
};

/* The index of s among an option's n names; else say which they are, and exit. */
static int parse_choice(const char *option, const char *s, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s, names[i]))
			return (int)i;
	fprintf(stderr, "pmdsm-check: %s %s: not one of", option, s);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %s", names[i]);
	fputc('\n', stderr);
	exit(2);
}

#define PARSE_CHOICE(option, s, names) \
	parse_choice(option, s, names, sizeof(names) / sizeof(names[0]))

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pmdsm-check [--seed N] [--rounds N] [--bytes SIZE] [--counters N]\n"
		"                   [--adds N] [--heap SIZE] [--placement P]\n"
		"                   [--prefetch-mode wait|overlap] [--quiet]\n"
		"Runs a generated race-free program on the DSM and checks every value it\n"
		"reads against the sequential result, then the DSM's read-ahead (2 ranks\n"
		"or more).  Run it on every rank of a job (scrun, srun --mpi=pmix, mpirun).\n"
		"  --seed N       the program (default: 1)\n"
		"  --rounds N     barrier and lock rounds, and rounds of barriers of a few\n"
		"                 (each rank and its two neighbours in a ring) (default: 8)\n"
		"  --bytes SIZE   bytes of the shared array written between barriers (default 64K)\n"
		"  --counters N   shared counters added to under locks (default: 512)\n"
		"  --adds N       additions per rank per round (default: 200)\n"
		"  --heap SIZE    also fill SIZE bytes, each rank its block, and read every block\n"
		"                 back on the next rank\n"
		"                 (PMDSM_HEAP_SIZE must be larger)\n"
		"  --placement P  homes of the array's and the counters' pages: cyclic\n"
		"                 (default), block or first-touch\n"
		"  --prefetch-mode M  what barriers do with the pages they prefetch\n"
		"                 (pmdsm_prefetch_mode): wait for them, or overlap (leave\n"
		"                 them in flight); checked by the counters at the end\n"
		"                 (default: the library's, PMDSM_PREFETCH_MODE)\n"
		"  --quiet        no JSON line\n"
		"Rank 0 prints, once every check has passed, one JSON line: ok, ranks,\n"
		"seed, rounds, bytes, heap, placement, write_detect (the method the DSM used: the\n"
		"library's default, or PMDSM_WRITE_DETECT=segv|uffd-async|uffd-wp),\n"
		"seconds, and rank 0's counters.  A failed check prints the seed and\n"
		"the value that differs, and exits 1.\n");
}

/*
 * Every barrier round drops pages that ranks read in the round before: with
 * prefetch on, some come back at the barrier and are read before the next
 * (a rank's own share may all be dropped again by a lock's notices first,
 * so the job's sum is what is checked, gathered through the DSM itself).
 * Left in flight by the barriers (--prefetch-mode overlap): some in the
 * job; waited for (wait): none in any rank.
 */
static void prefetch_check(const struct options *o, const struct pmdsm_stats *st)
{
	const char *pf = getenv("PMDSM_PREFETCH");

	if (size < 2 || o->rounds < 2 || (pf && strcmp(pf, "0") == 0))
		return;

	uint64_t *used = pmdsm_alloc((size_t)size * 3 * sizeof(uint64_t), PMDSM_CYCLIC);

	if (!used)
		fail("pmdsm_alloc: %s", strerror(errno));
	if (o->prefetch_mode == PMDSM_PREFETCH_WAIT && st->prefetch_overlapped)
		fail("seed %" PRIu64 ": %" PRIu64 " prefetched pages left in flight by barriers "
		     "told to wait for them", o->seed, st->prefetch_overlapped);
	call(pmdsm_lock(0), "pmdsm_lock");
	used[3 * rank] = st->prefetched_pages;
	used[3 * rank + 1] = st->prefetch_used;
	used[3 * rank + 2] = st->prefetch_overlapped;
	call(pmdsm_unlock(0), "pmdsm_unlock");
	call(pmdsm_barrier(), "pmdsm_barrier");
	if (rank == 0) {
		uint64_t fetched = 0, read = 0, overlapped = 0;

		for (int r = 0; r < size; r++) {
			fetched += used[3 * r];
			read += used[3 * r + 1];
			overlapped += used[3 * r + 2];
		}
		if (fetched == 0 || read == 0)
			fail("seed %" PRIu64 ": %" PRIu64 " pages prefetched at barriers, %" PRIu64
			     " of them read: prefetch did not work", o->seed, fetched, read);
		if (o->prefetch_mode == PMDSM_PREFETCH_OVERLAP && overlapped == 0)
			fail("seed %" PRIu64 ": %" PRIu64 " pages prefetched at barriers, none left "
			     "in flight: --prefetch-mode overlap did not work", o->seed, fetched);
	}
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_free(used), "pmdsm_free");
}

int main(int argc, char **argv)
{
	struct options o = { .seed = 1, .rounds = 8, .bytes = 64 << 10, .counters = 512,
			     .adds = 200, .placement = PMDSM_CYCLIC, .prefetch_mode = -1 };
	static const struct option longs[] = {
		{ "seed", required_argument, NULL, 's' }, { "rounds", required_argument, NULL, 'r' },
		{ "bytes", required_argument, NULL, 'b' }, { "counters", required_argument, NULL, 'c' },
		{ "adds", required_argument, NULL, 'a' }, { "heap", required_argument, NULL, 'H' },
		{ "placement", required_argument, NULL, 'p' },
		{ "prefetch-mode", required_argument, NULL, 'm' },
		{ "quiet", no_argument, NULL, 'q' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int opt;

	while ((opt = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (opt) {
		case 's': o.seed = strtoull(optarg, NULL, 0); break;
		case 'r': o.rounds = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'b': o.bytes = parse_size(optarg, "--bytes"); break;
		case 'c': o.counters = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'a': o.adds = (unsigned)strtoul(optarg, NULL, 0); break;
		case 'H': o.heap = parse_size(optarg, "--heap"); break;
		case 'p':
			o.placement = (enum pmdsm_placement)PARSE_CHOICE("--placement", optarg,
									   placement_names);
			break;
		case 'm':
			o.prefetch_mode = PARSE_CHOICE("--prefetch-mode", optarg, prefetch_mode_names);
			break;
		case 'q': o.quiet = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc || !o.bytes || !o.counters) {
		usage(stderr);
		return 2;
	}

	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	call(pmdsm_init(NULL), "pmdsm_init");
	rank = pmdsm_rank();
	size = pmdsm_size();
	if (o.prefetch_mode >= 0)
		call(pmdsm_prefetch_mode((enum pmdsm_prefetch_mode)o.prefetch_mode),
		     "pmdsm_prefetch_mode");

	uint8_t *data = pmdsm_alloc(o.bytes, o.placement);
	uint64_t *ctr = pmdsm_alloc(o.counters * sizeof(uint64_t), o.placement);
	uint8_t *expect = calloc(o.bytes, 1);
	uint64_t *expect_ctr = calloc(o.counters, sizeof(uint64_t));

	if (!data || !ctr)
		fail("pmdsm_alloc: %s", strerror(errno));
	if (!expect || !expect_ctr)
		fail("out of memory");
	for (unsigned r = 0; r < o.rounds; r++) {
		barrier_rounds(&o, data, expect, r);
		lock_rounds(&o, ctr, expect_ctr, r);
	}
	peer_check(&o);
	read_ahead_check(&o);
	home_copy_check(&o);
	first_touch_check(&o);
	cold_check(&o);
	scatter_check(&o);
	if (o.heap)
		heap_check(&o);

	struct pmdsm_stats st;

	call(pmdsm_stats_get(&st, sizeof(st)), "pmdsm_stats_get");
	prefetch_check(&o, &st);

	const char *write_detect = pmdsm_write_detect();      /* a constant string */

	call(pmdsm_finalize(), "pmdsm_finalize");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	if (rank == 0 && !o.quiet)
		printf("{\"ok\": true, \"ranks\": %d, \"seed\": %" PRIu64 ", \"rounds\": %u, "
		       "\"bytes\": %zu, \"heap\": %zu, \"placement\": \"%s\", "
		       "\"write_detect\": \"%s\", "
		       "\"seconds\": %.3f, \"rank0\": "
		       "{\"read_faults\": %" PRIu64 ", \"write_faults\": %" PRIu64
		       ", \"diffs_sent\": %" PRIu64 ", \"diffs_applied\": %" PRIu64
		       ", \"invalidations\": %" PRIu64 ", \"locks\": %" PRIu64 "}}\n",
		       size, o.seed, o.rounds, o.bytes, o.heap, placement_names[o.placement],
		       write_detect,
		       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9,
		       st.read_faults, st.write_faults, st.diffs_sent, st.diffs_applied,
		       st.invalidations, st.locks);
	free(expect);
	free(expect_ctr);
	return 0;
}
