/* SPDX-License-Identifier: MIT */
/*
 * udp.h - the udp device (PM/Ethernet): state shared by its parts.
 *
 *   device.c    the device: sockets, batched I/O, progress, waiting
 *   tx.c        the sender: message queue, fragmentation, Go-Back-N window,
 *               acknowledgements, STOP/GO/LOSE, retransmission timers
 *   rx.c        the receiver: ordering (wait queue), reassembly, flow
 *               control, acknowledgements
 *   wire.c      the packet format
 *   nic.c       NIC configuration
 *
 * Protocol: docs/pm/wire.md.  Everything is per (this process, peer) pair.
 */
#ifndef PM_UDP_H
#define PM_UDP_H

#include "core/pm_internal.h"
#include "core/ring.h"
#include "stats.h"
#include "nic.h"
#include "wire.h"

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#define UDP_BATCH          32       /* packets per sendmmsg/recvmmsg */
#define UDP_ACK_EVERY      32       /* in-order packets per pure ACK at most */
#define UDP_ACK_DELAY_NS   50000u   /* a pending ACK waits this long for a ride */
#define UDP_RTO_MIN_NS     10000000u /* 10 ms: below it, scheduling noise fires timers */
#define UDP_RTO_MAX_NS     200000000u
#define UDP_PROBE_NS       100000000u
#define UDP_PKT_MAX        9216     /* largest datagram we build or accept */
#define UDP_INFLIGHT_MAX   (1u << 20) /* bytes in flight per peer at most */
#define UDP_OPS            256      /* outstanding remote ops per process */
#define UDP_GSO_SEGS       64       /* segments per GSO message (UDP_MAX_SEGMENTS) */
#define UDP_GSO_BYTES      65000    /* bytes per GSO message: under 64 KiB with headers */
#define UDP_RX_SLOT        65536    /* receive buffer per message with GRO on */

struct udp_path {
	int nic;                        /* index of our NIC and socket */
	struct sockaddr_in to;          /* the peer's address on that network */
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
	int status;
};

struct udp_peer {
	int rank;
	struct udp_path paths[UDP_MAX_NICS];
	int npaths;
	uint32_t rr;                    /* round-robin among equal paths */
	uint16_t frag;                  /* payload bytes per packet */
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
	uint8_t *dst;                   /* reads: where the data goes */
	uint32_t len;
	uint16_t gen;
	bool busy;
	uint8_t body[8];                /* reads: the request's body (length) */
};

struct udp_window {
	uint64_t key;
	uint8_t *addr;
	uint64_t len;
};

/* A packet being built for the next sendmmsg. */
struct udp_out {
	uint8_t hdr[WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES];
	struct iovec iov[2];
	struct mmsghdr mh;
	int peer;
	uint8_t path;
};

/* The batch of one NIC regrouped into GSO messages (device.c, gso_build). */
struct udp_gso {
	struct mmsghdr mh[UDP_BATCH];
	struct iovec iov[2 * UDP_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} cm[UDP_BATCH];
	int first[UDP_BATCH + 1];       /* message m holds packets [first[m], first[m+1]) */
};

/* The receive batch: its headers are set up once and only the entries a
 * recvmmsg() filled are reset afterwards (device.c, receive). */
struct udp_rx_batch {
	struct mmsghdr mm[UDP_BATCH];
	struct iovec iov[UDP_BATCH];
	struct sockaddr_in from[UDP_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm[UDP_BATCH];
};

struct udp_dev {
	struct pm_device base;
	struct udp_nic nics[UDP_MAX_NICS];
	int nnics;
	int fds[UDP_MAX_NICS];
	uint64_t jobkey;
	uint32_t me, size;
	struct udp_peer *peers;         /* by rank; NULL slots for peers we do not serve */
	bool *served;
	uint32_t ring_bytes;
	uint32_t wnd;
	int next_rx_peer;
	struct udp_window win[PM_MAX_WINDOWS];
	struct udp_op_slot ops[UDP_OPS];
	uint16_t op_gen;
	struct udp_out out[UDP_MAX_NICS][UDP_BATCH];   /* per NIC: one sendmmsg each */
	int nout[UDP_MAX_NICS];
	struct udp_gso gso_out;
	bool gso[UDP_MAX_NICS];         /* the socket segments for us (UDP_SEGMENT) */
	size_t rx_slot;                 /* bytes per receive buffer (more with GRO) */
	uint8_t *rxbuf;                 /* UDP_BATCH datagrams */
	struct udp_rx_batch rx;
	uint64_t drops_by[WIRE_VERDICTS];
	uint64_t now_ns;                /* refreshed once per progress pass */
	uint64_t last_yield_ns;         /* idle_yield (device.c) */
	bool remote_only;               /* under composite: peers off this node */
	bool op_done;                   /* a remote op completed since the last poll */
	struct pm_stats_nic *nic_stats; /* in the statistics page */
};

/* device.c */
void udp_out_packet(struct udp_dev *u, struct udp_peer *p, int path,
		    const struct wire_hdr *h, const struct wire_msg_hdr *m,
		    const void *payload, size_t len);
void udp_send_control(struct udp_dev *u, struct udp_peer *p, uint8_t type, uint32_t seq);
void udp_send_control_on(struct udp_dev *u, struct udp_peer *p, int path, uint8_t type,
			 uint32_t seq);
void udp_flush(struct udp_dev *u);
struct udp_peer *udp_peer_of(struct udp_dev *u, int rank);

/* tx.c */
int udp_tx_init(struct udp_dev *u, struct udp_peer *p);
void udp_tx_fini(struct udp_peer *p);
int udp_tx_enqueue(struct udp_dev *u, struct udp_peer *p, const struct udp_txmsg *m);
uint32_t udp_txq_free(const struct udp_peer *p);
void udp_tx_pump(struct udp_dev *u, struct udp_peer *p);
void udp_tx_on_ack(struct udp_dev *u, struct udp_peer *p, uint32_t ack);
void udp_tx_on_control(struct udp_dev *u, struct udp_peer *p, const struct wire_hdr *h);
void udp_tx_timers(struct udp_dev *u, struct udp_peer *p);
uint64_t udp_tx_next_timer(const struct udp_peer *p);
bool udp_tx_drained(const struct udp_peer *p);
uint32_t udp_piggy_ack(const struct udp_peer *p);

/* rx.c */
int udp_rx_init(struct udp_dev *u, struct udp_peer *p);
void udp_rx_fini(struct udp_peer *p);
void udp_rx_on_data(struct udp_dev *u, struct udp_peer *p, const struct wire_hdr *h,
		    const uint8_t *payload);
void udp_rx_timers(struct udp_dev *u, struct udp_peer *p);
uint64_t udp_rx_next_timer(const struct udp_peer *p);
void udp_rx_released(struct udp_dev *u, struct udp_peer *p);
void udp_rx_on_poll(struct udp_peer *p, uint32_t seq);

/* remote operations (device.c) */
void udp_op_complete(struct udp_dev *u, uint64_t cookie, int status);
struct udp_op_slot *udp_op_lookup(struct udp_dev *u, uint64_t cookie);
struct udp_window *udp_window_check(struct udp_dev *u, uint64_t key, uint64_t off,
				    uint64_t len, int *err);

#endif /* PM_UDP_H */
