/* SPDX-License-Identifier: MIT */
/*
 * link.h - one NIC of the eth device: a packet socket (AF_PACKET) that
 * sends PM's frames with a private EtherType and receives them through a
 * ring the kernel shares with us (PACKET_RX_RING), so that taking a frame
 * in is a load from memory, not a system call.  No IPv4 or UDP on either
 * side: what the udp device pays the kernel per packet for routing,
 * checksums and socket lookup is gone (the eth rows of docs/mpi/bench.md).
 *
 * Needs CAP_NET_RAW, or sockets a privileged launcher opened for the
 * process (eth_link_grant).  Frames: frame.h.
 */
#ifndef PM_ETH_LINK_H
#define PM_ETH_LINK_H

#include "udp/nic.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define ETH_LINK_BATCH 32               /* frames per sendmmsg */
#define ETH_RING_MIN_FRAMES 1024        /* slots: the ring grows for jumbo frames */

struct eth_link {
	int fd;                 /* the packet socket, -1 when closed */
	int port_fd;            /* the UDP socket that holds our port */
	int ifindex;
	char name[16];          /* the interface's (IF_NAMESIZE) */
	uint16_t port;          /* host byte order */
	uint32_t addr;          /* our IPv4 address on the NIC */
	uint8_t mac[6];
	uint8_t *ring;          /* the receive ring, mapped */
	size_t ring_bytes;
	uint32_t frame_bytes;   /* a power of two */
	uint32_t frames;        /* a power of two, at least ETH_RING_MIN_FRAMES */
	uint32_t next;          /* the frame the kernel fills next */
};

/* What one frame to send is: where to, and its PM packet in iov (at most
 * 2 entries, len bytes in all). */
struct eth_send {
	const uint8_t *mac;     /* the peer's on this network */
	uint16_t port;          /* the peer's, host byte order */
	const struct iovec *iov;
	int niov;
	size_t len;
};

/* Open nic: its packet socket, ring, filter and port.  0, or a negative
 * errno with the reason in err (-EPERM: no CAP_NET_RAW). */
int eth_link_open(struct eth_link *l, const struct udp_nic *nic, char *err, size_t errlen);

/* For a process a launcher is about to start (pm_eth_grant): nic's port
 * socket and packet socket, with eth_grant_filter's program locked on
 * it, both close-on-exec.  eth_link_open in that process takes them
 * (PM_ETH_GRANT) where it would open its own.  0, or a negative errno
 * with the reason in err. */
int eth_link_grant(const struct udp_nic *nic, int *fd, int *port_fd, char *err, size_t errlen);
void eth_link_close(struct eth_link *l);

/* Bytes of PM packets the ring holds when full (what the peer may have in
 * flight to us, as a UDP socket's buffer for the udp device). */
uint32_t eth_link_capacity(const struct eth_link *l, uint16_t mtu);

/* Send n frames (n <= ETH_LINK_BATCH); returns how many went (the first
 * that did not failed with the negative errno in *err). */
int eth_link_send(struct eth_link *l, const struct eth_send *s, int n, int *err);

/* One received PM packet: len bytes at pkt, from the IPv4 address and
 * port in its link header (network byte order, as sockaddr_in has them). */
typedef void eth_packet_fn(void *arg, const uint8_t *pkt, size_t len, uint32_t from_addr,
			   uint16_t from_port);

/*
 * The MAC address of the node at addr (IPv4, network byte order) on this
 * link's network, from the kernel's neighbour table; when it is not there
 * yet, an empty UDP datagram to addr:port (network byte order) from our
 * port socket makes the kernel ask (ARP), and the table is read again
 * until timeout_ns.  For a detached context's peers, whose addresses carry
 * no MAC.  0, or -EHOSTUNREACH.
 */
int eth_link_resolve(struct eth_link *l, uint32_t addr, uint16_t port, uint8_t mac[6],
		     uint64_t timeout_ns);

/* What a receive pass did not hand up. */
struct eth_rx_drops {
	uint64_t malformed;     /* frames taken and dropped: malformed, cut
				   short, or for another port */
	uint64_t overflow;      /* frames the kernel dropped for want of a
				   free slot (PACKET_STATISTICS) */
};

/* Hand up to max frames from the ring to fn; returns how many frames were
 * taken (the malformed ones included), and adds to *drops. */
int eth_link_receive(struct eth_link *l, int max, eth_packet_fn *fn, void *arg,
		     struct eth_rx_drops *drops);

#endif /* PM_ETH_LINK_H */
