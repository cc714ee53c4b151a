/* SPDX-License-Identifier: MIT */
/*
 * device.c - the udp device (PM/Ethernet): a light reliable protocol of
 * our own over UDP, one socket per NIC, packets striped over every NIC that
 * reaches a peer (network trunking), batched system calls, busy-poll then
 * block.  This file is the I/O around the protocol core (proto.c, tx.c,
 * rx.c), which does none: it reads the sockets and hands each datagram to
 * the core, runs the core's timers, and sends what the core queued (outq.c)
 * with sendmmsg, in GSO runs where the kernel can.
 *
 * The eth device is this one with raw Ethernet frames in place of UDP
 * datagrams (eth/link.h): the same protocol, trunking and waiting; only
 * the NICs' I/O differs (send_batch, receive, opening).
 */
#include "device.h"
#include "core/detached.h"
#include "eth/frame.h"
#include "eth/link.h"
#include "stats.h"
#include "udp.h"
#include "util/clock.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UDP_KEY "pm.udp"
#define UDP_SOCKBUF (4 << 20)
#define UDP_DEFAULT_WND 512
#define UDP_RX_ROUNDS 8                 /* recvmmsg batches per NIC per pass */
#define UDP_DRAIN_TIMEOUT_NS 30000000000ull
#define UDP_GSO_SEGS       64       /* segments per GSO message (UDP_MAX_SEGMENTS) */
#define UDP_GSO_BYTES      65000    /* bytes per GSO message: under 64 KiB with headers */
#define UDP_RX_SLOT        65536    /* receive buffer per message with GRO on */
#define UDP_LONE_MAX       512      /* a lone packet up to this size goes by sendto */

struct udp_blob {
	uint32_t nnics;
	uint32_t rcvbuf;                /* bytes each socket can hold */
	uint32_t ring_bytes;            /* its receive rings (PM_UDP_RING_KIB) */
	uint32_t rx_slots;              /* eth: frames its smallest NIC ring holds */
	struct udp_nic_addr nic[UDP_MAX_NICS];
};

/* A NIC's batch regrouped into GSO messages (gso_build). */
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
 * recvmmsg() filled are reset afterwards (receive). */
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
	struct udp_proto pr;            /* the protocol, without I/O */
	struct udp_nic nics[UDP_MAX_NICS];
	int nnics;
	int fds[UDP_MAX_NICS];
	struct mmsghdr plain[UDP_BATCH]; /* a NIC's batch, one datagram a packet */
	struct udp_gso gso_out;
	bool gso[UDP_MAX_NICS];         /* the socket segments for us (UDP_SEGMENT) */
	size_t rx_slot;                 /* bytes per receive buffer (more with GRO) */
	uint8_t *rxbuf;                 /* UDP_BATCH datagrams */
	struct udp_rx_batch rx;
	uint8_t lone[UDP_LONE_MAX];     /* a lone small packet, gathered (send_lone) */
	uint64_t last_yield_ns;         /* idle_yield */
	uint64_t last_timers_ns;        /* progress */
	/* Per NIC: consecutive receive passes that found data (receive). */
	unsigned rx_streak[UDP_MAX_NICS];
	bool remote_only;               /* under composite: peers off this node */
	/* The eth device: raw frames through links[i] (whose packet socket
	 * is fds[i], for waiting); the udp device: UDP sockets. */
	bool eth;
	struct eth_link links[UDP_MAX_NICS];
	/* pm_signal() writes the eventfd while the owner sleeps in pm_wait()
	 * (udp_wake): the sockets alone would not end the poll. */
	int wake_fd;
	_Atomic uint32_t sleeping;
	int rx_nic;                     /* the NIC receive_eth is reading */
	struct pm_stats_nic *nic_stats; /* in the statistics page */
	/* What this process published (its NICs' endpoints, buffers): a
	 * detached context's address is made from it (udp_address). */
	struct udp_blob self;
};

static inline struct udp_dev *to_udp(struct pm_device *dev)
{
	return (struct udp_dev *)dev;
}

/* ---- output: the core's queue, sent ---- */

/* After a send failed (errno): whether to try again.  Interrupted calls are
 * repeated; a full socket buffer gets one bounded wait per flush (*waited)
 * rather than losing the packets at once. */
static bool send_again(int fd, bool *waited)
{
	if (errno == EINTR)
		return true;
	if ((errno == EAGAIN || errno == ENOBUFS) && !*waited) {
		struct pollfd pfd = { .fd = fd, .events = POLLOUT };

		poll(&pfd, 1, 10);
		*waited = true;
		return true;
	}
	return false;
}

/*
 * n messages sent (sendmmsg, or sendmsg for one): how many went (> 0), or
 * the negative errno why the first could not (send_again decides what is
 * tried again).
 */
static int send_messages(int fd, struct mmsghdr *mh, unsigned n, bool *waited)
{
	for (;;) {
		/* A lone message too big for send_lone goes with the raw
		 * sendmsg: sendmmsg's batch machinery costs more than it saves,
		 * and libc's wrapper is a cancellation point. */
		int r = n == 1 ? (syscall(SYS_sendmsg, fd, &mh->msg_hdr, 0) < 0 ? -1 : 1)
			       : sendmmsg(fd, mh, n, 0);

		if (r > 0)
			return r;
		if (r == 0)
			return -EIO;
		if (!send_again(fd, waited))
			return -errno;
	}
}

static size_t out_bytes(const struct udp_out *o)
{
	size_t b = 0;

	for (int i = 0; i < o->niov; i++)
		b += o->iov[i].iov_len;
	return b;
}

/*
 * A lone small packet (a ping-pong's message or reply, an ACK): gathered
 * into one buffer and sent with sendto(), which, unlike sendmsg(), copies
 * no message header or iovec in from user space: on the latency path every
 * system call's set-up counts.  Returns as send_messages() does.
 */
static int send_lone(struct udp_dev *u, int fd, const struct udp_out *o, bool *waited)
{
	size_t len = 0;

	for (int i = 0; i < o->niov; i++) {
		memcpy(u->lone + len, o->iov[i].iov_base, o->iov[i].iov_len);
		len += o->iov[i].iov_len;
	}
	for (;;) {
		if (syscall(SYS_sendto, fd, u->lone, len, 0, o->to, sizeof(*o->to)) >= 0)
			return 1;
		if (!send_again(fd, waited))
			return -errno;
	}
}

/* One datagram per packet, from packet `from` of the batch on. */
static void flush_plain(struct udp_dev *u, int nic, struct udp_out *out, int n, int from)
{
	int done = from;
	bool waited = false;

	if (n - from == 1 && out_bytes(&out[from]) <= UDP_LONE_MAX) {
		int r = send_lone(u, u->fds[nic], &out[from], &waited);

		if (r < 0)
			udp_proto_send_failed(&u->pr, &out[from], -r);
		return;
	}

	for (int i = from; i < n; i++)
		u->plain[i].msg_hdr = (struct msghdr){ .msg_name = out[i].to,
						       .msg_namelen = sizeof(*out[i].to),
						       .msg_iov = out[i].iov,
						       .msg_iovlen = (size_t)out[i].niov };
	while (done < n) {
		int r = send_messages(u->fds[nic], &u->plain[done], (unsigned)(n - done), &waited);

		if (r > 0) {
			done += r;
			continue;
		}
		/* The packet at done could not go: a full socket buffer or a link
		 * that is down.  Count it as lost (Go-Back-N resends it). */
		udp_proto_send_failed(&u->pr, &out[done], -r);
		done++;
	}
}

static bool same_to(const struct udp_out *a, const struct udp_out *b)
{
	const struct sockaddr_in *x = a->to, *y = b->to;

	return x->sin_addr.s_addr == y->sin_addr.s_addr && x->sin_port == y->sin_port;
}

/* Group the batch into GSO messages: a run of packets to one address, all
 * of one size but the last (which may be shorter), within the kernel's
 * limits on segments and bytes.  The kernel cuts the run's bytes every
 * gso_size bytes, so each segment is exactly one of our packets, headers
 * included; nothing is copied.  Returns the number of messages. */
static int gso_build(struct udp_dev *u, const struct udp_out *out, int n)
{
	struct udp_gso *g = &u->gso_out;
	int m = 0, k = 0;

	for (int i = 0; i < n; m++) {
		size_t seg = out_bytes(&out[i]), total = 0;
		struct msghdr *mh = &g->mh[m].msg_hdr;
		int j = i;

		*mh = (struct msghdr){ .msg_name = out[i].to, .msg_namelen = sizeof(*out[i].to),
				       .msg_iov = &g->iov[k] };
		while (j < n && j - i < UDP_GSO_SEGS) {
			size_t b = out_bytes(&out[j]);

			if (j > i && (!same_to(&out[i], &out[j]) || b > seg || total + b > UDP_GSO_BYTES))
				break;
			for (int v = 0; v < out[j].niov; v++)
				g->iov[k++] = out[j].iov[v];
			mh->msg_iovlen += (size_t)out[j].niov;
			total += b;
			j++;
			if (b < seg)
				break;          /* a short packet ends a run */
		}
		if (j - i > 1) {
			struct cmsghdr *c = &g->cm[m].align;

			mh->msg_control = g->cm[m].buf;
			mh->msg_controllen = sizeof(g->cm[m].buf);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			*(uint16_t *)(void *)CMSG_DATA(c) = (uint16_t)seg;
		}
		g->first[m] = i;
		i = j;
	}
	g->first[m] = n;
	return m;
}

static void flush_gso(struct udp_dev *u, int nic, struct udp_out *out, int n)
{
	struct udp_gso *g = &u->gso_out;
	int m = gso_build(u, out, n), done = 0;
	bool waited = false;

	while (done < m) {
		int r = send_messages(u->fds[nic], &g->mh[done], (unsigned)(m - done), &waited);

		if (r > 0) {
			done += r;
			continue;
		}

		int err = -r;

		if (g->first[done + 1] - g->first[done] > 1 &&
		    (err == EIO || err == EINVAL || err == EMSGSIZE || err == ENOPROTOOPT)) {
			/* The route cannot segment (no checksum offload, an
			 * xfrm policy, an old kernel): send per packet from
			 * here on, on this socket for good. */
			u->gso[nic] = false;
			pm_log(u->base.ctx->rank, "udp: %s: UDP GSO refused (%s), one datagram per packet",
			       u->nics[nic].name, strerror(err));
			flush_plain(u, nic, out, n, g->first[done]);
			return;
		}
		/* The whole message is lost: its packets share one path. */
		for (int i = g->first[done]; i < g->first[done + 1]; i++)
			udp_proto_send_failed(&u->pr, &out[i], err);
		done++;
	}
}

/* The eth device's batch: one frame per packet, to the MAC and port of
 * the packet's path. */
static void flush_eth(struct udp_dev *u, int nic, struct udp_out *out, int n)
{
	struct eth_send s[UDP_BATCH];
	int done = 0;

	for (int i = 0; i < n; i++) {
		const struct udp_path *pa = &u->pr.peers[out[i].peer].paths[out[i].path];

		s[i] = (struct eth_send){ .mac = pa->mac, .port = ntohs(pa->to.sin_port),
					  .iov = out[i].iov, .niov = out[i].niov,
					  .len = out_bytes(&out[i]) };
	}
	bool waited = false;

	while (done < n) {
		int err;

		done += eth_link_send(&u->links[nic], s + done, n - done, &err);
		if (done == n || !err)
			continue;
		/* A full send buffer gets the one bounded wait per flush that
		 * the udp device gives it (send_again); past that, or for any
		 * other error, the frame is lost, as one a switch drops, and
		 * Go-Back-N resends it. */
		errno = -err;
		if (send_again(u->fds[nic], &waited))
			continue;
		udp_proto_send_failed(&u->pr, &out[done], -err);
		done++;
	}
}

/* The core's drain: a NIC's batch goes out (outq.c). */
static void send_batch(void *arg, int nic, struct udp_out *out, int n)
{
	struct udp_dev *u = arg;

	for (int i = 0; i < n; i++) {
		u->nic_stats[nic].tx_packets++;
		u->nic_stats[nic].tx_bytes += out_bytes(&out[i]);
	}
	if (u->eth)
		flush_eth(u, nic, out, n);
	else if (u->gso[nic] && n > 1)
		flush_gso(u, nic, out, n);
	else
		flush_plain(u, nic, out, n, 0);
}

static void udp_flush(struct udp_dev *u)
{
	udp_outq_flush(&u->pr.out);
}

/* ---- input: the sockets, read ---- */

/* The segment size of a GRO batch, or 0 when the message is one datagram. */
static size_t gro_size(struct msghdr *mh)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		int seg;

		if (c->cmsg_level != SOL_UDP || c->cmsg_type != UDP_GRO ||
		    c->cmsg_len < CMSG_LEN(sizeof(seg)))
			continue;
		memcpy(&seg, CMSG_DATA(c), sizeof(seg));
		return seg > 0 ? (size_t)seg : 0;
	}
	return 0;
}

/* Entry i of the receive batch as recvmmsg() wants it (it writes back the
 * lengths and flags of the entries it fills). */
static void rx_entry_reset(struct udp_dev *u, int i)
{
	struct udp_rx_batch *rb = &u->rx;
	struct msghdr *mh = &rb->mm[i].msg_hdr;

	rb->iov[i] = (struct iovec){ u->rxbuf + (size_t)i * u->rx_slot, u->rx_slot };
	*mh = (struct msghdr){ .msg_iov = &rb->iov[i], .msg_iovlen = 1,
			       .msg_name = &rb->from[i], .msg_namelen = sizeof(rb->from[i]),
			       .msg_control = rb->cm[i].buf,
			       .msg_controllen = sizeof(rb->cm[i].buf) };
	rb->mm[i].msg_len = 0;
}

static int rx_batch_init(struct udp_dev *u)
{
	u->rxbuf = malloc((size_t)UDP_BATCH * u->rx_slot);
	if (!u->rxbuf)
		return -ENOMEM;
	for (int i = 0; i < UDP_BATCH; i++)
		rx_entry_reset(u, i);
	return 0;
}

/* One message as read: len bytes, which with GRO are several of the peer's
 * datagrams of seg bytes each (the last may be shorter); seg 0 means one
 * datagram.  truncated: it did not fit the buffer. */
static void deliver(struct udp_dev *u, int nic, const uint8_t *buf, size_t len, size_t seg,
		    bool truncated, const struct sockaddr_in *from)
{
	u->nic_stats[nic].rx_bytes += len;
	if (truncated) {
		u->nic_stats[nic].rx_packets++;
		udp_proto_drop(&u->pr, WIRE_BAD_LEN);
		return;
	}
	if (seg == 0 || seg > len)
		seg = len;
	/* An empty datagram is a packet too (too short: dropped, counted). */
	size_t off = 0;

	do {
		size_t n = len - off < seg ? len - off : seg;

		u->nic_stats[nic].rx_packets++;
		udp_proto_input(&u->pr, nic, buf + off, n, from);
		off += n;
	} while (off < len);
}

/*
 * Sparse traffic (a ping-pong, one message now and then): one datagram is
 * read with the plainest call there is, and what it brings is handled (and
 * answered) at once.  An empty poll is most of a waiting process's time,
 * and its cost is what a message that arrives meanwhile waits: recvfrom()
 * copies no message header, iovec or control buffer in from user space, as
 * recvmsg() does on every call, and the raw system call skips libc's
 * cancellation point.  Without the control message a GRO buffer is cut by
 * the length of its first packet (wire_gro_segment).  Returns what
 * recvfrom returned.
 */
static long receive_one(struct udp_dev *u, int nic)
{
	struct udp_rx_batch *rb = &u->rx;
	uint8_t *buf = rb->iov[0].iov_base;
	socklen_t flen = sizeof(rb->from[0]);
	/* MSG_TRUNC: the datagram's real length, so that one too long for the
	 * buffer is seen and dropped. */
	long len = syscall(SYS_recvfrom, u->fds[nic], buf, u->rx_slot, MSG_DONTWAIT | MSG_TRUNC,
			   &rb->from[0], &flen);

	if (len < 0)
		return len;
	bool truncated = (size_t)len > u->rx_slot;
	size_t n = truncated ? u->rx_slot : (size_t)len;

	size_t seg = truncated ? 0 : wire_gro_segment(buf, n, u->pr.jobkey, u->pr.me);

	deliver(u, nic, buf, n, seg, truncated, &rb->from[0]);
	return len;
}

/* Up to batch messages read with one recvmmsg() and handled; how many. */
static int receive_batch(struct udp_dev *u, int nic, unsigned batch)
{
	struct udp_rx_batch *rb = &u->rx;
	int r = (int)syscall(SYS_recvmmsg, u->fds[nic], rb->mm, batch, MSG_DONTWAIT, NULL);

	for (int i = 0; i < r; i++) {
		struct msghdr *mh = &rb->mm[i].msg_hdr;

		deliver(u, nic, rb->iov[i].iov_base, rb->mm[i].msg_len, gro_size(mh),
			mh->msg_flags & MSG_TRUNC, &rb->from[i]);
	}
	for (int i = 0; i < r; i++)
		rx_entry_reset(u, i);
	return r;
}

/* Reads and handles what the sockets hold; whether anything came. */
static bool receive(struct udp_dev *u)
{
	bool got = false;

	/* One batch per NIC in turn: reading one NIC dry first would make
	 * packets striped over the others look late.  With several NICs the
	 * batches are smaller, so the reordering stays shallow: a GRO batch
	 * holds at most 64 KiB, and what is early is bounded by the sender's
	 * bytes in flight anyway, which the wait queue holds. */
	bool more = true;
	unsigned batch = u->nnics > 1 ? UDP_BATCH / (unsigned)u->nnics : UDP_BATCH;

	if (batch < 4)
		batch = 4;

	for (int round = 0; round < UDP_RX_ROUNDS && more; round++) {
		more = false;
		for (int nic = 0; nic < u->nnics; nic++) {
			/* Once data came in two passes running, the NIC
			 * streams: batches (receive_batch) instead of one
			 * datagram at a time (receive_one). */
			bool single = round == 0 && u->rx_streak[nic] < 2;
			int r = single ? (receive_one(u, nic) < 0 ? -1 : 1)
				       : receive_batch(u, nic, batch);

			if (round == 0)
				u->rx_streak[nic] = r <= 0 ? 0
						  : u->rx_streak[nic] < 2 ? u->rx_streak[nic] + 1 : 2;
			if (r <= 0)
				continue;
			got = true;
			/* Acknowledgements and replies go out after every batch, so
			 * a sender's window never waits for a whole receive pass. */
			udp_flush(u);
			more |= !single && (unsigned)r == batch;
		}
	}
	return got;
}

/* A PM packet out of an eth frame, to the core as a datagram from the
 * address and port in the frame's link header. */
static void deliver_frame(void *arg, const uint8_t *pkt, size_t len, uint32_t from_addr,
			  uint16_t from_port)
{
	struct udp_dev *u = arg;
	struct sockaddr_in from = { .sin_family = AF_INET, .sin_addr.s_addr = from_addr,
				    .sin_port = from_port };

	u->nic_stats[u->rx_nic].rx_packets++;
	u->nic_stats[u->rx_nic].rx_bytes += len;
	udp_proto_input(&u->pr, u->rx_nic, pkt, len, &from);
}

/* The eth device's receive: its rings, a batch per NIC in turn, as
 * receive() reads the sockets; no system call. */
static bool receive_eth(struct udp_dev *u)
{
	bool got = false, more = true;

	for (int round = 0; round < UDP_RX_ROUNDS && more; round++) {
		more = false;
		for (int nic = 0; nic < u->nnics; nic++) {
			struct eth_rx_drops drops = { 0 };

			u->rx_nic = nic;
			int r = eth_link_receive(&u->links[nic], UDP_BATCH, deliver_frame, u, &drops);

			for (uint64_t d = 0; d < drops.malformed; d++) {
				u->nic_stats[nic].rx_packets++;
				udp_proto_drop(&u->pr, WIRE_BAD_LEN);
			}
			u->nic_stats[nic].rx_dropped += (uint32_t)drops.overflow;
			if (r <= 0)
				continue;
			got = true;
			udp_flush(u);
			more |= r == UDP_BATCH;
		}
	}
	return got;
}

/* Nothing to do yet: now and then, let others run.  When every core
 * busy-polls, the kernel's deferred network processing (ksoftirqd), which
 * is what brings the next packet, would starve; on one machine playing a
 * cluster that costs milliseconds per message.  But a yield on every empty
 * poll gives the core away whenever anything else is runnable, and the
 * packet that arrives meanwhile waits for a whole context switch: on a
 * loaded node that was most of PM's latency.  Once per UDP_YIELD_NS of
 * fruitless polling keeps ksoftirqd fed at a fraction of the cost.  The
 * time counts from the last yield, not from the last pass that took
 * something in: a ping-pong of 8-10 us round trips yields about every
 * other one.  Counting from the last input instead (no yield at all in
 * such a ping-pong) made pmbench's udp latency worse, not better: slower
 * in 8 of 10 interleaved pairs on the 2-node virtual cluster, by a median 7 %
 * (2026-11-30). */
#define UDP_YIELD_NS 20000u

static void idle_yield(struct udp_dev *u)
{
	if (u->pr.now_ns - u->last_yield_ns < UDP_YIELD_NS)
		return;
	sched_yield();
	u->last_yield_ns = pm_now_ns();
}

/* Timers are looked at by a pass that took something in (its ACKs owed
 * now go out at its end), and otherwise at most this often: the shortest
 * of them (a delayed ACK) is 50 us, and an empty pass of a busy-polling
 * process, which is what a message waits for, is the shorter without. */
#define UDP_TIMER_TICK_NS 2000u

static void progress(struct udp_dev *u)
{
	u->pr.now_ns = pm_now_ns();

	bool got = u->eth ? receive_eth(u) : receive(u);

	/* What came is handled and what it asked for sent (receive flushes
	 * after every batch).  The timers wait for their tick, whether the
	 * pass took something in or not, unless its input left an answer due
	 * (only input sets it): they are no nearer than an empty pass would
	 * find them, and the reply a ping-pong's receiver is about to send
	 * would wait for them. */
	if (!u->pr.answer_due && u->pr.now_ns - u->last_timers_ns < UDP_TIMER_TICK_NS)
		return;
	/* Handling what came may have taken a while: the timers want the time
	 * after it.  An empty pass took next to none. */
	if (got)
		u->pr.now_ns = pm_now_ns();
	u->last_timers_ns = u->pr.now_ns;
	udp_proto_timers(&u->pr);
	udp_flush(u);
}

/* ---- opening ---- */

/* Ask for big socket buffers; root may exceed net.core.[rw]mem_max. */
static void size_buffer(int fd, int force, int plain)
{
	int buf = UDP_SOCKBUF;

	if (setsockopt(fd, SOL_SOCKET, force, &buf, sizeof(buf)) < 0)
		setsockopt(fd, SOL_SOCKET, plain, &buf, sizeof(buf));
}

static int open_socket(struct udp_dev *u, int i, uint16_t *port, uint32_t *rcvbuf)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = u->nics[i].addr };
	socklen_t len = sizeof(sa);
	int got = 0;
	socklen_t glen = sizeof(got);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	size_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF);
	size_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF);
	/* The kernel reports twice what it stores in data (the other half
	 * covers its bookkeeping). */
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &glen) == 0 && got > 0)
		*rcvbuf = (uint32_t)got / 2;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	u->fds[i] = fd;
	*port = sa.sin_port;

	/* GSO (Linux 4.18) sends a run of packets as one message; GRO (5.0)
	 * hands us a run as one buffer.  Either is optional: without it a
	 * packet is a datagram, as on the wire anyway.  A gso_size of 0 for
	 * the socket only asks whether the option exists; sends set theirs. */
	int zero = 0, one = 1;

	u->gso[i] = setsockopt(fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof(zero)) == 0;
	if (setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0)
		u->rx_slot = UDP_RX_SLOT;
	return 0;
}

/* NIC i of the eth device: its packet socket and ring, its port and MAC
 * published in pub. */
static int open_eth(struct udp_dev *u, int i, struct udp_nic_addr *pub, uint32_t *rcvbuf)
{
	char err[256] = "";
	int e = eth_link_open(&u->links[i], &u->nics[i], err, sizeof(err));

	if (e) {
		pm_log(u->base.ctx->rank, "eth: %s", err);
		return e;
	}
	u->fds[i] = u->links[i].fd;
	pub->port = htons(u->links[i].port);
	memcpy(pub->mac, u->links[i].mac, sizeof(pub->mac));
	*rcvbuf = eth_link_capacity(&u->links[i], u->nics[i].mtu);
	return 0;
}

static int udp_setup(struct pm_device *dev, struct pm_boot *b)
{
	struct udp_dev *u = to_udp(dev);
	struct pm_context *ctx = dev->ctx;
	struct udp_blob blob = { 0 };
	char err[256] = "";
	int n = udp_nics_configure(u->nics, err, sizeof(err));

	for (int i = 0; i < UDP_MAX_NICS; i++)
		u->fds[i] = -1;
	if (n < 0) {
		pm_log(ctx->rank, "udp: %s", err);
		return n;
	}
	u->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (u->wake_fd < 0) {
		int e = -errno;

		pm_log(ctx->rank, "udp: eventfd: %s", strerror(-e));
		return e;
	}
	u->nnics = n;

	struct udp_proto_conf conf = {
		.jobkey = b->jobkey, .me = (uint32_t)b->rank, .size = (uint32_t)b->size,
		.ring_bytes = ctx->udp_ring_kib * 1024u, .wnd = ctx->udp_window,
		.stats = ctx->stats, .requests_served = &ctx->requests_served,
		.drain = send_batch, .drain_arg = u,
		.atomic_lock = &ctx->atomic_lock,
	};

	if (ctx->detached) {
		/* The singleton bootstrap drew the key (b->jobkey), the core
		 * the context id (pm_open). */
		conf.me = ctx->detached_id;
		conf.cap = PM_DETACHED_MAX;
	}

	if (!ring_size_valid(conf.ring_bytes) || conf.wnd < 8 || (conf.wnd & (conf.wnd - 1)) ||
	    conf.wnd > (1u << 20)) {
		pm_log(ctx->rank, "udp: ring of %u KiB and window of %u packets: both must be powers "
		       "of two (ring >= 4 KiB, window 8..1M)", ctx->udp_ring_kib, ctx->udp_window);
		return -EINVAL;
	}
	int perr = udp_proto_init(&u->pr, &conf);

	if (perr)
		return perr;
	u->rx_slot = UDP_PKT_MAX;
	blob.nnics = (uint32_t)n;
	blob.ring_bytes = conf.ring_bytes;
	u->nic_stats = ctx->page->nics;
	ctx->page->nnics = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		snprintf(u->nic_stats[i].name, sizeof(u->nic_stats[i].name), "%s", u->nics[i].name);
		u->nic_stats[i].addr = u->nics[i].addr;
		uint32_t rcvbuf = 0;
		int e = u->eth ? open_eth(u, i, &blob.nic[i], &rcvbuf)
			       : open_socket(u, i, &blob.nic[i].port, &rcvbuf);

		if (e) {
			if (!u->eth)
				pm_log(ctx->rank, "udp: socket on %s: %s", u->nics[i].name,
				       strerror(-e));
			return e;
		}
		if (blob.rcvbuf == 0 || rcvbuf < blob.rcvbuf)
			blob.rcvbuf = rcvbuf;
		if (u->eth && (blob.rx_slots == 0 || u->links[i].frames < blob.rx_slots))
			blob.rx_slots = u->links[i].frames;
		blob.nic[i].addr = u->nics[i].addr;
		blob.nic[i].mtu = u->nics[i].mtu;
		blob.nic[i].prefix = u->nics[i].prefix;
	}
	/* Sized once the sockets said whether GRO is on: 2 MiB of address
	 * space with it, touched only as far as batches are long.  The eth
	 * device reads its frames where the kernel put them. */
	int rerr = u->eth ? 0 : rx_batch_init(u);

	if (rerr)
		return rerr;
	u->self = blob;
	return b->ops->put(b, UDP_KEY, &blob, sizeof(blob));
}

static bool is_local(const struct pm_boot *b, int rank)
{
	for (int i = 0; i < b->nlocal; i++)
		if (b->local_ranks[i] == rank)
			return true;
	return false;
}

/* Pair our NICs with the peer's on the same networks. */

static int make_paths(struct udp_dev *u, struct udp_peer *p, const struct udp_blob *blob)
{
	unsigned mtu = UDP_PKT_MAX;
	/* A detached context sends only from the NICs its address names:
	 * packets from any other socket would be dropped as unknown. */
	int ours = u->base.ctx->detached && u->nnics > PM_DADDR_NICS_MAX ? PM_DADDR_NICS_MAX
									 : u->nnics;

	p->npaths = 0;
	for (int i = 0; i < ours; i++) {
		for (uint32_t j = 0; j < blob->nnics && j < UDP_MAX_NICS; j++) {
			const struct udp_nic_addr *a = &blob->nic[j];

			if (!udp_same_network(u->nics[i].addr, u->nics[i].prefix, a->addr, a->prefix))
				continue;
			struct udp_path *pa = &p->paths[p->npaths++];

			pa->nic = i;
			pa->to = (struct sockaddr_in){ .sin_family = AF_INET,
						       .sin_addr.s_addr = a->addr,
						       .sin_port = a->port };
			memcpy(pa->mac, a->mac, sizeof(pa->mac));
			pa->up = true;
			mtu = u->nics[i].mtu < mtu ? u->nics[i].mtu : mtu;
			mtu = a->mtu < mtu ? a->mtu : mtu;
			break;
		}
	}
	if (p->npaths == 0)
		return -ENETUNREACH;
	/* IPv4 and UDP headers, or the eth link header, then ours. */
	p->frag = (uint16_t)(mtu - (u->eth ? ETH_LINK_HDR_BYTES : 20 + 8) - WIRE_HDR_BYTES);
	return 0;
}

/* The eth device: a frame takes a slot of the receiver's ring whatever its
 * size, so the packets in flight to a peer are bounded by its slots (half
 * of them over each path, as bytes are by half of a socket buffer), not
 * only by bytes.  0 for udp: its window alone bounds packets. */
static uint32_t max_window(const struct udp_peer *p, const struct udp_blob *blob)
{
	uint64_t n = (uint64_t)blob->rx_slots / 2 * (uint64_t)p->npaths;
	uint32_t w = 8;

	if (!blob->rx_slots)
		return 0;
	while ((uint64_t)w * 2 <= n && w < (1u << 20))
		w <<= 1;
	return w;
}

static int udp_connect(struct pm_device *dev, struct pm_boot *b)
{
	struct udp_dev *u = to_udp(dev);

	for (int r = 0; r < b->size; r++) {
		struct udp_peer *p = &u->pr.peers[r];
		struct udp_blob blob;
		size_t len = sizeof(blob);

		if ((u->remote_only || u->eth) && is_local(b, r)) {
			/* A frame never comes back to the NIC that sent it: the
			 * eth device reaches other nodes only (composite puts
			 * shm beside it). */
			if (u->eth && !u->remote_only && r == b->rank)
				pm_log(dev->ctx->rank, "eth: reaches processes on other nodes only; "
				       "run it under composite (PM_NET_DEVICE=eth)");
			continue;
		}
		int err = b->ops->get(b, r, UDP_KEY, &blob, &len);

		if (err || len != sizeof(blob) || blob.nnics == 0 || blob.nnics > UDP_MAX_NICS) {
			pm_log(dev->ctx->rank, "udp: no usable address for rank %d", r);
			return err ? err : -EPROTO;
		}
		p->rank = r;
		if (dev->ctx->detached) {
			/* Itself, its only peer until others are inserted. */
			p->key = b->jobkey;
			p->id = u->pr.me;
		}
		/* Each NIC's socket of the peer takes its own share. */
		p->max_inflight = (uint64_t)(blob.rcvbuf ? blob.rcvbuf : 65536) / 2 * blob.nnics;
		if (p->max_inflight > UDP_INFLIGHT_MAX)
			p->max_inflight = UDP_INFLIGHT_MAX;
		/* Ranks may be given different rings: a message must fit ours
		 * and the peer's. */
		p->max_message = ring_max_message(u->pr.ring_bytes);
		if (ring_size_valid(blob.ring_bytes) &&
		    ring_max_message(blob.ring_bytes) < p->max_message)
			p->max_message = ring_max_message(blob.ring_bytes);
		if (make_paths(u, p, &blob)) {
			pm_log(dev->ctx->rank, "udp: rank %d shares no network with this process "
			       "(check PM_UDP_NICS)", r);
			continue;       /* pm_open() reports the unreachable peer */
		}
		p->max_wnd = max_window(p, &blob);
		err = udp_peer_open(&u->pr, p);
		if (err)
			return err;
	}
	return 0;
}

static void udp_ready(struct pm_device *dev)
{
	(void)dev;
}

/* ---- detached contexts: addresses (core/detached.h) ---- */

static int udp_address(const struct pm_device *dev, void *buf, size_t *len)
{
	const struct udp_dev *u = (const struct udp_dev *)dev;
	const struct pm_context *ctx = dev->ctx;
	struct pm_daddr d = {
		.id = u->pr.me, .key = u->pr.jobkey, .host = ctx->host_id,
		.pid = ctx->detached_pid, .ring_bytes = u->self.ring_bytes,
		.rcvbuf = u->self.rcvbuf, .nnics = u->self.nnics,
	};
	uint8_t a[PM_ADDRESS_MAX];

	for (uint32_t i = 0; i < d.nnics && i < PM_DADDR_NICS_MAX; i++)
		d.nic[i] = (struct pm_daddr_nic){ .addr = u->self.nic[i].addr,
						  .port = u->self.nic[i].port,
						  .mtu = u->self.nic[i].mtu };

	size_t need = pm_daddr_encode(&d, a);

	if (*len < need) {
		*len = need;
		return -ENOBUFS;
	}
	memcpy(buf, a, need);
	*len = need;
	return 0;
}

/* What the bootstrap would have told of the peer at d. */
static void blob_of(const struct pm_daddr *d, struct udp_blob *blob)
{
	*blob = (struct udp_blob){ .nnics = d->nnics, .ring_bytes = d->ring_bytes,
				   .rcvbuf = d->rcvbuf };
	for (uint32_t i = 0; i < d->nnics; i++)
		blob->nic[i] = (struct udp_nic_addr){
			.addr = d->nic[i].addr, .port = d->nic[i].port, .mtu = d->nic[i].mtu,
			.prefix = 32,   /* not carried: ours decides (make_paths) */
		};
}

/* How long an insertion waits for the kernel to learn a peer's MAC. */
#define ETH_RESOLVE_NS 1000000000ull

/* The eth device, a detached peer: its address carries no MAC (no room in
 * core/detached.h), so each path's is asked of the kernel's neighbour
 * table (eth_link_resolve).  A path whose MAC cannot be learnt is left
 * out; -ENETUNREACH when none is left. */
static int resolve_paths(struct udp_dev *u, struct udp_peer *p)
{
	int kept = 0;

	for (int i = 0; i < p->npaths; i++) {
		struct udp_path *pa = &p->paths[i];
		char addr[INET_ADDRSTRLEN] = "?";

		if (eth_link_resolve(&u->links[pa->nic], pa->to.sin_addr.s_addr, pa->to.sin_port,
				     pa->mac, ETH_RESOLVE_NS)) {
			inet_ntop(AF_INET, &pa->to.sin_addr, addr, sizeof(addr));
			pm_log(-1, "eth: no MAC address for the peer's %s on %s", addr,
			       u->nics[pa->nic].name);
			continue;
		}
		p->paths[kept++] = *pa;
	}
	p->npaths = kept;
	return kept ? 0 : -ENETUNREACH;
}

static int udp_insert(struct pm_device *dev, const struct pm_daddr *d, int *peer)
{
	struct udp_dev *u = to_udp(dev);
	struct udp_blob blob;

	blob_of(d, &blob);

	/* Inserted before (itself included): the same number.  A context is
	 * its first socket and its id; one that claims both with another key
	 * is not the context we know. */
	int known = udp_source_peer(&u->pr, blob.nic[0].addr, blob.nic[0].port, d->id);

	if (known >= 0) {
		if (u->pr.peers[known].key != d->key)
			return -EADDRNOTAVAIL;
		*peer = known;
		return 0;
	}
	/* The number is the context's: under composite, the peers that
	 * another device serves leave holes here, as in a job. */
	int n = *peer;

	if (n < (int)u->pr.size || (uint32_t)n >= u->pr.cap)
		return -ENOSPC;

	struct udp_peer *p = &u->pr.peers[n];

	memset(p, 0, sizeof(*p));
	p->rank = n;
	p->key = d->key;
	p->id = d->id;
	p->max_inflight = (uint64_t)(blob.rcvbuf ? blob.rcvbuf : 65536) / 2 * blob.nnics;
	if (p->max_inflight > UDP_INFLIGHT_MAX)
		p->max_inflight = UDP_INFLIGHT_MAX;
	p->max_message = ring_max_message(u->pr.ring_bytes);
	if (ring_max_message(blob.ring_bytes) < p->max_message)
		p->max_message = ring_max_message(blob.ring_bytes);
	if (make_paths(u, p, &blob) || (u->eth && resolve_paths(u, p))) {
		memset(p, 0, sizeof(*p));
		return -ENETUNREACH;
	}
	/* A detached address does not say how many slots the peer's rings
	 * have: a ring's size follows from the MTU alone, which both ends of
	 * a network share, so ours tell. */
	blob.rx_slots = u->self.rx_slots;
	p->max_wnd = max_window(p, &blob);
	u->pr.now_ns = pm_now_ns();
	int err = udp_peer_open(&u->pr, p);

	if (err) {
		memset(p, 0, sizeof(*p));
		return err;
	}
	u->pr.size = (uint32_t)n + 1;
	return 0;
}

/*
 * Closing: give peers their last acknowledgements, then linger while they
 * keep sending.  A peer whose final ACK from us was lost resends until it
 * hears one (its pm_quiesce() waits for that); answering for a moment costs
 * us UDP_LINGER_QUIET_NS when all is quiet, at most UDP_LINGER_MAX_NS.
 */
#define UDP_LINGER_QUIET_NS 20000000ull
#define UDP_LINGER_MAX_NS 500000000ull

static int udp_block(struct udp_dev *u, uint64_t deadline, const int *extra, int nextra,
		     bool wakeable);

static uint64_t packets_in(const struct udp_dev *u)
{
	uint64_t n = 0;

	for (int i = 0; i < u->nnics; i++)
		n += u->nic_stats[i].rx_packets;
	return n;
}

static void linger(struct udp_dev *u)
{
	uint64_t start = pm_now_ns();
	uint64_t quiet_until = start + UDP_LINGER_QUIET_NS;
	uint64_t seen = packets_in(u);

	u->pr.now_ns = start;
	udp_proto_ack_now(&u->pr);
	udp_flush(u);
	while (u->nnics > 0 && u->fds[0] >= 0) {
		uint64_t now = pm_now_ns();

		if (now >= quiet_until || now - start >= UDP_LINGER_MAX_NS)
			break;
		udp_block(u, quiet_until, NULL, 0, false);
		progress(u);
		if (packets_in(u) != seen) {
			seen = packets_in(u);
			quiet_until = pm_now_ns() + UDP_LINGER_QUIET_NS;
		}
	}
}

static void udp_destroy(struct pm_device *dev)
{
	struct udp_dev *u = to_udp(dev);

	if (u->pr.peers && u->pr.served)
		linger(u);
	udp_proto_fini(&u->pr);
	for (int i = 0; i < u->nnics; i++)
		if (u->eth)
			eth_link_close(&u->links[i]);
		else if (u->fds[i] >= 0)
			close(u->fds[i]);
	if (u->wake_fd >= 0)
		close(u->wake_fd);
	free(u->rxbuf);
	free(u);
}

/* ---- messages ---- */

static const char *udp_device_of(const struct pm_device *dev, int peer)
{
	return udp_peer_of(&((struct udp_dev *)dev)->pr, peer) ? dev->ops->name : NULL;
}

static size_t udp_max_message(const struct pm_device *dev, int peer)
{
	struct udp_dev *u = (struct udp_dev *)dev;

	const struct udp_peer *p = udp_peer_of(&u->pr, peer);

	return p ? p->max_message : 0;
}

static int udp_send_buffer(struct pm_device *dev, int peer, size_t len, void **buf)
{
	struct udp_dev *u = to_udp(dev);
	struct udp_peer *p = udp_peer_of(&u->pr, peer);

	if (!p)
		return -EINVAL;
	if (len > p->max_message)
		return -EMSGSIZE;
	for (int attempt = 0; attempt < 2; attempt++) {
		int err = udp_tx_buffer(p, len, buf);

		if (err != -EAGAIN)
			return err;
		if (attempt == 0)
			progress(u);    /* acks may be waiting to free space */
	}
	p->want_space = true;
	return -EAGAIN;
}

static int udp_send(struct pm_device *dev, int peer, size_t len)
{
	struct udp_dev *u = to_udp(dev);
	struct udp_peer *p = udp_peer_of(&u->pr, peer);

	if (!p)
		return -EINVAL;
	u->pr.now_ns = pm_now_ns();
	int err = udp_tx_send(&u->pr, p, len);

	udp_flush(u);
	return err;
}

static int udp_recv(struct pm_device *dev, struct pm_msg *msg)
{
	struct udp_dev *u = to_udp(dev);

	if (udp_proto_recv(&u->pr, msg) == 0)
		return 0;
	progress(u);
	if (udp_proto_recv(&u->pr, msg) == 0)
		return 0;
	idle_yield(u);
	return -EAGAIN;
}

/* A message an earlier progress pass took in, without another pass: a
 * caller draining what came saves the empty recvfrom() that would end it. */
static int udp_recv_queued(struct pm_device *dev, struct pm_msg *msg)
{
	return udp_proto_recv(&to_udp(dev)->pr, msg);
}

static int udp_release(struct pm_device *dev, const struct pm_msg *msg)
{
	struct udp_dev *u = to_udp(dev);
	struct udp_peer *p = udp_peer_of(&u->pr, msg->peer);

	/* A receiver that refused (STOP) may send GO now. */
	if (p && p->stop_sent)
		u->pr.now_ns = pm_now_ns();
	int err = udp_proto_release(&u->pr, msg);

	udp_flush(u);
	return err;
}

/* ---- progress and waiting ---- */

static bool udp_poll(struct pm_device *dev)
{
	struct udp_dev *u = to_udp(dev);

	progress(u);
	bool ev = udp_proto_event(&u->pr);

	if (!ev)
		idle_yield(u);
	return ev;
}

#define UDP_EXTRA_FDS 4

/*
 * Sleep until a socket (or one of extra) is readable or deadline.  A
 * wakeable sleep is pm_wait()'s: it announces itself to udp_wake (the
 * fence pairs with pm_signal()'s), then looks for a signal that came
 * before, and sleeps on the eventfd too.  The others (closing, draining,
 * held by the agent) are not ended by pm_signal(): its flag waits for the
 * next pm_wait().
 */
static int udp_block(struct udp_dev *u, uint64_t deadline, const int *extra, int nextra,
		     bool wakeable)
{
	struct pollfd pfd[UDP_MAX_NICS + UDP_EXTRA_FDS + 1];
	int n = 0, wake = -1;

	/* Going to sleep: no reply will carry our acks soon, so send them
	 * now instead of letting senders wait out the delay. */
	u->pr.now_ns = pm_now_ns();
	udp_proto_ack_now(&u->pr);
	udp_flush(u);

	uint64_t now = pm_now_ns();
	uint64_t until = udp_proto_next_timer(&u->pr);

	if (deadline < until)
		until = deadline;

	uint64_t left = until <= now ? 0 : until - now;
	struct timespec ts = { .tv_sec = (time_t)(left / 1000000000u),
			       .tv_nsec = (long)(left % 1000000000u) };

	for (int i = 0; i < u->nnics; i++)
		pfd[n++] = (struct pollfd){ .fd = u->fds[i], .events = POLLIN };
	for (int i = 0; i < nextra && i < UDP_EXTRA_FDS; i++)
		pfd[n++] = (struct pollfd){ .fd = extra[i], .events = POLLIN };
	if (wakeable) {
		atomic_store_explicit(&u->sleeping, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		if (pm_signal_pending(u->base.ctx)) {
			atomic_store_explicit(&u->sleeping, 0, memory_order_relaxed);
			return 0;
		}
		wake = n;
		pfd[n++] = (struct pollfd){ .fd = u->wake_fd, .events = POLLIN };
	}

	int r = ppoll(pfd, (nfds_t)n, until == UINT64_MAX ? NULL : &ts, NULL);
	int err = r < 0 && errno != EINTR ? -errno : 0;

	if (wakeable) {
		uint64_t count;

		atomic_store_explicit(&u->sleeping, 0, memory_order_relaxed);
		/* Reset the eventfd only when it woke us: no system call on the
		 * usual wake-up by a packet.  A write that lands after this
		 * (a signaller that saw us still asleep) ends the next sleep
		 * early, once: a spurious wake-up, which pm_wait() allows. */
		if (r > 0 && (pfd[wake].revents & POLLIN)) {
			ssize_t got = read(u->wake_fd, &count, sizeof(count));

			(void)got;      /* readable, ours alone: it cannot fail */
		}
	}
	return err;
}

static int udp_block_op(struct pm_device *dev, uint64_t deadline, const int *extra, int nextra)
{
	return udp_block(to_udp(dev), deadline, extra, nextra, true);
}

static int udp_sleep(struct pm_device *dev, uint64_t deadline)
{
	return udp_block(to_udp(dev), deadline, NULL, 0, true);
}

/* pm_signal(): end the owner's wakeable sleep (udp_block), from any thread
 * or a signal handler; write() is async-signal-safe.  pm_signal() fenced
 * after setting its flag: a sleeper we do not see here sees the flag. */
static void udp_wake(struct pm_device *dev)
{
	struct udp_dev *u = to_udp(dev);
	uint64_t one = 1;

	if (!atomic_load_explicit(&u->sleeping, memory_order_relaxed))
		return;
	ssize_t put = write(u->wake_fd, &one, sizeof(one));

	(void)put;              /* fails only on a full count: readable anyway */
}

static int udp_peer_alive(struct pm_device *dev, int peer)
{
	struct udp_dev *u = to_udp(dev);

	/* A remote process's death is seen by the resource manager (scored,
	 * the launcher); here a peer is alive while it is reachable at all. */
	return udp_peer_of(&u->pr, peer) ? 1 : -EINVAL;
}

/* ---- remote memory ---- */

static int udp_expose(struct pm_device *dev, uint32_t idx, uint64_t key, void *addr, size_t len)
{
	udp_proto_expose(&to_udp(dev)->pr, idx, key, addr, len);
	return 0;
}

/* After a remote operation was asked for (err: what the protocol said):
 * send it now, or, when it could not be queued, progress, since
 * completions may be waiting to free a slot. */
static int requested(struct udp_dev *u, int err)
{
	if (err == -EAGAIN)
		progress(u);
	else
		udp_flush(u);
	return err;
}

static int udp_rma(struct pm_device *dev, int peer, bool write, void *local,
		   size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	struct udp_dev *u = to_udp(dev);
	struct udp_peer *p = udp_peer_of(&u->pr, peer);

	if (!p)
		return -EINVAL;
	u->pr.now_ns = pm_now_ns();
	return requested(u, udp_proto_rma(&u->pr, p, write, local, len, rkey, roffset, op));
}

static int udp_atomic(struct pm_device *dev, int peer, uint32_t aop, uint64_t operand,
		      uint64_t compare, void *result, uint64_t rkey, uint64_t roffset,
		      struct pm_op *op)
{
	struct udp_dev *u = to_udp(dev);
	struct udp_peer *p = udp_peer_of(&u->pr, peer);

	if (!p)
		return -EINVAL;
	u->pr.now_ns = pm_now_ns();
	return requested(u, udp_proto_atomic(&u->pr, p, aop, operand, compare, result, rkey,
					     roffset, op));
}

static int udp_test(struct pm_device *dev, struct pm_op *op)
{
	progress(to_udp(dev));
	return op->status != 1;
}

static int udp_drain_poll(struct pm_device *dev)
{
	struct udp_dev *u = to_udp(dev);

	progress(u);
	return udp_proto_idle(&u->pr);
}

static int udp_drain(struct pm_device *dev)
{
	struct udp_dev *u = to_udp(dev);
	uint64_t deadline = pm_now_ns() + UDP_DRAIN_TIMEOUT_NS;

	for (;;) {
		if (udp_drain_poll(dev))
			return 0;
		if (pm_now_ns() >= deadline) {
			pm_log(dev->ctx->rank, "udp: quiesce: packets still unacknowledged after %llu s",
			       (unsigned long long)(UDP_DRAIN_TIMEOUT_NS / 1000000000ull));
			return -ETIMEDOUT;
		}
		udp_block(u, pm_now_ns() + 1000000, NULL, 0, false);
	}
}

/* Held: take packets in and acknowledge them (udp_block sends pending acks
 * before it sleeps), but deliver nothing. */
static void udp_hold(struct pm_device *dev, uint64_t deadline)
{
	struct udp_dev *u = to_udp(dev);

	progress(u);
	udp_block(u, deadline, NULL, 0, false);
	progress(u);
}

/* After a hold of any length: protocol timers restart from now
 * (udp_proto_resumed says why). */
static void udp_resumed(struct pm_device *dev)
{
	struct udp_dev *u = to_udp(dev);

	u->pr.now_ns = pm_now_ns();
	udp_proto_resumed(&u->pr);
}

static struct pm_device *create(struct pm_context *ctx, unsigned flags, bool eth)
{
	struct udp_dev *u = calloc(1, sizeof(*u));

	if (!u)
		return NULL;
	u->base.ops = eth ? &pm_eth_ops : &pm_udp_ops;
	u->base.ctx = ctx;
	u->remote_only = flags & PM_DEVICE_REMOTE_ONLY;
	u->eth = eth;
	u->wake_fd = -1;
	for (int i = 0; i < UDP_MAX_NICS; i++)
		u->links[i] = (struct eth_link){ .fd = -1, .port_fd = -1 };
	return &u->base;
}

static struct pm_device *udp_create(struct pm_context *ctx, unsigned flags)
{
	return create(ctx, flags, false);
}

static struct pm_device *eth_create(struct pm_context *ctx, unsigned flags)
{
	return create(ctx, flags, true);
}

/* The two devices differ in their name and in how they are created. */
#define UDP_DEVICE_OPS(name_, create_) \
	.name = name_,                 \
	.create = create_, \
	.setup = udp_setup, \
	.connect = udp_connect, \
	.ready = udp_ready, \
	.destroy = udp_destroy, \
	.device_of = udp_device_of, \
	.max_message = udp_max_message, \
	.send_buffer = udp_send_buffer, \
	.send = udp_send, \
	.recv = udp_recv, \
	.recv_queued = udp_recv_queued, \
	.release = udp_release, \
	.sleep = udp_sleep, \
	.poll = udp_poll, \
	.block = udp_block_op, \
	.wake = udp_wake, \
	.peer_alive = udp_peer_alive, \
	.address = udp_address, \
	.insert = udp_insert, \
	.expose = udp_expose, \
	.rma = udp_rma, \
	.atomic = udp_atomic, \
	.test = udp_test, \
	.drain = udp_drain, \
	.drain_poll = udp_drain_poll, \
	.hold = udp_hold, \
	.resumed = udp_resumed,

const struct pm_device_ops pm_udp_ops = { UDP_DEVICE_OPS("udp", udp_create) };
const struct pm_device_ops pm_eth_ops = { UDP_DEVICE_OPS("eth", eth_create) };

