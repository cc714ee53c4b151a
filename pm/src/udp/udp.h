/* SPDX-License-Identifier: MIT */
/*
 * udp.h - the udp protocol (PM/Ethernet): state shared by its parts.
 *
 * The protocol core does no I/O and reads no clock, so that a unit test can
 * drive it without sockets (pm/tests/unit/test_udp_proto.c):
 *
 *   proto.c     one process's protocol with its peers: taking a datagram in,
 *               timers, control packets, remote operations, delivery
 *   tx.c        the sender: message queue, fragmentation, Go-Back-N window,
 *               acknowledgements, STOP/GO/LOSE, retransmission timers
 *   rx.c        the receiver: ordering (wait queue), reassembly, flow
 *               control, acknowledgements
 *   outq.c      the output queue: packets made, waiting to be sent
 *   wire.c      the packet format
 *
 * and the device around it (device.h):
 *
 *   device.c    sockets, batched I/O (sendmmsg/GSO, recvmmsg/GRO), progress,
 *               waiting, opening over the bootstrap
 *   nic.c       NIC configuration
 *
 * Its driver sets now_ns before each call into the core, hands it every
 * datagram that arrives (udp_proto_input), runs its timers, and sends what
 * the core put into its output queue.
 *
 * Protocol: docs/pm/wire.md.  Everything is per (this process, peer) pair.
 */
#ifndef PM_UDP_H
#define PM_UDP_H

#include "core/pm_internal.h"
#include "core/ring.h"
#include "nic.h"
#include "wire.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define UDP_BATCH          32       /* packets per NIC and sendmmsg/recvmmsg */
#define UDP_ACK_EVERY      32       /* in-order packets per pure ACK at most */
#define UDP_ACK_DELAY_NS   50000u   /* a pending ACK waits this long for a ride */
#define UDP_RTO_MIN_NS     10000000u /* 10 ms: below it, scheduling noise fires timers */
#define UDP_RTO_MAX_NS     200000000u
#define UDP_PROBE_NS       100000000u
#define UDP_PKT_MAX        9216     /* largest datagram we build or accept */
#define UDP_INFLIGHT_MAX   (1u << 20) /* bytes in flight per peer at most */
#define UDP_OPS            256      /* outstanding remote ops per process */

struct udp_path {
	int nic;                        /* index of our NIC and socket */
	struct sockaddr_in to;          /* the peer's address on that network */
	uint8_t mac[6];                 /* the peer's MAC there (the eth device) */
	bool up;
	uint64_t inflight;              /* payload bytes sent on it, unacked */
	uint64_t next_probe_ns;
	uint64_t sent, rcvd;            /* packets, for pminfo */
	/* Receiver's view: a path is FIFO, so the last data seq that came by
	 * it tells which seqs it can still bring (loss detection, rx.c). */
	uint32_t rx_latest;
	uint64_t rx_mark;               /* peer's rx_count at its last data packet */
};

/* One message queued for sending (user message or remote operation). */
struct udp_txmsg {
	const uint8_t *data;
	uint32_t len;
	uint8_t kind;                   /* enum wire_kind */
	bool in_ring;                   /* data lives in the send ring */
	uint64_t key, offset, cookie;
	uint64_t ring_cookie;
};

/* One sent packet, kept until acknowledged (Go-Back-N resends from here). */
struct udp_txpkt {
	uint32_t msg;                   /* index into the txq */
	uint32_t off;                   /* of its payload in the message */
	uint16_t len;                   /* payload bytes (without headers) */
	uint16_t flags;                 /* WIRE_F_FIRST / WIRE_F_LAST */
	uint8_t path;
	bool resent;
	uint64_t sent_ns;
};

/* The message being reassembled from in-order packets. */
struct udp_rxmsg {
	bool active;
	bool discard;                   /* malformed or refused: swallow the rest */
	uint8_t kind;
	uint32_t total, got;
	uint8_t *dst;
	uint64_t cookie;                /* WRITE: writer's op; READ_RESP: our op */
	uint64_t value;                 /* RMA_DONE: an atomic's old value */
	int status;
};

struct udp_peer {
	int rank;                       /* its number here: index in peers */
	/* What packets to it carry in jobkey and dst: in a job, the job's
	 * key and its rank; a detached peer's own key and context id. */
	uint64_t key;
	uint32_t id;
	struct udp_path paths[UDP_MAX_NICS];
	int npaths;
	uint32_t rr;                    /* round-robin among equal paths */
	uint16_t frag;                  /* payload bytes per packet */
	uint32_t max_wnd;               /* packets the peer's receive side can
					   hold at once (a power of two), 0:
					   no bound but wnd; set before
					   udp_peer_open (the eth device) */
	uint64_t max_inflight;          /* bytes: half the peer's socket buffer */
	size_t max_message;             /* what both our send ring and the peer's
					   receive ring can take */
	int last_rx_path;

	/* sender */
	uint8_t *tx_mem;
	struct ring_producer tx_user;   /* pm_send_buffer/pm_send write here */
	struct ring_consumer tx_dev;    /* the device takes messages from here */
	struct udp_txmsg *txq;
	uint32_t txq_cap;               /* power of two */
	uint32_t txq_head, txq_next, txq_tail; /* queued, packetizing, oldest */
	uint32_t frag_off;              /* next fragment of txq_next */
	struct udp_txpkt *win;
	uint32_t wnd;                   /* window in packets, power of two */
	uint32_t acked;                 /* cumulative: all <= acked are acked */
	uint32_t sent_hi;               /* highest seq sent */
	uint32_t next_seq;              /* next seq to send (go back lowers it) */
	bool stopped;                   /* receiver said STOP; wait for GO */
	uint32_t stop_seq;              /* the seq it refused */
	bool refusing;                  /* resends up to refused_hi follow a STOP: */
	uint32_t refused_hi;            /* they were refused, not lost */
	uint64_t rto_ns, srtt_ns, rttvar_ns;
	uint64_t rto_deadline;          /* 0: no timer */
	uint32_t strikes;               /* timeouts in a row without progress */
	uint32_t no_sample_hi;          /* seqs up to here were outstanding at a
					   timeout or a hold: no RTT samples */
	bool want_space;

	/* receiver */
	uint8_t *rx_mem;
	struct ring_producer rx_dev;    /* reassembled messages go here */
	struct ring_consumer rx_user;   /* pm_recv reads them in place */
	uint32_t expected;              /* next in-order seq */
	uint8_t *ooo;                   /* wait queue: out-of-order packets */
	uint32_t *ooo_seq;
	uint16_t *ooo_len;
	uint8_t *ooo_valid;
	uint32_t nooo;                  /* slots, power of two */
	uint32_t ooo_count;             /* packets waiting beyond a gap */
	struct udp_rxmsg rx;
	bool stop_sent;
	uint32_t stop_need;             /* ring bytes the refused message needs */
	uint32_t ack_pending;
	uint64_t ack_deadline;
	bool ack_now;
	bool poll_pending;              /* the peer POLLed: answer after this pass */
	uint32_t poll_seq;
	uint32_t lose_for;              /* expected seq a LOSE was sent for */
	uint64_t lose_ns;
	uint64_t last_heard_ns;
	uint64_t rx_count;              /* data packets received from the peer */
};

struct udp_op_slot {
	struct pm_op *op;
	uint8_t *dst;                   /* reads: where the data goes; atomics:
					   where the old value goes, or NULL */
	uint32_t len;
	uint16_t gen;
	bool busy;
	bool atomic;                    /* answered by RMA_DONE with a value */
	uint32_t aop;                   /* an atomic's op: the result's width */
	uint8_t body[WIRE_ATOMIC_BYTES];/* the request's body: a read's length,
					   an atomic's operands */
};

struct udp_window {
	uint64_t key;
	uint8_t *addr;
	uint64_t len;
};

/* ---- the output queue (outq.c) ---- */

/* One packet made by the protocol: its headers, encoded here, and its
 * payload where it lies (the send ring, a registered region, a reader's
 * body), so nothing is copied before the device sends it. */
struct udp_out {
	uint8_t hdr[WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES];
	struct iovec iov[2];            /* the headers, then the payload */
	int niov;                       /* 1: no payload */
	struct sockaddr_in *to;         /* the peer's address on the path */
	int peer;
	uint8_t path;
};

/* Takes the n packets of a NIC's batch (sends them, for the device). */
typedef void udp_drain_fn(void *arg, int nic, struct udp_out *pkts, int n);

/* A fixed batch per NIC, as one sendmmsg() takes it: no allocation.  A
 * packet for a full batch first hands the batch to drain; so does
 * udp_outq_flush, for every batch that holds something. */
struct udp_outq {
	struct udp_out out[UDP_MAX_NICS][UDP_BATCH];
	int n[UDP_MAX_NICS];
	uint32_t pending;               /* bit i: NIC i's batch holds packets */
	udp_drain_fn *drain;
	void *drain_arg;
};

/* ---- the protocol core ---- */

struct udp_proto_conf {
	uint64_t jobkey;                /* detached: this context's own key */
	uint32_t me, size;              /* our rank, the job's size; detached:
					   our context id, 1 (ourselves) */
	uint32_t cap;                   /* detached: peers at most; else 0 */
	uint32_t ring_bytes;            /* send and receive ring per peer (valid) */
	uint32_t wnd;                   /* packets in flight per peer (valid) */
	struct pm_stats *stats;         /* where the counters go */
	uint64_t *requests_served;      /* counts the peers' remote operations
					   taken in (pm_requests_served); NULL:
					   the proto's own */
	udp_drain_fn *drain;            /* where the packets go */
	void *drain_arg;
	/* Where the lock of the context's atomics is (core/atomic.h: its shm
	 * device may move it after this opens); NULL: the proto's own. */
	_Atomic uint32_t *const *atomic_lock;
};

/* A socket a detached peer sends from, by which its packets are told
 * (udp_proto_input): port 0 marks a free slot of the table. */
struct udp_source {
	uint32_t addr;                  /* network byte order */
	uint16_t port;                  /* network byte order */
	uint16_t _pad;
	uint32_t id;                    /* the peer's context id */
	int32_t peer;
};

/* One process's protocol with all its peers. */
struct udp_proto {
	uint64_t jobkey;
	uint32_t me, size;
	/* Detached (cap > 0): size grows up to cap as peers are inserted; a
	 * packet's src is the sender's context id, not an index, so the
	 * sender is found by its socket and id in an open-addressing table
	 * (power-of-two slots, at most half full, grown at insert). */
	uint32_t cap;
	struct udp_source *sources;
	uint32_t nsources, sources_cap;
	struct udp_peer *peers;         /* by rank; unused slots for peers not served */
	bool *served;
	uint32_t ring_bytes;
	uint32_t wnd;
	int next_rx_peer;
	struct udp_window win[PM_MAX_WINDOWS];
	struct udp_op_slot ops[UDP_OPS];
	uint16_t op_gen;
	uint64_t drops_by[WIRE_VERDICTS];
	uint64_t now_ns;                /* the driver's clock, set before each call */
	/* Input left something to send at the end of its pass (an ack owed
	 * at once, a POLL to answer): udp_proto_timers sends it and clears
	 * this.  Otherwise a pass that took data in may leave the timers to
	 * their tick, as an empty pass does. */
	bool answer_due;
	bool op_done;                   /* a remote op completed since the last event */
	_Atomic uint32_t *const *atomic_lock;   /* see udp_proto_conf */
	_Atomic uint32_t atomic_lock_own;
	struct pm_stats *stats;
	uint64_t *requests_served;      /* see udp_proto_conf */
	uint64_t requests_served_own;   /* where it points when the conf gives none */
	struct udp_outq out;
};

/* proto.c: the driver's side */
int udp_proto_init(struct udp_proto *u, const struct udp_proto_conf *conf);
/* p's rank, paths, frag, max_inflight and max_message are set (and, if
 * detached, its key and id): make its queues and serve it.  A detached
 * peer's paths are entered in the sources (-ENOMEM). */
int udp_peer_open(struct udp_proto *u, struct udp_peer *p);
/* Detached: the peer that sends from addr:port (network order) with
 * context id, or -1. */
int udp_source_peer(const struct udp_proto *u, uint32_t addr, uint16_t port, uint32_t id);
void udp_proto_fini(struct udp_proto *u);
/* The peer this process serves as rank, or NULL (on every pass: inline). */
static inline struct udp_peer *udp_peer_of(struct udp_proto *u, int rank)
{
	if (rank < 0 || (uint32_t)rank >= u->size || !u->served[rank])
		return NULL;
	return &u->peers[rank];
}

/* One datagram that came on NIC nic from the address from. */
void udp_proto_input(struct udp_proto *u, int nic, const uint8_t *buf, size_t n,
		     const struct sockaddr_in *from);
/* A datagram the driver could not even read (truncated): counted. */
void udp_proto_drop(struct udp_proto *u, enum wire_verdict v);
/* Timers due at now_ns: POLLs, answers to POLLs, delayed ACKs, probes. */
void udp_proto_timers(struct udp_proto *u);
/* When udp_proto_timers next has something to do (UINT64_MAX: never). */
uint64_t udp_proto_next_timer(const struct udp_proto *u);
/* The driver could not send o (err: the errno why). */
void udp_proto_send_failed(struct udp_proto *u, const struct udp_out *o, int err);
/* Every ACK owed now, not after its delay (about to sleep, closing). */
void udp_proto_ack_now(struct udp_proto *u);
/* Something a waiter cares about: a message, send space, a completion. */
bool udp_proto_event(struct udp_proto *u);
/* Nothing sent is unacknowledged, no ACK is owed. */
bool udp_proto_idle(const struct udp_proto *u);
/* After a hold: timers restart from now_ns (see device.c, udp_resumed). */
void udp_proto_resumed(struct udp_proto *u);

/* proto.c: the application's side */
int udp_proto_recv(struct udp_proto *u, struct pm_msg *msg);
int udp_proto_release(struct udp_proto *u, const struct pm_msg *msg);
void udp_proto_expose(struct udp_proto *u, uint32_t idx, uint64_t key, void *addr, size_t len);
/* -EAGAIN: no free operation or queue slot (progress may free one). */
int udp_proto_rma(struct udp_proto *u, struct udp_peer *p, bool write, void *local,
		  size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op);
/* pm_atomic() to p: the target runs it and answers RMA_DONE with the old
 * value.  -EAGAIN as udp_proto_rma. */
int udp_proto_atomic(struct udp_proto *u, struct udp_peer *p, uint32_t aop, uint64_t operand,
		     uint64_t compare, void *result, uint64_t rkey, uint64_t roffset,
		     struct pm_op *op);
/* Run an ATOMIC from a peer on this context's word at `at`. */
int udp_atomic_here(struct udp_proto *u, uint8_t *at, const struct wire_atomic *a,
		    uint64_t *old);

/* proto.c: for tx.c and rx.c */
void udp_send_control(struct udp_proto *u, struct udp_peer *p, uint8_t type, uint32_t seq);
void udp_send_control_on(struct udp_proto *u, struct udp_peer *p, int path, uint8_t type,
			 uint32_t seq);
void udp_op_complete(struct udp_proto *u, uint64_t cookie, int status);
/* The RMA_DONE of op cookie: its status, and an atomic's old value. */
void udp_op_done(struct udp_proto *u, uint64_t cookie, int status, uint64_t value);
struct udp_op_slot *udp_op_lookup(struct udp_proto *u, uint64_t cookie);
/* Where [off, off + len) of window key lies here (off is a virtual address
 * for a PM_MR_VIRT key); NULL with *err -ENOENT or -ERANGE. */
uint8_t *udp_window_check(struct udp_proto *u, uint64_t key, uint64_t off, uint64_t len,
			  int *err);

/* outq.c */
void udp_outq_init(struct udp_outq *q, udp_drain_fn *drain, void *arg);
/* Queue a packet to p on path: h (its len is set here), m for a FIRST
 * fragment, and len bytes of payload, referenced, not copied. */
void udp_out_packet(struct udp_proto *u, struct udp_peer *p, int path,
		    const struct wire_hdr *h, const struct wire_msg_hdr *m,
		    const void *payload, size_t len);
/* Hand every batch that holds packets to drain. */
void udp_outq_flush(struct udp_outq *q);

/* tx.c */
int udp_tx_init(struct udp_proto *u, struct udp_peer *p);
void udp_tx_fini(struct udp_peer *p);
/* Room for a message of len bytes in p's send ring (pm_send_buffer). */
int udp_tx_buffer(struct udp_peer *p, size_t len, void **buf);
/* The message built there is complete: queue and send it (pm_send). */
int udp_tx_send(struct udp_proto *u, struct udp_peer *p, size_t len);
int udp_tx_enqueue(struct udp_proto *u, struct udp_peer *p, const struct udp_txmsg *m);
uint32_t udp_txq_free(const struct udp_peer *p);
void udp_tx_pump(struct udp_proto *u, struct udp_peer *p);
void udp_tx_on_ack(struct udp_proto *u, struct udp_peer *p, uint32_t ack);
void udp_tx_on_control(struct udp_proto *u, struct udp_peer *p, const struct wire_hdr *h);
void udp_tx_timers(struct udp_proto *u, struct udp_peer *p);
uint64_t udp_tx_next_timer(const struct udp_peer *p);
bool udp_tx_drained(const struct udp_peer *p);
uint32_t udp_piggy_ack(const struct udp_peer *p);

/* rx.c */
int udp_rx_init(struct udp_proto *u, struct udp_peer *p);
void udp_rx_fini(struct udp_peer *p);
void udp_rx_on_data(struct udp_proto *u, struct udp_peer *p, const struct wire_hdr *h,
		    const uint8_t *payload);
void udp_rx_timers(struct udp_proto *u, struct udp_peer *p);
uint64_t udp_rx_next_timer(const struct udp_peer *p);
void udp_rx_released(struct udp_proto *u, struct udp_peer *p);
void udp_rx_on_poll(struct udp_proto *u, struct udp_peer *p, uint32_t seq);

#endif /* PM_UDP_H */
