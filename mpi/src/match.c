/* SPDX-License-Identifier: MIT */
/*
 * match.c - tag matching: receives posted in posting order, unexpected
 * messages in arrival order, one pair of queues for tagged and one for
 * untagged traffic.  With PM's in-order delivery per pair this gives
 * FI_ORDER_SAS.  Pure bookkeeping: nothing here calls PM.
 */
#include "pmfi.h"

void pmfi_match_init(struct pmfi_match *m)
{
	for (int i = 0; i < 2; i++) {
		pmfi_list_init(&m->posted[i]);
		pmfi_list_init(&m->unexp[i]);
	}
}

struct pmfi_req *pmfi_match_posted(struct pmfi_match *m, bool tagged, int peer, uint64_t tag)
{
	struct pmfi_list *q = &m->posted[tagged];

	for (struct pmfi_list *l = q->next; l != q; l = l->next) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		if ((r->peer < 0 || r->peer == peer) &&
		    (!tagged || pmfi_tag_matches(r->tag, r->ignore, tag))) {
			if (!(r->flags & FI_MULTI_RECV))
				pmfi_list_del(l);
			return r;
		}
	}
	return NULL;
}

struct pmfi_unexp *pmfi_match_unexp(struct pmfi_match *m, const struct pmfi_req *r, bool peek)
{
	struct pmfi_list *q = &m->unexp[r->tagged];

	for (struct pmfi_list *l = q->next; l != q; l = l->next) {
		struct pmfi_unexp *u = pmfi_container_of(l, struct pmfi_unexp, link);

		if ((r->peer < 0 || r->peer == u->peer) &&
		    (!r->tagged || pmfi_tag_matches(r->tag, r->ignore, u->tag))) {
			if (!peek)
				pmfi_list_del(l);
			return u;
		}
	}
	return NULL;
}

struct pmfi_req *pmfi_match_cancel(struct pmfi_match *m, const void *context)
{
	for (int t = 0; t < 2; t++) {
		struct pmfi_list *q = &m->posted[t];

		for (struct pmfi_list *l = q->next; l != q; l = l->next) {
			struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

			if (r->context == context) {
				pmfi_list_del(l);
				return r;
			}
		}
	}
	return NULL;
}
