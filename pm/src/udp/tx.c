/* SPDX-License-Identifier: MIT */
/*
 * tx.c - the sending half of Go-Back-N for PM, with the defects of the
 * thesis's appendix B fixed (see docs/pm/wire.md, "Sender"):
 *   - a timeout goes back to the oldest unacknowledged packet (acked + 1),
 *     not past it;
 *   - STOP(k) acknowledges k - 1 only; k is resent after GO;
 *   - the window holds exactly wnd packets: seq in (acked, acked + wnd];
 *   - sequence numbers wrap (serial arithmetic), ACKs are cumulative and
 *     coalesced, duplicates are the receiver's to discard.
 * And one change of our own: a timeout resends nothing.  It asks (POLL, on
 * the path of the oldest packet) and the receiver answers where it is; only
 * its answer that the packet is missing (LOSE) sends anything again.  A peer
 * that was late -- descheduled, frozen, not yet thawed after a gang switch --
 * then costs a control packet, never a retransmission (docs/pm/control.md,
 * "Why a switch causes no retransmission").
 */
#include "udp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static inline struct udp_txpkt *pkt_of(struct udp_peer *p, uint32_t seq)
{
	return &p->win[seq & (p->wnd - 1)];
}

static inline struct udp_txmsg *msg_of(struct udp_peer *p, uint32_t idx)
{
	return &p->txq[idx & (p->txq_cap - 1)];
}

int udp_tx_init(struct udp_proto *u, struct udp_peer *p)
{
	/* Every message is at least one 64-byte ring record, so the queue can
	 * never fill before the ring does; remote operations get room beside. */
	p->txq_cap = 1;
	while (p->txq_cap < u->ring_bytes / RING_ALIGN + UDP_OPS)
		p->txq_cap <<= 1;
	p->wnd = p->max_wnd && p->max_wnd < u->wnd ? p->max_wnd : u->wnd;
	p->tx_mem = aligned_alloc(64, ring_footprint(u->ring_bytes));
	p->txq = calloc(p->txq_cap, sizeof(*p->txq));
	p->win = calloc(p->wnd, sizeof(*p->win));
	if (!p->tx_mem || !p->txq || !p->win)
		return -ENOMEM;
	ring_init(p->tx_mem, u->ring_bytes);
	ring_producer_attach(&p->tx_user, p->tx_mem, u->ring_bytes);
	ring_consumer_attach(&p->tx_dev, p->tx_mem, u->ring_bytes);
	p->acked = 0;
	p->sent_hi = 0;
	p->next_seq = 1;
	p->rto_ns = UDP_RTO_MIN_NS * 5;
	return 0;
}

void udp_tx_fini(struct udp_peer *p)
{
	free(p->tx_mem);
	free(p->txq);
	free(p->win);
}

uint32_t udp_txq_free(const struct udp_peer *p)
{
	return p->txq_cap - (p->txq_head - p->txq_tail);
}

int udp_tx_enqueue(struct udp_proto *u, struct udp_peer *p, const struct udp_txmsg *m)
{
	if (udp_txq_free(p) == 0)
		return -EAGAIN;
	*msg_of(p, p->txq_head++) = *m;
	udp_tx_pump(u, p);
	return 0;
}

int udp_tx_buffer(struct udp_peer *p, size_t len, void **buf)
{
	return udp_txq_free(p) ? ring_reserve(&p->tx_user, len, buf) : -EAGAIN;
}

int udp_tx_send(struct udp_proto *u, struct udp_peer *p, size_t len)
{
	struct udp_txmsg m = { .kind = WIRE_KIND_MSG, .in_ring = true };
	const void *data;
	size_t dlen;
	int err = ring_publish(&p->tx_user, len);

	if (err)
		return err;
	/* The device's view of the send ring yields the message just sent. */
	err = ring_peek(&p->tx_dev, &data, &dlen, &m.ring_cookie);
	if (err)
		return err;
	m.data = data;
	m.len = (uint32_t)dlen;
	return udp_tx_enqueue(u, p, &m);
}

/*
 * Nothing of ours is on the wire unanswered: everything sent is
 * acknowledged, or the receiver refused the oldest packet (STOP) and so
 * discards what follows it until GO.  A refused sender cannot send more
 * until its receiver's application consumes, which a held receiver never
 * does; it is drained as it stands, and after the thaw GO (or its timeout's
 * POLL) resumes it without a retransmission.
 */
bool udp_tx_drained(const struct udp_peer *p)
{
	if (p->stopped)
		return seq_diff(p->stop_seq, p->acked) == 1;
	return p->txq_head == p->txq_tail && p->acked == p->sent_hi;
}

uint32_t udp_piggy_ack(const struct udp_peer *p)
{
	return p->expected - 1;
}

/* The path with the fewest unacknowledged bytes: faster links drain
 * sooner and so carry more, which weights striping by measured rate. */
static int choose_path(struct udp_peer *p)
{
	int best = -1;

	for (int k = 0; k < p->npaths; k++) {
		int i = (int)((p->rr + (uint32_t)k) % (uint32_t)p->npaths);

		if (!p->paths[i].up)
			continue;
		if (best < 0 || p->paths[i].inflight < p->paths[best].inflight)
			best = i;
	}
	p->rr++;
	if (best < 0)   /* every path looks down: keep trying them all */
		best = (int)(p->rr % (uint32_t)p->npaths);
	return best;
}

static void arm_timer(struct udp_proto *u, struct udp_peer *p)
{
	p->rto_deadline = p->acked == p->sent_hi && !p->stopped ? 0 : u->now_ns + p->rto_ns;
}

static void emit(struct udp_proto *u, struct udp_peer *p, uint32_t seq, struct udp_txpkt *t)
{
	struct udp_txmsg *m = msg_of(p, t->msg);
	struct wire_hdr h = {
		.version = WIRE_VERSION, .type = WIRE_DATA,
		.flags = (uint16_t)(t->flags | WIRE_F_ACK),
		.jobkey = p->key, .src = u->me, .dst = p->id,
		.seq = seq, .ack = udp_piggy_ack(p),
	};
	struct wire_msg_hdr mh = {
		.total = m->len, .kind = m->kind, .key = m->key,
		.offset = m->offset, .cookie = m->cookie,
	};

	t->path = (uint8_t)choose_path(p);
	t->sent_ns = u->now_ns;
	p->paths[t->path].inflight += t->len;
	udp_out_packet(u, p, t->path, &h, (t->flags & WIRE_F_FIRST) ? &mh : NULL,
		       m->data ? m->data + t->off : NULL, t->len);
}

/* Cut the next fragment off the queue; false when nothing is queued. */
static bool next_fragment(struct udp_peer *p, struct udp_txpkt *t)
{
	if (p->txq_next == p->txq_head)
		return false;

	struct udp_txmsg *m = msg_of(p, p->txq_next);
	uint32_t room = p->frag - (p->frag_off == 0 ? WIRE_MSG_HDR_BYTES : 0);
	uint32_t left = m->len - p->frag_off;
	uint32_t n = left < room ? left : room;

	t->msg = p->txq_next;
	t->off = p->frag_off;
	t->len = (uint16_t)n;
	t->flags = (uint16_t)((p->frag_off == 0 ? WIRE_F_FIRST : 0) |
			      (n == left ? WIRE_F_LAST : 0));
	t->resent = false;
	if (n == left) {
		p->txq_next++;
		p->frag_off = 0;
	} else {
		p->frag_off += n;
	}
	return true;
}

/* A packet no longer on its path: acknowledged, or given up as lost. */
static void uncount(struct udp_peer *p, const struct udp_txpkt *t)
{
	struct udp_path *path = &p->paths[t->path];

	path->inflight -= t->len < path->inflight ? t->len : path->inflight;
}

/* Bytes on the way to the peer: the window is also capped by what its
 * sockets can hold, so a burst never overflows them. */
static uint64_t inflight(const struct udp_peer *p)
{
	uint64_t sum = 0;

	for (int i = 0; i < p->npaths; i++)
		sum += p->paths[i].inflight;
	return sum;
}

void udp_tx_pump(struct udp_proto *u, struct udp_peer *p)
{
	bool sent = false;

	while (!p->stopped && seq_diff(p->next_seq, p->acked) <= (int32_t)p->wnd &&
	       inflight(p) < p->max_inflight) {
		struct udp_txpkt *t = pkt_of(p, p->next_seq);

		if (seq_diff(p->next_seq, p->sent_hi) <= 0) {
			t->resent = true;
			if (p->refusing && seq_diff(p->next_seq, p->refused_hi) <= 0)
				u->stats->refused_resends++;
			else
				u->stats->retransmits++;
		} else if (next_fragment(p, t)) {
			p->sent_hi = p->next_seq;
		} else {
			break;
		}
		emit(u, p, p->next_seq, t);
		p->next_seq++;
		sent = true;
	}
	if (sent) {
		p->ack_pending = 0;     /* every data packet carried our ack */
		p->ack_deadline = 0;
		p->ack_now = false;
		if (!p->rto_deadline)
			arm_timer(u, p);
	}
}

/* Everything from `from` on counts as lost: send it again. */
static void go_back(struct udp_peer *p, uint32_t from)
{
	for (uint32_t s = from; seq_diff(s, p->next_seq) < 0; s++)
		uncount(p, pkt_of(p, s));
	if (seq_diff(p->next_seq, from) > 0)
		p->next_seq = from;
}

/*
 * A loss signal (LOSE, or GO while not stopped) about packet s is stale when
 * s went out again just now: the receiver sent it before that copy could
 * reach it -- the answers to two POLLs a frozen receiver took in the same
 * pass, or the answer to a POLL crossing the first GO's resend.  Acting on
 * it would resend the whole window a second time.  A resend that really is
 * lost again is signalled later, by the timeout's POLL at the earliest.
 */
#define UDP_STALE_SIGNAL_NS (UDP_RTO_MIN_NS / 2)

static bool stale_signal(const struct udp_proto *u, struct udp_peer *p, uint32_t s)
{
	const struct udp_txpkt *t = pkt_of(p, s);

	return t->resent && u->now_ns - t->sent_ns < UDP_STALE_SIGNAL_NS;
}

static void rtt_sample(struct udp_peer *p, uint64_t rtt)
{
	/* RFC 6298, in nanoseconds. */
	if (!p->srtt_ns) {
		p->srtt_ns = rtt;
		p->rttvar_ns = rtt / 2;
	} else {
		uint64_t err = rtt > p->srtt_ns ? rtt - p->srtt_ns : p->srtt_ns - rtt;

		p->rttvar_ns = (3 * p->rttvar_ns + err) / 4;
		p->srtt_ns = (7 * p->srtt_ns + rtt) / 8;
	}
	uint64_t rto = p->srtt_ns + 4 * p->rttvar_ns;

	p->rto_ns = rto < UDP_RTO_MIN_NS ? UDP_RTO_MIN_NS : rto > UDP_RTO_MAX_NS ? UDP_RTO_MAX_NS : rto;
}

void udp_tx_on_ack(struct udp_proto *u, struct udp_peer *p, uint32_t ack)
{
	/* Acks outside (acked, sent_hi] are old or forged: ignore them. */
	if (seq_diff(ack, p->acked) <= 0 || seq_diff(ack, p->sent_hi) > 0)
		return;
	for (uint32_t s = p->acked + 1; seq_diff(s, ack) <= 0; s++) {
		struct udp_txpkt *t = pkt_of(p, s);

		if (seq_diff(s, p->next_seq) < 0)
			uncount(p, t);
		p->paths[t->path].up = true;
		/* Karn: only packets sent once give a clean sample, and not
		 * those outstanding at a timeout or a hold, whose ack waited on
		 * a late or frozen peer, not on the network. */
		if (s == ack && !t->resent && seq_diff(s, p->no_sample_hi) > 0)
			rtt_sample(p, u->now_ns - t->sent_ns);
		if (t->flags & WIRE_F_LAST) {
			struct udp_txmsg *m = msg_of(p, t->msg);

			if (m->in_ring)
				ring_release(&p->tx_dev, m->ring_cookie);
			p->txq_tail++;
		}
	}
	p->acked = ack;
	p->strikes = 0;
	/* The refused packet was taken after all (the timeout's resend found
	 * room, or a late STOP crossed a GO): that is a GO too.  Without this
	 * the sender would wait for a GO the receiver never sends. */
	if (p->stopped && seq_diff(ack, p->stop_seq) >= 0)
		p->stopped = false;
	if (seq_diff(p->next_seq, ack) <= 0)
		p->next_seq = ack + 1;
	arm_timer(u, p);
	/* The window moved: what waited for room can go now. */
	udp_tx_pump(u, p);
}

void udp_tx_on_control(struct udp_proto *u, struct udp_peer *p, const struct wire_hdr *h)
{
	switch (h->type) {
	case WIRE_STOP:
		/* k was refused: k-1 is acknowledged, k will be resent after GO. */
		udp_tx_on_ack(u, p, h->seq - 1);
		if (seq_diff(h->seq, p->acked) == 1 && seq_diff(h->seq, p->sent_hi) <= 0) {
			p->stopped = true;
			p->stop_seq = h->seq;
			p->refusing = true;
			p->refused_hi = p->sent_hi;
			go_back(p, h->seq);
			arm_timer(u, p);
		}
		break;
	case WIRE_GO:
		if (p->stopped && seq_diff(h->seq, p->acked) == 1) {
			p->stopped = false;
			udp_tx_pump(u, p);
		} else if (!p->stopped && seq_diff(h->seq, p->acked) == 1 &&
			   seq_diff(p->sent_hi, p->acked) > 0 && !stale_signal(u, p, h->seq)) {
			/* Resumed already, yet the receiver still waits for k:
			 * it answers our POLL with GO while it has not had the
			 * refused packet again, so what we resent after the
			 * first GO was lost.  Resend it, as for LOSE(k-1);
			 * ignoring this GO would leave both sides waiting. */
			p->refusing = false;
			go_back(p, h->seq);
			udp_tx_pump(u, p);
		}
		break;
	case WIRE_LOSE:
		/* k is acknowledged; k+1 went missing: go back to it at once. */
		udp_tx_on_ack(u, p, h->seq);
		if (seq_diff(h->seq, p->acked) == 0 && seq_diff(p->sent_hi, h->seq) > 0 &&
		    !p->stopped && !stale_signal(u, p, h->seq + 1)) {
			p->refusing = false;
			go_back(p, h->seq + 1);
			udp_tx_pump(u, p);
		}
		break;
	default:
		break;
	}
}

void udp_tx_timers(struct udp_proto *u, struct udp_peer *p)
{
	if (!p->rto_deadline || u->now_ns < p->rto_deadline)
		return;
	if (p->acked == p->sent_hi && !p->stopped) {
		p->rto_deadline = 0;
		return;
	}
	/*
	 * Ask, do not resend: POLL(k) for the oldest packet k, on k's own path.
	 * A path is FIFO and the receiver answers only after a whole receive
	 * pass, so by then k has been read if it was ever going to arrive:
	 * ACK (it had k: the ack was late, nothing is sent again), LOSE (k is
	 * missing: go back to it), STOP or GO (flow control; a lost GO costs a
	 * timeout, not a hang).  A peer that cannot answer (frozen, off core)
	 * answers when it runs again.
	 */
	uint32_t k = p->acked + 1;
	int path = pkt_of(p, k)->path;

	if (++p->strikes >= 2) {
		/* Twice unanswered: k's path may be what is broken.  Stop using
		 * it until a probe or an ack proves it alive, as long as
		 * another path looks up, and ask over another one. */
		struct udp_path *bad = &p->paths[path];
		int up = 0;

		for (int i = 0; i < p->npaths; i++)
			up += p->paths[i].up;
		if (bad->up && up > 1) {
			bad->up = false;
			bad->next_probe_ns = u->now_ns;
		}
		if (!bad->up)
			path = choose_path(p);
	}
	p->no_sample_hi = p->sent_hi;
	p->rto_ns = p->rto_ns * 2 > UDP_RTO_MAX_NS ? UDP_RTO_MAX_NS : p->rto_ns * 2;
	p->rto_deadline = u->now_ns + p->rto_ns;
	u->stats->rto_polls++;
	udp_send_control_on(u, p, path, WIRE_POLL, k);
}

uint64_t udp_tx_next_timer(const struct udp_peer *p)
{
	return p->rto_deadline ? p->rto_deadline : UINT64_MAX;
}
