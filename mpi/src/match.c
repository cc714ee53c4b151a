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

/* A receive directed at a source (peer >= 0) names one endpoint of one
 * process, as an fi_addr_t does: the PM peer and the endpoint's index. */
static bool source_matches(const struct pmfi_req *r, int peer, uint16_t peer_ep)
{
	return r->peer < 0 || (r->peer == peer && r->peer_ep == peer_ep);
}

struct pmfi_req *pmfi_match_posted(struct pmfi_match *m, bool tagged, int peer,
				   uint16_t peer_ep, uint64_t tag)
{
	struct pmfi_list *q = &m->posted[tagged];

	for (struct pmfi_list *l = q->next; l != q; l = l->next) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		if (source_matches(r, peer, peer_ep) &&
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

		if (source_matches(r, u->peer, u->peer_ep) &&
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
