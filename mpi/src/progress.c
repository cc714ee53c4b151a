/* SPDX-License-Identifier: MIT */
/*
 * progress.c - moving data: sending to PM (eager, rendezvous, FIN), taking
 * PM's messages and matching them, reading rendezvous payloads, and the
 * completions all of that produces (design §§4-7).
 *
 * Every message starts with struct pmfi_hdr.  Eager messages carry their
 * payload; a rendezvous send exposes its buffer and sends RTS {rkey,
 * cookie}; the matching receiver pm_read()s straight into its buffer and
 * answers FIN {cookie, status}, on which the sender completes.
 */
#include "pmfi.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

#define PMFI_PROGRESS_BATCH 64
#define PMFI_PEER_CHECK_PASSES 4096

static bool tx_wants_completion(const struct pmfi_ep *ep, uint64_t flags)
{
	return !ep->tx_selective || (flags & FI_COMPLETION);
}

static bool rx_wants_completion(const struct pmfi_ep *ep, uint64_t flags)
{
	return !ep->rx_selective || (flags & FI_COMPLETION);
}

/* ---- completions ---- */

void pmfi_send_complete(struct pmfi_ep *ep, struct pmfi_req *r, int err)
{
	struct fi_cq_tagged_entry e = {
		.op_context = r->context,
		.flags = (r->tagged ? FI_TAGGED : FI_MSG) | FI_SEND,
	};

	if (err)
		pmfi_cq_write_err(ep->tx_cq, &e, FI_EIO, -err, 0);
	else if (tx_wants_completion(ep, r->flags))
		pmfi_cq_write(ep->tx_cq, &e, FI_ADDR_NOTAVAIL);
}

int pmfi_recv_error(struct pmfi_ep *ep, void *context, bool tagged, void *buf, uint64_t tag,
		    int err, int prov_errno)
{
	struct fi_cq_tagged_entry e = {
		.op_context = context,
		.flags = (tagged ? FI_TAGGED : FI_MSG) | FI_RECV,
		.buf = buf,
		.tag = tag,
	};

	return pmfi_cq_write_err(ep->rx_cq, &e, err, prov_errno, 0);
}

void pmfi_recv_complete(struct pmfi_ep *ep, struct pmfi_req *r, size_t msg_len, uint64_t tag,
			uint64_t data, bool has_data, int err)
{
	size_t got = msg_len < r->len ? msg_len : r->len;
	struct fi_cq_tagged_entry e = {
		.op_context = r->context,
		.flags = (r->tagged ? FI_TAGGED : FI_MSG) | FI_RECV |
			 (has_data ? FI_REMOTE_CQ_DATA : 0) | (r->multi_last ? FI_MULTI_RECV : 0),
		.len = got,
		.buf = r->buf,
		.data = has_data ? data : 0,
		.tag = r->tagged ? tag : 0,
	};

	if (err)
		pmfi_cq_write_err(ep->rx_cq, &e, FI_EIO, -err, 0);
	else if (msg_len > r->len)
		pmfi_cq_write_err(ep->rx_cq, &e, FI_ETRUNC, 0, msg_len - r->len);
	else if (rx_wants_completion(ep, r->flags))
		pmfi_cq_write(ep->rx_cq, &e, pmfi_av_source(ep->av, r->peer, r->peer_ep));
}

/* ---- sending ---- */

/* One PM message: header and payload; 0, -EAGAIN, or another PM error. */
int pmfi_send_eager(struct pmfi_ep *ep, int peer, const struct pmfi_hdr *h, const void *body,
		    size_t len)
{
	void *buf;
	int err = pm_send_buffer(ep->pm, peer, sizeof(*h) + len, &buf);

	if (err)
		return err;
	memcpy(buf, h, sizeof(*h));
	if (len)
		memcpy((char *)buf + sizeof(*h), body, len);
	return pm_send(ep->pm, peer, sizeof(*h) + len);
}

/* Try to hand the head request of a peer's queue to PM. */
static int transmit(struct pmfi_ep *ep, struct pmfi_req *r)
{
	if (r->kind == REQ_CTRL)
		return pmfi_send_eager(ep, r->peer, &r->hdr, NULL, 0);
	if (r->hdr.op == PMFI_OP_EAGER) {
		if (tx_wants_completion(ep, r->flags) && !pmfi_cq_room(ep->tx_cq, 1))
			return -EAGAIN;
		return pmfi_send_eager(ep, r->peer, &r->hdr, r->buf, r->msg_len);
	}
	/* Rendezvous: expose the buffer once, then announce it.  An empty
	 * message (a rendezvous for its delivery completion: MPICH's
	 * synchronous sends) exposes nothing: the receiver reads nothing and
	 * answers FIN at once. */
	if (!r->mr) {
		if (r->msg_len) {
			int err = pm_mr_register(ep->pm, r->buf, r->msg_len, &r->mr);

			if (err) {
				r->mr = NULL;
				/* Every window is taken by sends awaiting FIN: wait. */
				return err == -ENOSPC || err == -ENOMEM ? -EAGAIN : err;
			}
		}
		r->cookie = ++ep->cookie_gen;
	}

	struct pmfi_rts rts = { .rkey = htole64(r->mr ? pm_mr_key(r->mr) : 0),
				.cookie = htole64(r->cookie) };

	return pmfi_send_eager(ep, r->peer, &r->hdr, &rts, sizeof(rts));
}

/* A send is over: PM took it (eager), the receiver said FIN, or it failed. */
static void send_done(struct pmfi_ep *ep, struct pmfi_req *r, int err)
{
	if (r->mr) {
		pm_mr_deregister(ep->pm, r->mr);
		r->mr = NULL;
	}
	pmfi_send_complete(ep, r, err);
	pmfi_req_put(ep, r);
}

/* What follows a request's hand-off to PM, or its failure. */
static void transmitted(struct pmfi_ep *ep, struct pmfi_req *r, int err)
{
	if (r->kind == REQ_CTRL) {
		pmfi_req_put(ep, r);
		return;
	}
	if (!err && r->hdr.op == PMFI_OP_RTS) {
		pmfi_list_add_tail(&ep->rndv, &r->link);
		return;
	}
	send_done(ep, r, err);
}

static void flush_peer(struct pmfi_ep *ep, struct pmfi_peer_q *q)
{
	while (!pmfi_list_empty(&q->pending)) {
		struct pmfi_req *r = pmfi_container_of(q->pending.next, struct pmfi_req, link);
		int err = transmit(ep, r);

		if (err == -EAGAIN)
			return;
		pmfi_list_del(&r->link);
		transmitted(ep, r, err);
	}
	pmfi_list_del(&q->active);
}

static void queue(struct pmfi_ep *ep, struct pmfi_req *r)
{
	struct pmfi_peer_q *q = &ep->peers[r->peer];

	if (pmfi_list_empty(&q->pending))
		pmfi_list_add_tail(&ep->active, &q->active);
	pmfi_list_add_tail(&q->pending, &r->link);
}

ssize_t pmfi_send_post(struct pmfi_ep *ep, struct pmfi_req *r)
{
	struct pmfi_peer_q *q = &ep->peers[r->peer];

	queue(ep, r);
	if (q->pending.next == &r->link)
		flush_peer(ep, q);
	return 0;
}

/* FIN {cookie, status} to the sender of a rendezvous (endpoint peer_ep of
 * peer); r becomes the control request that carries it when PM has no room
 * now. */
static void send_fin(struct pmfi_ep *ep, struct pmfi_req *r, int peer, uint16_t peer_ep,
		     uint64_t cookie, int status)
{
	struct pmfi_hdr h = {
		.op = PMFI_OP_FIN,
		.dst_ep = htole16(peer_ep),
		.src_ep = htole16((uint16_t)ep->index),
		.data = htole64((uint64_t)(int64_t)status),
		.arg = htole64(cookie),
	};
	struct pmfi_peer_q *q = &ep->peers[peer];

	if (pmfi_list_empty(&q->pending) && pmfi_send_eager(ep, peer, &h, NULL, 0) != -EAGAIN) {
		pmfi_req_put(ep, r);
		return;
	}
	r->kind = REQ_CTRL;
	r->peer = peer;
	r->hdr = h;
	queue(ep, r);
}

/* ---- receiving ---- */

/* A payload into a receive buffer; a zero-length receive may have none
 * (MPICH posts them with NULL). */
static void copy_in(void *dst, const void *src, size_t n)
{
	if (n)
		memcpy(dst, src, n);
}

static void read_done(struct pmfi_ep *ep, struct pmfi_req *r, int status)
{
	pmfi_recv_complete(ep, r, r->rts_len, r->tag, r->data, r->flags & FI_REMOTE_CQ_DATA,
			   status);
	send_fin(ep, r, r->peer, r->peer_ep, r->cookie, status);
}

/* Start reading an RTS's payload into receive r. */
static void start_read(struct pmfi_ep *ep, struct pmfi_req *r)
{
	size_t n = r->rts_len < r->len ? r->rts_len : r->len;

	if (n == 0) {
		read_done(ep, r, 0);
		return;
	}
	int err = pm_read(ep->pm, r->peer, r->buf, n, r->rkey, 0, &r->op);

	if (err == -EAGAIN) {
		pmfi_list_add_tail(&ep->read_wait, &r->link);
		return;
	}
	if (err) {
		read_done(ep, r, err);
		return;
	}
	/* shm reads are done when pm_read returns: finish now, not a pass later. */
	if (r->op.status != 1) {
		read_done(ep, r, r->op.status);
		return;
	}
	pmfi_list_add_tail(&ep->reads, &r->link);
}

/* Receive r takes an RTS now: its tag and source become the message's. */
static void take_rts(struct pmfi_ep *ep, struct pmfi_req *r, int peer, uint16_t peer_ep,
		     uint64_t tag, uint64_t data, bool has_data, size_t len,
		     const struct pmfi_rts *rts)
{
	r->peer = peer;
	r->peer_ep = peer_ep;
	r->tag = tag;
	r->data = data;
	r->flags = (r->flags & ~FI_REMOTE_CQ_DATA) | (has_data ? FI_REMOTE_CQ_DATA : 0);
	r->rts_len = len;
	r->rkey = le64toh(rts->rkey);
	r->cookie = le64toh(rts->cookie);
	start_read(ep, r);
}

void pmfi_recv_take(struct pmfi_ep *ep, struct pmfi_req *r, struct pmfi_unexp *u)
{
	if (u->op == PMFI_OP_EAGER) {
		copy_in(r->buf, u->payload, u->len < r->len ? u->len : r->len);
		r->peer = u->peer;
		r->peer_ep = u->peer_ep;
		pmfi_recv_complete(ep, r, u->len, u->tag, u->data, u->has_data, 0);
		pmfi_req_put(ep, r);
	} else {
		take_rts(ep, r, u->peer, u->peer_ep, u->tag, u->data, u->has_data, u->len,
			 &u->rts);
	}
	free(u);
}

/* ---- FI_MULTI_RECV: one posted buffer, many messages ---- */

/* Messages start 8-byte aligned in a multi-receive buffer. */
#define PMFI_MULTI_ALIGN 8

/* Multi-receive buffer m has taken n more bytes: when less than the
 * endpoint's minimum is left it is released (unlinked; true), and the
 * receive that used it up completes with FI_MULTI_RECV. */
static bool multi_advance(struct pmfi_ep *ep, struct pmfi_req *m, size_t n)
{
	size_t off = (m->off + n + PMFI_MULTI_ALIGN - 1) & ~(size_t)(PMFI_MULTI_ALIGN - 1);

	m->off = off < m->len ? off : m->len;
	ep->multi_msgs++;
	if (m->len - m->off >= ep->min_multi_recv && m->off < m->len)
		return false;
	pmfi_list_del(&m->link);
	ep->multi_used_up++;
	return true;
}

/* An eager message into m: copied at its offset and completed at once (a
 * longer one than the room left is truncated, FI_ETRUNC).  True when it
 * used m up (m is then back in the pool). */
static bool multi_eager(struct pmfi_ep *ep, struct pmfi_req *m, int peer, uint16_t peer_ep,
			uint64_t data, bool has_data, const void *body, size_t len)
{
	size_t left = m->len - m->off, got = len < left ? len : left;
	struct pmfi_req slice = {
		.kind = REQ_RECV, .context = m->context, .flags = m->flags,
		.buf = (char *)m->buf + m->off, .len = got, .peer = peer, .peer_ep = peer_ep,
	};

	if (got)
		memcpy(slice.buf, body, got);
	slice.multi_last = multi_advance(ep, m, got);
	pmfi_recv_complete(ep, &slice, len, 0, data, has_data, 0);
	if (slice.multi_last)
		pmfi_req_put(ep, m);
	return slice.multi_last;
}

/* An RTS into m: a request of its own reads the payload into m's next
 * bytes and completes when the read is done.  -1 when the pool has no
 * request for it (nothing changed); else 1 when it used m up, 0 if not. */
static int multi_rts(struct pmfi_ep *ep, struct pmfi_req *m, int peer, uint16_t peer_ep,
		     uint64_t data, bool has_data, size_t msg_len, const struct pmfi_rts *rts)
{
	struct pmfi_req *r = pmfi_req_get(ep);

	if (!r)
		return -1;

	size_t left = m->len - m->off;

	*r = (struct pmfi_req){
		.kind = REQ_RECV, .context = m->context, .flags = m->flags & ~FI_MULTI_RECV,
		.buf = (char *)m->buf + m->off, .len = msg_len < left ? msg_len : left,
		.peer = peer,
	};
	pmfi_list_init(&r->link);
	r->multi_last = multi_advance(ep, m, r->len);
	if (r->multi_last)
		pmfi_req_put(ep, m);
	bool last = r->multi_last;

	take_rts(ep, r, peer, peer_ep, 0, data, has_data, msg_len, rts);
	return last;
}

void pmfi_multi_drain(struct pmfi_ep *ep, struct pmfi_req *m)
{
	for (;;) {
		struct pmfi_unexp *u = pmfi_match_unexp(&ep->match, m, true);

		if (!u)
			return;
		if (!pmfi_cq_room(ep->rx_cq, 1)) {
			ep->multi_retry = true;
			return;
		}
		int used_up;

		if (u->op == PMFI_OP_EAGER) {
			used_up = multi_eager(ep, m, u->peer, u->peer_ep, u->data, u->has_data,
					      u->payload, u->len);
		} else {
			used_up = multi_rts(ep, m, u->peer, u->peer_ep, u->data, u->has_data, u->len,
					    &u->rts);
			if (used_up < 0) {
				ep->multi_retry = true;
				return;
			}
		}
		pmfi_list_del(&u->link);
		free(u);
		if (used_up)
			return;
	}
}

/* Unexpected messages that found no room in a multi-receive buffer before:
 * the first buffer posted takes them now. */
static void multi_retry(struct pmfi_ep *ep)
{
	struct pmfi_list *q = &ep->match.posted[0];

	ep->multi_retry = false;
	for (struct pmfi_list *l = q->next; l != q; l = l->next) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		if (r->flags & FI_MULTI_RECV) {
			pmfi_multi_drain(ep, r);
			return;
		}
	}
}

static void unexpected(struct pmfi_ep *ep, int peer, const struct pmfi_hdr *h, bool tagged,
		       const void *body, size_t len)
{
	size_t copy = h->op == PMFI_OP_EAGER ? len : 0;
	struct pmfi_unexp *u = malloc(sizeof(*u) + copy);

	if (!u) {
		/* Nowhere to keep it: the message is lost, and said so. */
		PMFI_WARN("no memory for an unexpected message from %d: dropped", peer);
		ep->dropped++;
		return;
	}
	u->peer = peer;
	u->peer_ep = le16toh(h->src_ep);
	u->op = h->op;
	u->tagged = tagged;
	u->tag = le64toh(h->tag);
	u->data = le64toh(h->data);
	u->has_data = h->flags & PMFI_HDR_CQ_DATA;
	if (h->op == PMFI_OP_EAGER) {
		u->len = len;
		memcpy(u->payload, body, len);
	} else {
		u->len = le64toh(h->arg);
		memcpy(&u->rts, body, sizeof(u->rts));
	}
	pmfi_list_add_tail(&ep->match.unexp[tagged], &u->link);
	ep->match.unexp_count++;
	ep->match.unexp_bytes += copy;
}

void pmfi_unexp_discard(struct pmfi_ep *ep, struct pmfi_unexp *u)
{
	if (u->op == PMFI_OP_RTS) {
		/* The sender waits for FIN to complete: tell it we are done. */
		struct pmfi_req *r = pmfi_req_get(ep);

		if (r)
			send_fin(ep, r, u->peer, u->peer_ep, le64toh(u->rts.cookie), 0);
		else
			PMFI_WARN("no request for the FIN of a discarded message from %d",
				  u->peer);
	}
	free(u);
}

static void on_fin(struct pmfi_ep *ep, int peer, const struct pmfi_hdr *h)
{
	uint64_t cookie = le64toh(h->arg);

	for (struct pmfi_list *l = ep->rndv.next; l != &ep->rndv; l = l->next) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		if (r->peer == peer && r->cookie == cookie) {
			pmfi_list_del(l);
			send_done(ep, r, (int)(int64_t)le64toh(h->data));
			return;
		}
	}
	ep->dropped++;
}

/* One message from PM: match it, keep it, or drop it. */
static void dispatch(struct pmfi_ep *ep, const struct pm_msg *m)
{
	struct pmfi_hdr h;

	if (m->len < sizeof(h)) {
		ep->dropped++;
		return;
	}
	memcpy(&h, m->data, sizeof(h));

	const char *body = (const char *)m->data + sizeof(h);
	size_t len = m->len - sizeof(h);
	bool tagged = !(h.flags & PMFI_HDR_UNTAGGED);
	uint16_t src_ep = le16toh(h.src_ep);

	if (le16toh(h.dst_ep) != ep->index || src_ep >= PMFI_MAX_EPS || (h.op == PMFI_OP_RTS && len < sizeof(struct pmfi_rts))) {
		ep->dropped++;
		return;
	}
	switch (h.op) {
	case PMFI_OP_EAGER:
	case PMFI_OP_RTS: {
		struct pmfi_req *r = pmfi_match_posted(&ep->match, tagged, m->peer, src_ep,
						       le64toh(h.tag));

		if (!r) {
			unexpected(ep, m->peer, &h, tagged, body, len);
		} else if (r->flags & FI_MULTI_RECV) {
			bool has_data = h.flags & PMFI_HDR_CQ_DATA;
			struct pmfi_rts rts;

			if (h.op == PMFI_OP_EAGER) {
				multi_eager(ep, r, m->peer, src_ep, le64toh(h.data), has_data, body,
					    len);
				break;
			}
			memcpy(&rts, body, sizeof(rts));
			if (multi_rts(ep, r, m->peer, src_ep, le64toh(h.data), has_data,
				      le64toh(h.arg), &rts) < 0) {
				/* No request to read it with: it waits, and the
				 * buffer takes it when one is free. */
				unexpected(ep, m->peer, &h, tagged, body, len);
				ep->multi_retry = true;
			}
		} else if (h.op == PMFI_OP_EAGER) {
			copy_in(r->buf, body, len < r->len ? len : r->len);
			r->peer = m->peer;
			r->peer_ep = src_ep;
			pmfi_recv_complete(ep, r, len, le64toh(h.tag), le64toh(h.data),
					   h.flags & PMFI_HDR_CQ_DATA, 0);
			pmfi_req_put(ep, r);
		} else {
			struct pmfi_rts rts;

			memcpy(&rts, body, sizeof(rts));
			take_rts(ep, r, m->peer, src_ep, le64toh(h.tag), le64toh(h.data),
				 h.flags & PMFI_HDR_CQ_DATA, le64toh(h.arg), &rts);
		}
		break;
	}
	case PMFI_OP_FIN:
		on_fin(ep, m->peer, &h);
		break;
	default:
		ep->dropped++;
	}
}

static void poll_reads(struct pmfi_ep *ep)
{
	for (struct pmfi_list *l = ep->reads.next, *n; l != &ep->reads; l = n) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		n = l->next;
		if (pm_test(ep->pm, &r->op)) {
			pmfi_list_del(l);
			read_done(ep, r, r->op.status);
		}
	}
	/* Reads that met -EAGAIN (PM's operation slots were taken) start
	 * again; those that meet it again go back to read_wait. */
	struct pmfi_list wait;

	pmfi_list_init(&wait);
	while (!pmfi_list_empty(&ep->read_wait)) {
		struct pmfi_list *l = ep->read_wait.next;

		pmfi_list_del(l);
		pmfi_list_add_tail(&wait, l);
	}
	while (!pmfi_list_empty(&wait)) {
		struct pmfi_req *r = pmfi_container_of(wait.next, struct pmfi_req, link);

		pmfi_list_del(&r->link);
		start_read(ep, r);
	}
}

/* Fail everything that waits on a peer that is gone: directed receives,
 * queued sends, rendezvous sends awaiting FIN and reads from it.  PM sees
 * deaths on this node; remote ones are the launcher's to act on. */
static void fail_peer(struct pmfi_ep *ep, int peer)
{
	struct pmfi_peer_q *q = &ep->peers[peer];

	for (int t = 0; t < 2; t++) {
		struct pmfi_list *posted = &ep->match.posted[t];

		for (struct pmfi_list *l = posted->next, *n; l != posted; l = n) {
			struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

			n = l->next;
			if (r->peer == peer) {
				pmfi_list_del(l);
				pmfi_recv_complete(ep, r, 0, r->tag, 0, false, -EPIPE);
				pmfi_req_put(ep, r);
			}
		}
	}
	while (!pmfi_list_empty(&q->pending)) {
		struct pmfi_req *r = pmfi_container_of(q->pending.next, struct pmfi_req, link);

		pmfi_list_del(&r->link);
		transmitted(ep, r, -EPIPE);
	}
	pmfi_list_del(&q->active);
	for (struct pmfi_list *l = ep->rndv.next, *n; l != &ep->rndv; l = n) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		n = l->next;
		if (r->peer == peer) {
			pmfi_list_del(l);
			send_done(ep, r, -EPIPE);
		}
	}
	struct pmfi_list *lists[2] = { &ep->reads, &ep->read_wait };

	for (int i = 0; i < 2; i++)
		for (struct pmfi_list *l = lists[i]->next, *n; l != lists[i]; l = n) {
			struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

			n = l->next;
			if (r->peer == peer) {
				pmfi_list_del(l);
				pmfi_recv_complete(ep, r, r->rts_len, r->tag, r->data,
						   r->flags & FI_REMOTE_CQ_DATA, -EPIPE);
				pmfi_req_put(ep, r);
			}
		}
}

static void check_peers(struct pmfi_ep *ep)
{
	int n = pm_size(ep->pm);       /* a detached context's grows */

	for (int p = 0; p < n && p < ep->npeers; p++) {
		if (ep->peers[p].gone || p == ep->self || pm_peer_alive(ep->pm, p) != 0)
			continue;
		ep->peers[p].gone = true;
		PMFI_WARN("peer %d is gone: its operations fail", p);
		fail_peer(ep, p);
	}
}

/* Room in ep's CQs for what one message can complete (a receive, and the
 * send its FIN finishes). */
static bool cq_room(const struct pmfi_ep *ep)
{
	return pmfi_cq_room(ep->rx_cq, 2) && pmfi_cq_room(ep->tx_cq, 2);
}

/*
 * A message from PM, for whichever endpoint of the process its header
 * names: the process's endpoints share one PM context, so any one's
 * progress may take another's messages.  Another enabled endpoint with
 * room gets it at once (its domain's lock is ours, or the application
 * serialises its FI_THREAD_DOMAIN domains: design §3); without room it is
 * kept in that endpoint's inbox until its own progress.
 */
static void deliver(struct pmfi_ep *ep, const struct pm_msg *m)
{
	struct pmfi_hdr h;

	if (m->len < sizeof(h)) {
		ep->dropped++;
		return;
	}
	memcpy(&h, m->data, sizeof(h));

	int dst = le16toh(h.dst_ep);

	if (dst == ep->index) {
		dispatch(ep, m);
		return;
	}

	struct pmfi_ep *to = pmfi_proc_ep(dst);

	if (!to || !to->enabled) {
		ep->dropped++;  /* no such endpoint (any more) */
		return;
	}
	if (pmfi_list_empty(&to->inbox) && cq_room(to)) {
		dispatch(to, m);
		return;
	}

	struct pmfi_inbox *k = malloc(sizeof(*k) + m->len);

	if (!k) {
		PMFI_WARN("no memory for a message for endpoint %d: dropped", dst);
		to->dropped++;
		return;
	}
	k->peer = m->peer;
	k->len = m->len;
	memcpy(k->data, m->data, m->len);
	pmfi_list_add_tail(&to->inbox, &k->link);
}

/* Messages other endpoints kept for us, in their order, while there is room. */
static void drain_inbox(struct pmfi_ep *ep)
{
	while (!pmfi_list_empty(&ep->inbox) && cq_room(ep)) {
		struct pmfi_inbox *k = pmfi_container_of(ep->inbox.next, struct pmfi_inbox, link);
		struct pm_msg m = { .peer = k->peer, .data = k->data, .len = k->len };

		pmfi_list_del(&k->link);
		dispatch(ep, &m);
		free(k);
	}
}

/*
 * The last message a pass takes is released at the start of the next pass,
 * not when it is dispatched (the others when the pass takes the next).
 * The release writes into the sender's ring (shm: a flag in the record,
 * the tail, then a fence) or frees a receive slot (udp): done before the
 * caller gets the completion, it stood between a message and the caller's
 * answer, which is what a ping-pong, a barrier or a rendezvous waits for.
 * At the next pass it overlaps the wait for the next message.  Dispatch
 * keeps nothing that points into a message (payloads and headers are
 * copied), so holding one a pass longer only holds its ring space; a
 * stream still frees its records as fast as it takes them.
 */
void pmfi_release_held(struct pmfi_ep *ep)
{
	if (ep->holding) {
		pm_release(ep->pm, &ep->held);
		ep->holding = false;
	}
}

void pmfi_progress(struct pmfi_ep *ep)
{
	if (!ep->enabled)
		return;
	pmfi_release_held(ep);
	if (!pmfi_list_empty(&ep->inbox))
		drain_inbox(ep);
	/* Now and then (not on every pass: it looks at every peer), ask PM
	 * whether a peer died, so that nothing waits for it for ever. */
	if (++ep->passes % PMFI_PEER_CHECK_PASSES == 0)
		check_peers(ep);
	for (int i = 0; i < PMFI_PROGRESS_BATCH; i++) {
		struct pm_msg m;

		/* Keep room for what one message can complete (a receive, and
		 * the send its FIN finishes). */
		if (!cq_room(ep))
			break;
		/* One look at the network per pass: the rest are what it
		 * brought in (a last pm_recv() would poll again, for nothing). */
		if ((i == 0 ? pm_recv(ep->pm, &m) : pm_recv_queued(ep->pm, &m)) != 0)
			break;
		deliver(ep, &m);
		pmfi_release_held(ep);
		ep->held = m;
		ep->holding = true;
	}
	for (struct pmfi_list *l = ep->active.next, *n; l != &ep->active; l = n) {
		n = l->next;
		flush_peer(ep, pmfi_container_of(l, struct pmfi_peer_q, active));
	}
	if (!pmfi_list_empty(&ep->reads) || !pmfi_list_empty(&ep->read_wait))
		poll_reads(ep);
	if (!pmfi_list_empty(&ep->rma))
		pmfi_rma_poll(ep);
	if (ep->multi_retry)
		multi_retry(ep);
}
