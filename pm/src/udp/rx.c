/* SPDX-License-Identifier: MIT */
/*
 * rx.c - the receiving half of Go-Back-N for PM.
 *
 * Packets are consumed strictly in sequence.  Packets that arrive early
 * (striping over several NICs reorders them) wait in a small per-peer wait
 * queue, as in the thesis's network trunking; duplicates are discarded and
 * re-acknowledged.  A message is reassembled straight into the place it
 * goes: the receive ring for user messages, the registered region for
 * remote writes, the reader's buffer for read responses.  No room in the
 * ring: STOP, then GO when pm_release() frees enough.
 */
#include "udp.h"
#include "core/atomic.h"
#include "util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum consume { CONSUMED, REFUSED };

/* A wait-queue slot: the decoded header, then the payload. */
#define OOO_STRIDE(p) ((size_t)(p)->frag + sizeof(struct wire_hdr))

int udp_rx_init(struct udp_proto *u, struct udp_peer *p)
{
	/* The wait queue covers the whole window where memory allows (2 MiB
	 * per peer), and always the reordering that reading the NICs in turn
	 * makes (device.c, receive): what does not fit must be sent again. */
	p->nooo = 128;
	while (p->nooo < u->wnd && (p->nooo * 2) * OOO_STRIDE(p) <= (2u << 20))
		p->nooo <<= 1;
	p->rx_mem = aligned_alloc(64, ring_footprint(u->ring_bytes));
	p->ooo = malloc((size_t)p->nooo * OOO_STRIDE(p));
	p->ooo_seq = calloc(p->nooo, sizeof(*p->ooo_seq));
	p->ooo_len = calloc(p->nooo, sizeof(*p->ooo_len));
	p->ooo_valid = calloc(p->nooo, 1);
	if (!p->rx_mem || !p->ooo || !p->ooo_seq || !p->ooo_len || !p->ooo_valid)
		return -ENOMEM;
	ring_init(p->rx_mem, u->ring_bytes);
	ring_producer_attach(&p->rx_dev, p->rx_mem, u->ring_bytes);
	ring_consumer_attach(&p->rx_user, p->rx_mem, u->ring_bytes);
	p->expected = 1;
	return 0;
}

void udp_rx_fini(struct udp_peer *p)
{
	free(p->rx_mem);
	free(p->ooo);
	free(p->ooo_seq);
	free(p->ooo_len);
	free(p->ooo_valid);
}

static void malformed(struct udp_proto *u, struct udp_peer *p, const char *why)
{
	u->stats->drops++;
	/* A detached context's me is its context id: it is rank 0. */
	pm_log(u->cap ? 0 : (int)u->me, "udp: malformed message from peer %d (%s); dropped",
	       p->rank, why);
}

/* A reply the receiver owes (RMA_DONE, READ_RESP): it needs queue room,
 * which the first fragment reserved.  value: an atomic's old value. */
static void reply_value(struct udp_proto *u, struct udp_peer *p, uint8_t kind, uint64_t cookie,
			int status, uint64_t value, const uint8_t *data, uint32_t len)
{
	struct udp_txmsg m = {
		.data = data, .len = len, .kind = kind, .cookie = cookie,
		.key = value, .offset = (uint64_t)(int64_t)status,
	};

	udp_tx_enqueue(u, p, &m);
}

static void reply(struct udp_proto *u, struct udp_peer *p, uint8_t kind, uint64_t cookie,
		  int status, const uint8_t *data, uint32_t len)
{
	reply_value(u, p, kind, cookie, status, 0, data, len);
}

/* The first fragment: decide where the message goes, or refuse it. */
static enum consume begin_message(struct udp_proto *u, struct udp_peer *p,
				  const struct wire_msg_hdr *mh)
{
	struct udp_rxmsg *rx = &p->rx;
	int err = 0;

	memset(rx, 0, sizeof(*rx));
	rx->active = true;
	rx->kind = mh->kind;
	rx->total = mh->total;
	rx->cookie = mh->cookie;

	switch (mh->kind) {
	case WIRE_KIND_MSG: {
		void *buf;

		if (mh->total > ring_max_message(p->rx_dev.size)) {
			malformed(u, p, "message larger than the maximum");
			rx->discard = true;
			break;
		}
		err = ring_reserve(&p->rx_dev, mh->total, &buf);
		if (err == -EAGAIN) {
			rx->active = false;
			p->stop_need = mh->total;
			return REFUSED;
		}
		rx->dst = buf;
		break;
	}
	case WIRE_KIND_WRITE:
	case WIRE_KIND_READ_REQ:
	case WIRE_KIND_ATOMIC:
		/* All owe a reply; refuse until the queue has room for it. */
		if (udp_txq_free(p) == 0) {
			rx->active = false;
			p->stop_need = 0;
			return REFUSED;
		}
		(*u->requests_served)++;
		if ((mh->kind == WIRE_KIND_READ_REQ && mh->total != 8) ||
		    (mh->kind == WIRE_KIND_ATOMIC && mh->total != WIRE_ATOMIC_BYTES)) {
			malformed(u, p, "request of the wrong size");
			rx->discard = true;
			reply(u, p, WIRE_KIND_RMA_DONE, mh->cookie, -EPROTO, NULL, 0);
			break;
		}
		if (mh->kind == WIRE_KIND_WRITE) {
			uint8_t *at = udp_window_check(u, mh->key, mh->offset, mh->total, &err);

			if (!at) {
				rx->discard = true;
				rx->status = err;
			} else {
				rx->dst = at;
			}
		}
		break;
	case WIRE_KIND_READ_RESP: {
		struct udp_op_slot *s = udp_op_lookup(u, mh->cookie);

		if (!s || s->atomic || s->len != mh->total) {
			malformed(u, p, "read response for no such read");
			rx->discard = true;
		} else {
			rx->dst = s->dst;
		}
		break;
	}
	case WIRE_KIND_RMA_DONE:
		if (mh->total != 0) {
			malformed(u, p, "completion with a body");
			rx->discard = true;
		}
		rx->status = (int)(int64_t)mh->offset;
		rx->value = mh->key;
		break;
	}
	return CONSUMED;
}

static void end_message(struct udp_proto *u, struct udp_peer *p)
{
	struct udp_rxmsg *rx = &p->rx;

	rx->active = false;
	switch (rx->kind) {
	case WIRE_KIND_MSG:
		if (!rx->discard)
			ring_publish(&p->rx_dev, rx->total);
		else if (rx->dst)
			ring_publish(&p->rx_dev, 0); /* give the reservation back empty */
		break;
	case WIRE_KIND_WRITE:
		reply(u, p, WIRE_KIND_RMA_DONE, rx->cookie, rx->discard ? rx->status : 0, NULL, 0);
		break;
	case WIRE_KIND_READ_RESP:
		if (!rx->discard)
			udp_op_complete(u, rx->cookie, 0);
		break;
	case WIRE_KIND_RMA_DONE:
		if (!rx->discard)
			udp_op_done(u, rx->cookie, rx->status, rx->value);
		break;
	}
}

/* A read request's body is its length; answer it from the region. */
static void answer_read(struct udp_proto *u, struct udp_peer *p, const struct wire_msg_hdr *mh,
			const uint8_t *body)
{
	uint64_t len = 0;
	int err = 0;

	for (int i = 0; i < 8; i++)
		len |= (uint64_t)body[i] << (8 * i);

	uint8_t *at = udp_window_check(u, mh->key, mh->offset, len, &err);

	if (!at || len > UINT32_MAX)
		reply(u, p, WIRE_KIND_RMA_DONE, mh->cookie, at ? -EMSGSIZE : err, NULL, 0);
	else
		reply(u, p, WIRE_KIND_READ_RESP, mh->cookie, 0, at, (uint32_t)len);
}

/* An atomic's body is its operation; run it on the word and answer with
 * the old value. */
static void answer_atomic(struct udp_proto *u, struct udp_peer *p,
			  const struct wire_msg_hdr *mh, const uint8_t *body)
{
	struct wire_atomic a;
	uint64_t old = 0;
	int err = 0;

	if (wire_decode_atomic(body, &a) < 0) {
		malformed(u, p, "atomic with a reserved word set");
		err = -EPROTO;
	} else {
		uint8_t *at = udp_window_check(u, mh->key, mh->offset, pm_atomic_width(a.op),
					       &err);

		if (at)
			err = udp_atomic_here(u, at, &a, &old);
	}
	reply_value(u, p, WIRE_KIND_RMA_DONE, mh->cookie, err, old, NULL, 0);
}

static enum consume consume(struct udp_proto *u, struct udp_peer *p, const struct wire_hdr *h,
			    const uint8_t *payload)
{
	struct udp_rxmsg *rx = &p->rx;
	const uint8_t *data = payload;
	uint32_t n = h->len;
	struct wire_msg_hdr mh;

	if (h->flags & WIRE_F_FIRST) {
		if (rx->active) {
			/* The previous message never ended: the sender is broken. */
			malformed(u, p, "new message before the last one ended");
			rx->discard = true;
			end_message(u, p);
		}
		if (wire_decode_msg(payload, n, &mh) < 0) {
			malformed(u, p, "bad message header");
			memset(rx, 0, sizeof(*rx));
			rx->active = !(h->flags & WIRE_F_LAST);
			rx->discard = true;
			rx->kind = WIRE_KIND_MAX + 1;
			return CONSUMED;
		}
		if (begin_message(u, p, &mh) == REFUSED)
			return REFUSED;
		data += WIRE_MSG_HDR_BYTES;
		n -= WIRE_MSG_HDR_BYTES;
		if ((mh.kind == WIRE_KIND_READ_REQ || mh.kind == WIRE_KIND_ATOMIC) &&
		    !rx->discard) {
			if (n != mh.total || !(h->flags & WIRE_F_LAST)) {
				malformed(u, p, "request split");
				rx->discard = true;
			} else {
				if (mh.kind == WIRE_KIND_READ_REQ)
					answer_read(u, p, &mh, data);
				else
					answer_atomic(u, p, &mh, data);
				rx->active = false;
				return CONSUMED;
			}
		}
	} else if (!rx->active) {
		malformed(u, p, "fragment outside a message");
		return CONSUMED;
	}

	if (n > rx->total - rx->got) {
		malformed(u, p, "message longer than announced");
		rx->discard = true;
		n = 0;
	}
	if (!rx->discard && rx->dst && n)
		memcpy(rx->dst + rx->got, data, n);
	rx->got += n;
	if (h->flags & WIRE_F_LAST) {
		if (rx->got != rx->total && !rx->discard) {
			malformed(u, p, "message shorter than announced");
			rx->discard = true;
		}
		end_message(u, p);
	}
	return CONSUMED;
}

static void ack_later(struct udp_proto *u, struct udp_peer *p)
{
	p->ack_pending++;
	/* Enough to matter to the sender's window: acknowledge right away,
	 * not at the end of a long receive pass. */
	if (p->ack_pending >= UDP_ACK_EVERY)
		udp_send_control(u, p, WIRE_ACK, 0);
	else if (!p->ack_deadline)
		p->ack_deadline = u->now_ns + UDP_ACK_DELAY_NS;
}

/* Consume in-order packets from the wait queue. */
static void drain_ooo(struct udp_proto *u, struct udp_peer *p)
{
	for (;;) {
		uint32_t slot = p->expected & (p->nooo - 1);

		if (!p->ooo_valid[slot] || p->ooo_seq[slot] != p->expected)
			return;

		struct wire_hdr h;
		const uint8_t *pkt = p->ooo + (size_t)slot * OOO_STRIDE(p);

		/* The stored copy keeps its decoded header in front. */
		memcpy(&h, pkt, sizeof(h));
		if (consume(u, p, &h, pkt + sizeof(h)) == REFUSED) {
			p->stop_sent = true;
			udp_send_control(u, p, WIRE_STOP, p->expected);
			u->stats->stops++;
			return;
		}
		p->ooo_valid[slot] = 0;
		p->ooo_count--;
		p->expected++;
		ack_later(u, p);
	}
}

/*
 * A path silent while a whole window of data packets came by the others is
 * left out: the sender cannot have sent that much past a packet still on
 * its way, so that path has lost what it carried (or is down).  Counting in
 * packets, not time, keeps a descheduled receiver from taking its own
 * absence for a silent path.
 */
static bool gap_is_loss(const struct udp_proto *u, const struct udp_peer *p)
{
	int live = 0;

	for (int i = 0; i < p->npaths; i++) {
		const struct udp_path *pa = &p->paths[i];

		/* A path that never brought anything counts from the start. */
		if (p->rx_count - pa->rx_mark > u->wnd)
			continue;
		if (seq_diff(pa->rx_latest, p->expected) <= 0)
			return false;
		live++;
	}
	return live > 0;
}

void udp_rx_on_data(struct udp_proto *u, struct udp_peer *p, const struct wire_hdr *h,
		    const uint8_t *payload)
{
	int32_t d = seq_diff(h->seq, p->expected);


	if (d < 0) {
		/* Already had it: our ack was lost or late.  Say so again, and
		 * count it: the sender resent what had arrived. */
		u->stats->dups++;
		p->ack_now = true;
		u->answer_due = true;
		return;
	}
	if (d == 0) {
		if (consume(u, p, h, payload) == REFUSED) {
			if (!p->stop_sent) {
				u->stats->stops++;
				p->stop_sent = true;
			}
			/* Repeat the STOP each time: the first may have been lost. */
			udp_send_control(u, p, WIRE_STOP, h->seq);
			return;
		}
		p->stop_sent = false;
		p->expected++;
		ack_later(u, p);
		drain_ooo(u, p);
		return;
	}
	if (p->stop_sent)
		return;         /* resent after GO, in order */

	/* Early: keep it while it fits in the wait queue, else drop it. */
	if ((uint32_t)d < p->nooo && h->len <= p->frag) {
		uint32_t slot = h->seq & (p->nooo - 1);

		if (p->ooo_valid[slot] && p->ooo_seq[slot] == h->seq) {
			u->stats->dups++;
		} else {
			uint8_t *pkt = p->ooo + (size_t)slot * OOO_STRIDE(p);

			memcpy(pkt, h, sizeof(*h));
			memcpy(pkt + sizeof(*h), payload, h->len);
			if (!p->ooo_valid[slot])
				p->ooo_count++;
			p->ooo_seq[slot] = h->seq;
			p->ooo_valid[slot] = 1;
		}
	}
	/* Every path is FIFO: once each live path has brought a packet sent
	 * after the missing one, it is lost, not late.  Ask for it once per
	 * gap (again after a while). */
	if (gap_is_loss(u, p)) {
		if (p->lose_for != p->expected || u->now_ns - p->lose_ns > p->rto_ns) {
			p->lose_for = p->expected;
			p->lose_ns = u->now_ns;
			udp_send_control(u, p, WIRE_LOSE, p->expected - 1);
			u->stats->loses++;
		}
	}
}

/* After a GO the marker stays until the refused packet arrives again. */
#define GO_SENT (UINT32_MAX / 2)

/* Room again for what was refused: GO (once per refusal). */
static bool send_go(struct udp_proto *u, struct udp_peer *p)
{
	if (ring_free_bytes(&p->rx_dev) < p->stop_need + 2 * RING_ALIGN + RING_REC_HDR ||
	    udp_txq_free(p) == 0)
		return false;
	udp_send_control(u, p, WIRE_GO, p->expected);
	u->stats->gos++;
	p->stop_need = GO_SENT;
	return true;
}

void udp_rx_released(struct udp_proto *u, struct udp_peer *p)
{
	if (p->stop_sent && p->stop_need != GO_SENT)
		send_go(u, p);
}

void udp_rx_on_poll(struct udp_proto *u, struct udp_peer *p, uint32_t seq)
{
	/* Answered after the receive pass (udp_rx_timers), once every packet
	 * that was waiting in the sockets has been taken in. */
	p->poll_pending = true;
	u->answer_due = true;
	p->poll_seq = seq;
}

/* The sender's timer ran out on packet poll_seq: tell it where we are. */
static void answer_poll(struct udp_proto *u, struct udp_peer *p)
{
	p->poll_pending = false;
	if (p->stop_sent) {
		if (p->stop_need == GO_SENT)
			udp_send_control(u, p, WIRE_GO, p->expected);   /* the GO was lost */
		else if (!send_go(u, p))
			udp_send_control(u, p, WIRE_STOP, p->expected);
	} else if (seq_diff(p->poll_seq, p->expected) >= 0) {
		/* It came by its path before this POLL did, or never will. */
		p->lose_for = p->expected;
		p->lose_ns = u->now_ns;
		udp_send_control(u, p, WIRE_LOSE, p->expected - 1);
		u->stats->loses++;
	} else {
		udp_send_control(u, p, WIRE_ACK, 0);
	}
}

void udp_rx_timers(struct udp_proto *u, struct udp_peer *p)
{
	if (p->poll_pending)
		answer_poll(u, p);
	if (p->ack_now || (p->ack_deadline && u->now_ns >= p->ack_deadline)) {
		udp_send_control(u, p, WIRE_ACK, 0);
	}
}

uint64_t udp_rx_next_timer(const struct udp_peer *p)
{
	if (p->ack_now || p->poll_pending)
		return 0;
	return p->ack_deadline ? p->ack_deadline : UINT64_MAX;
}
