/* SPDX-License-Identifier: MIT */
/*
 * proto.c - the udp protocol of one process with its peers, without I/O:
 * what comes in (udp_proto_input, one datagram at a time), the timers,
 * control packets and probes, remote operations and delivery to the
 * application.  Packets go into the output queue (outq.c); the clock is
 * the driver's (now_ns).  The device (device.c) drives it over sockets; a
 * unit test drives two of them over a simulated network.  The sender's and
 * receiver's rules are in tx.c and rx.c.
 */
#include "udp.h"
#include "core/atomic.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- peers ---- */

int udp_proto_init(struct udp_proto *u, const struct udp_proto_conf *c)
{
	memset(u, 0, sizeof(*u));
	u->jobkey = c->jobkey;
	u->me = c->me;
	u->size = c->size;
	u->ring_bytes = c->ring_bytes;
	u->wnd = c->wnd;
	u->stats = c->stats;
	u->requests_served = c->requests_served ? c->requests_served : &u->requests_served_own;
	u->cap = c->cap;
	u->atomic_lock = c->atomic_lock;
	udp_outq_init(&u->out, c->drain, c->drain_arg);
	/* Detached: every slot now, so that inserting never moves a peer
	 * (queued packets point at their peer's path address, outq.c) and
	 * nothing is allocated but at insert.  calloc maps the ~1 MiB
	 * lazily: slots never used are never touched. */
	uint32_t slots = u->cap ? u->cap : u->size;

	u->peers = calloc(slots, sizeof(*u->peers));
	u->served = calloc(slots, sizeof(*u->served));
	return u->peers && u->served ? 0 : -ENOMEM;
}

/* ---- detached peers, told by their sockets ---- */

static uint32_t source_slot(const struct udp_proto *u, uint32_t addr, uint16_t port, uint32_t id)
{
	uint64_t k = ((uint64_t)addr << 32 | (uint64_t)port << 16) ^ (uint64_t)id * 0x9e3779b1u;

	return (uint32_t)((k * 0x9e3779b97f4a7c15ull) >> 32) & (u->sources_cap - 1);
}

int udp_source_peer(const struct udp_proto *u, uint32_t addr, uint16_t port, uint32_t id)
{
	if (!u->sources_cap)
		return -1;
	for (uint32_t i = source_slot(u, addr, port, id);; i = (i + 1) & (u->sources_cap - 1)) {
		const struct udp_source *s = &u->sources[i];

		if (s->port == 0)
			return -1;
		if (s->addr == addr && s->port == port && s->id == id)
			return s->peer;
	}
}

static void source_put(struct udp_proto *u, uint32_t addr, uint16_t port, uint32_t id, int peer)
{
	uint32_t i = source_slot(u, addr, port, id);

	while (u->sources[i].port != 0 &&
	       !(u->sources[i].addr == addr && u->sources[i].port == port && u->sources[i].id == id))
		i = (i + 1) & (u->sources_cap - 1);
	if (u->sources[i].port == 0)
		u->nsources++;
	u->sources[i] = (struct udp_source){ .addr = addr, .port = port, .id = id, .peer = peer };
}

/* Room for n more sources, the table at most half full (short probes). */
static int sources_reserve(struct udp_proto *u, uint32_t n)
{
	uint32_t cap = u->sources_cap ? u->sources_cap : 64;

	while ((u->nsources + n) * 2 > cap)
		cap *= 2;
	if (cap == u->sources_cap)
		return 0;

	struct udp_source *old = u->sources, *t = calloc(cap, sizeof(*t));
	uint32_t old_cap = u->sources_cap;

	if (!t)
		return -ENOMEM;
	u->sources = t;
	u->sources_cap = cap;
	u->nsources = 0;
	for (uint32_t i = 0; i < old_cap; i++)
		if (old[i].port)
			source_put(u, old[i].addr, old[i].port, old[i].id, old[i].peer);
	free(old);
	return 0;
}

int udp_peer_open(struct udp_proto *u, struct udp_peer *p)
{
	if (!u->cap) {
		p->key = u->jobkey;
		p->id = (uint32_t)p->rank;
	} else if (sources_reserve(u, (uint32_t)p->npaths)) {
		return -ENOMEM;
	}

	int err = udp_tx_init(u, p);

	if (!err)
		err = udp_rx_init(u, p);
	if (err) {
		udp_tx_fini(p);
		udp_rx_fini(p);
		return err;
	}
	for (int i = 0; u->cap && i < p->npaths; i++)
		source_put(u, p->paths[i].to.sin_addr.s_addr, p->paths[i].to.sin_port, p->id,
			   p->rank);
	u->served[p->rank] = true;
	return 0;
}

void udp_proto_fini(struct udp_proto *u)
{
	for (uint32_t r = 0; u->peers && r < u->size; r++) {
		if (u->served && u->served[r]) {
			udp_tx_fini(&u->peers[r]);
			udp_rx_fini(&u->peers[r]);
		}
	}
	free(u->peers);
	free(u->served);
	free(u->sources);
	u->peers = NULL;
	u->served = NULL;
	u->sources = NULL;
}

/* ---- control packets ---- */

/* Control packets go on the path the peer last reached us by. */
void udp_send_control_on(struct udp_proto *u, struct udp_peer *p, int path, uint8_t type,
			 uint32_t seq)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION, .type = type,
		.flags = WIRE_F_ACK, .jobkey = p->key, .src = u->me,
		.dst = p->id, .seq = seq, .ack = udp_piggy_ack(p),
	};

	udp_out_packet(u, p, path, &h, NULL, NULL, 0);
	p->ack_pending = 0;
	p->ack_deadline = 0;
	p->ack_now = false;
}

/* Control packets go back by the path the peer last used, while it is up. */
void udp_send_control(struct udp_proto *u, struct udp_peer *p, uint8_t type, uint32_t seq)
{
	int path = p->last_rx_path;

	if (!p->paths[path].up)
		for (int i = 0; i < p->npaths; i++)
			if (p->paths[i].up)
				path = i;
	udp_send_control_on(u, p, path, type, seq);
}

static void send_probe(struct udp_proto *u, struct udp_peer *p, int path, uint8_t type,
		       uint32_t id)
{
	struct wire_hdr h = {
		.version = WIRE_VERSION, .type = type,
		.jobkey = p->key, .src = u->me, .dst = p->id, .seq = id,
	};

	udp_out_packet(u, p, path, &h, NULL, NULL, 0);
}

void udp_proto_ack_now(struct udp_proto *u)
{
	for (uint32_t r = 0; r < u->size; r++) {
		struct udp_peer *p = udp_peer_of(u, (int)r);

		if (p && p->ack_pending)
			udp_send_control(u, p, WIRE_ACK, 0);
	}
}

/* The packet could not go: Go-Back-N resends it.  Mark its path down when
 * the network said the link is gone (err: the errno of the send). */
void udp_proto_send_failed(struct udp_proto *u, const struct udp_out *o, int err)
{
	if (err != ENETDOWN && err != ENETUNREACH && err != EHOSTUNREACH && err != EPERM)
		return;

	struct udp_peer *p = udp_peer_of(u, o->peer);

	if (p && p->paths[o->path].up) {
		int up = 0;

		for (int i = 0; i < p->npaths; i++)
			up += p->paths[i].up;
		if (up > 1) {
			p->paths[o->path].up = false;
			p->paths[o->path].next_probe_ns = u->now_ns + UDP_PROBE_NS;
		}
	}
}

/* ---- remote operations ---- */

struct udp_op_slot *udp_op_lookup(struct udp_proto *u, uint64_t cookie)
{
	uint32_t i = (uint32_t)(cookie & 0xffff);
	uint16_t gen = (uint16_t)(cookie >> 16);

	if (i >= UDP_OPS || !u->ops[i].busy || u->ops[i].gen != gen || cookie >> 32)
		return NULL;
	return &u->ops[i];
}

void udp_op_done(struct udp_proto *u, uint64_t cookie, int status, uint64_t value)
{
	struct udp_op_slot *s = udp_op_lookup(u, cookie);

	if (!s) {
		u->stats->drops++;
		return;
	}
	if (s->atomic && status == 0 && s->dst)
		pm_atomic_store(s->aop, s->dst, value);
	s->op->status = status;
	s->busy = false;
	u->op_done = true;
}

void udp_op_complete(struct udp_proto *u, uint64_t cookie, int status)
{
	udp_op_done(u, cookie, status, 0);
}

uint8_t *udp_window_check(struct udp_proto *u, uint64_t key, uint64_t off, uint64_t len,
			  int *err)
{
	uint32_t idx = PM_WINDOW_IDX(key);
	struct udp_window *w = idx < PM_MAX_WINDOWS ? &u->win[idx] : NULL;

	if (!w || key == 0 || w->key != key) {
		*err = -ENOENT;
		return NULL;
	}
	if (!pm_window_offset(key, (uintptr_t)w->addr, &off) || off > w->len ||
	    len > w->len - off) {
		*err = -ERANGE;
		return NULL;
	}
	return w->addr + off;
}

void udp_proto_expose(struct udp_proto *u, uint32_t idx, uint64_t key, void *addr, size_t len)
{
	struct udp_window *w = &u->win[idx];

	w->key = key;
	w->addr = addr;
	w->len = key ? len : 0;
}

/* A free operation slot for a request to p, or NULL (-EAGAIN): none, or
 * no room in p's queue. */
static struct udp_op_slot *op_slot(struct udp_proto *u, struct udp_peer *p, struct pm_op *op,
				   uint8_t *dst, uint32_t len)
{
	uint32_t i;

	for (i = 0; i < UDP_OPS && u->ops[i].busy; i++)
		;
	if (i == UDP_OPS || udp_txq_free(p) == 0)
		return NULL;
	u->ops[i] = (struct udp_op_slot){ .op = op, .dst = dst, .len = len,
					  .gen = ++u->op_gen, .busy = true };
	return &u->ops[i];
}

/* Queue the request m for slot s; its cookie names the slot. */
static int op_send(struct udp_proto *u, struct udp_peer *p, struct udp_op_slot *s,
		   struct udp_txmsg *m)
{
	m->cookie = (uint64_t)s->gen << 16 | (uint64_t)(s - u->ops);
	s->op->status = 1;
	s->op->_device[0] = m->cookie;
	int err = udp_tx_enqueue(u, p, m);

	if (err)
		s->busy = false;
	return err;
}

int udp_proto_rma(struct udp_proto *u, struct udp_peer *p, bool write, void *local,
		  size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	if (len > UINT32_MAX)
		return -EMSGSIZE;

	struct udp_op_slot *s = op_slot(u, p, op, write ? NULL : local, (uint32_t)len);

	if (!s)
		return -EAGAIN;
	for (int b = 0; b < 8; b++)
		s->body[b] = (uint8_t)((uint64_t)len >> (8 * b));

	struct udp_txmsg m = {
		.data = write ? local : s->body, .len = write ? (uint32_t)len : 8,
		.kind = write ? WIRE_KIND_WRITE : WIRE_KIND_READ_REQ,
		.key = rkey, .offset = roffset,
	};

	return op_send(u, p, s, &m);
}

int udp_proto_atomic(struct udp_proto *u, struct udp_peer *p, uint32_t aop, uint64_t operand,
		     uint64_t compare, void *result, uint64_t rkey, uint64_t roffset,
		     struct pm_op *op)
{
	struct udp_op_slot *s = op_slot(u, p, op, result, 0);

	if (!s)
		return -EAGAIN;
	s->atomic = true;
	s->aop = aop;

	struct wire_atomic a = { .op = aop, .operand = operand, .compare = compare };

	wire_encode_atomic(&a, s->body);

	struct udp_txmsg m = {
		.data = s->body, .len = WIRE_ATOMIC_BYTES, .kind = WIRE_KIND_ATOMIC,
		.key = rkey, .offset = roffset,
	};

	return op_send(u, p, s, &m);
}

int udp_atomic_here(struct udp_proto *u, uint8_t *at, const struct wire_atomic *a,
		    uint64_t *old)
{
	_Atomic uint32_t *lock = u->atomic_lock ? *u->atomic_lock : &u->atomic_lock_own;

	return pm_atomic_here(lock, at, a->op, a->operand, a->compare, old);
}

/* ---- what comes in ---- */

static int path_of_source(const struct udp_peer *p, int nic, const struct sockaddr_in *from)
{
	for (int i = 0; i < p->npaths; i++)
		if (p->paths[i].nic == nic && p->paths[i].to.sin_addr.s_addr == from->sin_addr.s_addr &&
		    p->paths[i].to.sin_port == from->sin_port)
			return i;
	return -1;
}

void udp_proto_drop(struct udp_proto *u, enum wire_verdict v)
{
	u->stats->drops++;
	u->drops_by[v]++;
}

void udp_proto_input(struct udp_proto *u, int nic, const uint8_t *buf, size_t n,
		     const struct sockaddr_in *from)
{
	struct wire_hdr h;
	/* Detached, src is a context id, not a rank: any value decodes, and
	 * the sender is looked up by its socket and id instead. */
	enum wire_verdict v = wire_decode(buf, n, u->jobkey, u->cap ? UINT32_MAX : u->size, u->me,
					  &h);

	if (v != WIRE_OK) {
		udp_proto_drop(u, v);
		return;
	}

	struct udp_peer *p = u->cap ? udp_peer_of(u, udp_source_peer(u, from->sin_addr.s_addr,
								      from->sin_port, h.src))
				    : udp_peer_of(u, (int)h.src);
	int path = p ? path_of_source(p, nic, from) : -1;

	/* A packet must come from the address its claimed sender has on
	 * this network: anything else is dropped, never believed.  A
	 * detached context drops so what a peer sends before this context
	 * inserted it; Go-Back-N brings it again once it has. */
	if (path < 0) {
		udp_proto_drop(u, WIRE_UNKNOWN_PEER);
		return;
	}
	p->paths[path].rcvd++;
	p->last_rx_path = path;
	p->last_heard_ns = u->now_ns;
	if (h.flags & WIRE_F_ACK)
		udp_tx_on_ack(u, p, h.ack);

	switch (h.type) {
	case WIRE_DATA:
		p->paths[path].rx_latest = h.seq;
		p->paths[path].rx_mark = ++p->rx_count;
		udp_rx_on_data(u, p, &h, buf + WIRE_HDR_BYTES);
		break;
	case WIRE_ACK:
		break;
	case WIRE_STOP:
	case WIRE_GO:
	case WIRE_LOSE:
		udp_tx_on_control(u, p, &h);
		break;
	case WIRE_POLL:
		udp_rx_on_poll(u, p, h.seq);
		break;
	case WIRE_PROBE:
		send_probe(u, p, path, WIRE_PROBE_ACK, h.seq);
		break;
	case WIRE_PROBE_ACK:
		p->paths[path].up = true;
		break;
	}
}

/* ---- timers ---- */

void udp_proto_timers(struct udp_proto *u)
{
	u->answer_due = false;
	for (uint32_t r = 0; r < u->size; r++) {
		struct udp_peer *p = udp_peer_of(u, (int)r);

		if (!p)
			continue;
		udp_tx_timers(u, p);
		udp_rx_timers(u, p);
		for (int i = 0; i < p->npaths; i++) {
			struct udp_path *pa = &p->paths[i];

			if (!pa->up && u->now_ns >= pa->next_probe_ns) {
				send_probe(u, p, i, WIRE_PROBE, (uint32_t)i);
				pa->next_probe_ns = u->now_ns + UDP_PROBE_NS;
			}
		}
	}
}

uint64_t udp_proto_next_timer(const struct udp_proto *u)
{
	uint64_t t = UINT64_MAX;

	for (uint32_t r = 0; r < u->size; r++) {
		if (!u->served[r])
			continue;
		const struct udp_peer *p = &u->peers[r];
		uint64_t a = udp_tx_next_timer(p), b = udp_rx_next_timer(p);

		t = a < t ? a : t;
		t = b < t ? b : t;
		for (int i = 0; i < p->npaths; i++)
			if (!p->paths[i].up && p->paths[i].next_probe_ns < t)
				t = p->paths[i].next_probe_ns;
	}
	return t;
}

/*
 * After a hold the clock has jumped by however long the job was frozen.
 * Nothing of ours is in flight (we drained), so no retransmission timer
 * should be armed; if one is (the request was withdrawn before we
 * drained), it restarts from now rather than firing at once on time the
 * peer spent frozen too.  The same for a loss report's back-off and for
 * probes of paths that looked down.  Peers thaw on their nodes some
 * milliseconds apart; a timer that runs out on one not yet thawed only
 * polls it (tx.c), and what was outstanding gives no RTT sample.
 */
void udp_proto_resumed(struct udp_proto *u)
{
	uint64_t now = u->now_ns;

	for (uint32_t r = 0; r < u->size; r++) {
		struct udp_peer *p = udp_peer_of(u, (int)r);

		if (!p)
			continue;
		p->no_sample_hi = p->sent_hi;
		p->strikes = 0;
		if (p->rto_deadline)
			p->rto_deadline = now + p->rto_ns;
		if (p->ack_deadline)
			p->ack_deadline = now;  /* owed: send it at the next pass */
		p->lose_ns = now;
		p->last_heard_ns = now;
		for (int i = 0; i < p->npaths; i++)
			if (!p->paths[i].up)
				p->paths[i].next_probe_ns = now;
	}
}

/* ---- the application's side ---- */

static bool rx_ready(struct udp_proto *u, struct pm_msg *msg)
{
	for (uint32_t k = 0; k < u->size; k++) {
		uint32_t r = (uint32_t)(u->next_rx_peer + (int)k) % u->size;
		struct udp_peer *p = udp_peer_of(u, (int)r);

		if (!p || !ring_readable(&p->rx_user))
			continue;
		if (!msg)
			return true;
		if (ring_peek(&p->rx_user, &msg->data, &msg->len, &msg->_cookie) == 0) {
			msg->peer = (int)r;
			u->next_rx_peer = (int)((r + 1) % u->size);
			return true;
		}
	}
	return false;
}

int udp_proto_recv(struct udp_proto *u, struct pm_msg *msg)
{
	return rx_ready(u, msg) ? 0 : -EAGAIN;
}

/* Needs no clock: what it may send (a GO) carries no time. */
int udp_proto_release(struct udp_proto *u, const struct pm_msg *msg)
{
	struct udp_peer *p = udp_peer_of(u, msg->peer);

	if (!p)
		return -EINVAL;
	int err = ring_release(&p->rx_user, msg->_cookie);

	if (!err && p->stop_sent)
		udp_rx_released(u, p);
	return err;
}

bool udp_proto_event(struct udp_proto *u)
{
	bool ev = rx_ready(u, NULL);

	for (uint32_t r = 0; r < u->size && !ev; r++) {
		struct udp_peer *p = udp_peer_of(u, (int)r);

		if (p && p->want_space && udp_txq_free(p) &&
		    ring_free_bytes(&p->tx_user) > RING_ALIGN) {
			p->want_space = false;
			ev = true;
		}
	}
	ev |= u->op_done;
	u->op_done = false;
	return ev;
}

bool udp_proto_idle(const struct udp_proto *u)
{
	for (uint32_t r = 0; r < u->size; r++)
		if (u->served[r] && (!udp_tx_drained(&u->peers[r]) || u->peers[r].ack_pending))
			return false;
	return true;
}
