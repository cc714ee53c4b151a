/* SPDX-License-Identifier: MIT */
/*
 * push.c - pages a home sends to the peers that read them, at a barrier of
 * a few (docs/dsm/design.md, "Pushes").
 *
 * A rank that fetches again, at a barrier of a few, a page homed at one of
 * the peers it met asks that home to push it from then on (SUBSCRIBE).
 * The home, when it next meets the rank and owes it the page's notice
 * (it wrote the page), sends the page's bytes before the notice (PUSH):
 * it is running then, while a fetch would wait for the home's CPU.  The
 * reader keeps what comes (the stash) and, at its departure, takes a
 * pushed page instead of fetching it (PREFETCHED, as a fetched one).  A
 * request lapses as a prefetch does: a page a probing departure left
 * closed and nobody touched until the next departure is asked no more
 * (UNSUBSCRIBE).
 *
 * A pushed page is the home's copy when the home met us: it holds the
 * home's writes and what other ranks' diffs had reached it by then.  So it
 * is taken only when the home's writes are all the notice is for: never a
 * page this rank writes (its own diff may land at the home after the
 * push left), nor one another rank than the home ever told us it wrote
 * (directly, or through a lock); those pages are fetched, as before.
 */
#include "dsm_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int dsm_push_open(struct dsm *d)
{
	int err = pageset_init(&d->subscribed, d->npages);

	err = err ?: pageset_init(&d->no_push, d->npages);
	err = err ?: pageset_init(&d->scratch, d->npages);
	if (err)
		return err;
	d->subs = calloc((size_t)d->size, sizeof(*d->subs));
	if (!d->subs)
		return -ENOMEM;
	d->stash_cap = d->push && dsm_push_per_msg(d) ? d->prefetch_max : 0;
	if (d->stash_cap) {
		d->stash = calloc(d->stash_cap, sizeof(*d->stash));
		d->stash_bytes = malloc((size_t)d->stash_cap * DSM_PAGE);
		if (!d->stash || !d->stash_bytes)
			return -ENOMEM;
	}
	return 0;
}

void dsm_push_close(struct dsm *d)
{
	pageset_fini(&d->subscribed);
	pageset_fini(&d->no_push);
	pageset_fini(&d->scratch);
	for (int r = 0; d->subs && r < d->size; r++)
		pageset_fini(&d->subs[r]);
	DSM_FREE(d->subs);
	DSM_FREE(d->stash);
	DSM_FREE(d->stash_bytes);
	d->nstash = d->stash_cap = 0;
}

void dsm_push_forget(struct dsm *d, uint32_t first, uint32_t n)
{
	for (uint32_t p = first; p < first + n; p++) {
		pageset_del(&d->subscribed, p);
		pageset_del(&d->no_push, p);
	}
	for (int r = 0; r < d->size; r++)
		for (uint32_t p = first; d->subs[r].bits && p < first + n; p++)
			pageset_del(&d->subs[r], p);
	/* Stashed pushes are a past epoch's by now (the free's barrier). */
}

/* At most this many pages per PUSH (fewer if PM's messages are smaller). */
#define PUSH_MAX_PAGES 16u

uint32_t dsm_push_per_msg(const struct dsm *d)
{
	size_t room = d->max_msg > sizeof(struct dsm_hdr) ? d->max_msg - sizeof(struct dsm_hdr) : 0;
	size_t n = room / (sizeof(uint32_t) + DSM_PAGE);

	return n < PUSH_MAX_PAGES ? (uint32_t)n : PUSH_MAX_PAGES;
}

/* ---- the home's half ---- */

void dsm_push_to(struct dsm *d, int peer, const struct pageset *owed)
{
	const struct pageset *s = &d->subs[peer];
	uint32_t pages[PUSH_MAX_PAGES], n = 0, per = dsm_push_per_msg(d);

	if (!s->bits || !s->count || !owed->count || !per)
		return;
	for (uint32_t p = pageset_next(s, 0); p != PAGESET_NONE; p = pageset_next(s, p + 1)) {
		if (!pageset_has(owed, p) || d->home[p] != d->rank || d->state[p] == PAGE_UNUSED)
			continue;
		pages[n++] = p;
		if (n == per) {
			dsm_send_pages(d, peer, pages, n);
			d->st->pushed_pages += n;
			n = 0;
		}
	}
	if (n) {
		dsm_send_pages(d, peer, pages, n);
		d->st->pushed_pages += n;
	}
}

void dsm_on_subscribe(struct dsm *d, int peer, bool subscribe, const uint8_t *p, size_t len)
{
	struct pageset *s = &d->subs[peer];

	if (!s->bits && pageset_init(s, d->npages))
		dsm_fatal("no memory for the pages rank %d asks to be pushed", peer);
	if (subscribe ? pageset_decode(s, p, len) : pageset_decode_del(s, p, len)) {
		dsm_log("dropped a malformed request %s pushes from rank %d",
			subscribe ? "for" : "to stop", peer);
		d->st->dropped++;
	}
}

/* ---- the reader's half ---- */

static struct dsm_stashed *stashed(struct dsm *d, uint32_t page)
{
	for (uint32_t i = 0; i < d->nstash; i++)
		if (d->stash[i].page == page)
			return &d->stash[i];
	return NULL;
}

static uint8_t *stash_page(struct dsm *d, const struct dsm_stashed *e)
{
	return d->stash_bytes + (size_t)(e - d->stash) * DSM_PAGE;
}

void dsm_on_push(struct dsm *d, int peer, const struct dsm_hdr *h, const uint8_t *p, size_t len)
{
	uint32_t n = h->arg;

	if (n == 0 || n > PUSH_MAX_PAGES || len != (size_t)n * (sizeof(uint32_t) + DSM_PAGE)) {
		dsm_log("dropped a malformed push of %u pages (%zu bytes) from rank %d", n, len,
			peer);
		d->st->dropped++;
		return;
	}
	if (h->epoch < d->epoch)
		return;         /* a barrier of all since: moot */

	const uint8_t *bytes = p + (size_t)n * sizeof(uint32_t);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t page;

		memcpy(&page, p + (size_t)i * sizeof(uint32_t), sizeof(page));
		if (page >= d->npages || d->home[page] != peer) {
			dsm_log("dropped a push of page %u from rank %d, not its home", page, peer);
			d->st->dropped++;
			continue;
		}

		/* A newer push of a page replaces the older; with no room it
		 * is not kept, and the page is fetched. */
		struct dsm_stashed *e = stashed(d, page);

		if (!e && d->nstash < d->stash_cap)
			e = &d->stash[d->nstash++];
		if (!e)
			continue;
		*e = (struct dsm_stashed){ .page = page, .epoch = h->epoch, .from = peer };
		memcpy(stash_page(d, e), bytes + (size_t)i * DSM_PAGE, DSM_PAGE);
	}
}

void dsm_push_take(struct dsm *d, const struct pageset *notices)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < d->nstash; i++) {
		struct dsm_stashed *e = &d->stash[i];

		if (e->epoch < d->epoch)
			continue;
		if (!pageset_has(notices, e->page)) {
			/* A push for a later meeting: its notice has not come. */
			if (kept != i) {
				d->stash[kept] = *e;
				memcpy(stash_page(d, &d->stash[kept]), stash_page(d, e), DSM_PAGE);
			}
			kept++;
			continue;
		}
		/* Nor a page no longer asked for: a push the home sent before
		 * our UNSUBSCRIBE came would open it again, and the next drop
		 * would fetch it and ask for it again. */
		if (d->state[e->page] != PAGE_INVALID || d->home[e->page] != e->from ||
		    pageset_has(&d->no_push, e->page) || !pageset_has(&d->subscribed, e->page))
			continue;
		memcpy(dsm_page_alias(d, e->page), stash_page(d, e), DSM_PAGE);
		/* As a prefetched page: open, or closed until the first access. */
		dsm_prefetched_valid(d, e->page, 1);
		d->st->push_taken++;
	}
	d->nstash = kept;
}

/* The pages gathered in scratch for home, as runs of a message of type. */
static void send_gathered(struct dsm *d, int home, uint8_t type)
{
	if (d->scratch.count)
		dsm_send_runs(d, home, type, 0, d->epoch, &d->scratch);
	pageset_clear(&d->scratch);
}

void dsm_push_lapse(struct dsm *d, const struct dsm_peers *w, const struct pageset *notices)
{
	if (!d->stash_cap || !d->subscribed.count)
		return;
	for (unsigned k = 0; k < w->n; k++) {
		int home = w->peers[k];

		for (uint32_t p = pageset_next(notices, 0); p != PAGESET_NONE;
		     p = pageset_next(notices, p + 1))
			if (d->home[p] == home && d->state[p] == PAGE_PREFETCHED &&
			    pageset_has(&d->subscribed, p)) {
				pageset_del(&d->subscribed, p);
				pageset_add(&d->scratch, p);
			}
		send_gathered(d, home, MSG_UNSUBSCRIBE);
	}
}

void dsm_push_subscribe(struct dsm *d, const struct dsm_peers *w, const uint32_t *pages,
			uint32_t n)
{
	if (!d->stash_cap)
		return;
	for (unsigned k = 0; k < w->n; k++) {
		int home = w->peers[k];

		for (uint32_t i = 0; i < n; i++)
			if (d->home[pages[i]] == home && !pageset_has(&d->no_push, pages[i]) &&
			    pageset_add(&d->subscribed, pages[i]))
				pageset_add(&d->scratch, pages[i]);
		send_gathered(d, home, MSG_SUBSCRIBE);
	}
}
