/* SPDX-License-Identifier: MIT */
/*
 * frame.h - the eth device's link header: what a raw Ethernet frame of PM
 * carries between the Ethernet header and PM's packet (udp/wire.h).
 *
 * A frame is: Ethernet header (dst MAC, src MAC, EtherType 0x88B5, the
 * IEEE 802 "local experimental" type), this 12-byte header, then one PM
 * packet exactly as the udp device puts it in a datagram.  The header does
 * what IPv4 and UDP do for the udp device, in 12 bytes instead of 28:
 *
 *   offset  size  field
 *        0     2  dst_port   the receiving context's port (big-endian)
 *        2     2  src_port   the sending context's port (big-endian)
 *        4     4  src_addr   the sender's IPv4 address on this network
 *                            (network byte order): with src_port, the
 *                            "address" the protocol core checks a packet
 *                            against, as a UDP datagram's source
 *        8     2  len        bytes of the PM packet that follows (big-
 *                            endian): a NIC pads short frames to 60 bytes
 *       10     2  reserved   0
 *
 * Ports are the numbers of UDP ports each context keeps bound on its NICs,
 * so two contexts on one node never share one; the kernel hands a context
 * only the frames for its port (a socket filter on dst_port).  Byte layout
 * and test vectors: docs/pm/wire.md, "Raw Ethernet frames".
 */
#ifndef PM_ETH_FRAME_H
#define PM_ETH_FRAME_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETH_PM_TYPE       0x88b5u       /* EtherType: local experimental 1 */
#define ETH_LINK_HDR_BYTES 12u
#define ETH_FILTER_INSNS  4             /* eth_filter's program */
#define ETH_GRANT_FILTER_INSNS (ETH_FILTER_INSNS + 2) /* eth_grant_filter's */

struct eth_link_hdr {
	uint16_t dst_port;      /* host byte order, here and below */
	uint16_t src_port;
	uint32_t src_addr;      /* network byte order, as in sockaddr_in */
	uint16_t len;
};

void eth_link_hdr_encode(const struct eth_link_hdr *h, uint8_t out[ETH_LINK_HDR_BYTES]);

/* The header of a frame of n bytes (after the Ethernet header).  0, or
 * -EBADMSG when it is shorter than its header, claims more than it holds
 * or has the reserved bytes set. */
int eth_link_hdr_decode(const uint8_t *buf, size_t n, struct eth_link_hdr *h);

/* A classic BPF socket filter that accepts only frames for port: the
 * kernel then copies nothing for the node's other contexts into ours. */
void eth_filter(uint16_t port, struct sock_filter prog[ETH_FILTER_INSNS]);

/* eth_filter's program behind a check of the frame's EtherType, for a
 * socket opened by a privileged launcher for an unprivileged process and
 * locked (pm_eth_grant, grant.c): that process may bind the socket again
 * to any EtherType, and must still see nothing but PM's frames for its
 * own port. */
void eth_grant_filter(uint16_t port, struct sock_filter prog[ETH_GRANT_FILTER_INSNS]);

/* eth_grant_filter's program when grant, else eth_filter's; returns its
 * number of instructions (sock_fprog's len). */
unsigned short eth_filter_for(uint16_t port, bool grant,
			      struct sock_filter prog[ETH_GRANT_FILTER_INSNS]);

#endif /* PM_ETH_FRAME_H */
