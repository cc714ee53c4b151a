/* SPDX-License-Identifier: MIT */
/* frame.c - the eth device's link header and socket filter (frame.h). */
#include "frame.h"

#include <errno.h>
#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

void eth_link_hdr_encode(const struct eth_link_hdr *h, uint8_t out[ETH_LINK_HDR_BYTES])
{
	put16(out, h->dst_port);
	put16(out + 2, h->src_port);
	memcpy(out + 4, &h->src_addr, 4);
	put16(out + 8, h->len);
	put16(out + 10, 0);
}

int eth_link_hdr_decode(const uint8_t *buf, size_t n, struct eth_link_hdr *h)
{
	if (n < ETH_LINK_HDR_BYTES)
		return -EBADMSG;
	h->dst_port = get16(buf);
	h->src_port = get16(buf + 2);
	memcpy(&h->src_addr, buf + 4, 4);
	h->len = get16(buf + 8);
	if (get16(buf + 10) != 0 || h->len > n - ETH_LINK_HDR_BYTES)
		return -EBADMSG;
	return 0;
}

void eth_filter(uint16_t port, struct sock_filter prog[ETH_FILTER_INSNS])
{
	/* On a SOCK_DGRAM packet socket the filter sees the frame from its
	 * network header on: offset 0 is dst_port. */
	const struct sock_filter p[ETH_FILTER_INSNS] = {
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, port, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, 0x40000),     /* the whole frame */
		BPF_STMT(BPF_RET | BPF_K, 0),           /* not ours: nothing */
	};

	memcpy(prog, p, sizeof(p));
}

void eth_grant_filter(uint16_t port, struct sock_filter prog[ETH_GRANT_FILTER_INSNS])
{
	/* The EtherType is not in the bytes a SOCK_DGRAM filter sees: the
	 * kernel's ancillary load gives it (host byte order).  A mismatch
	 * jumps to eth_filter's last instruction, which keeps nothing. */
	const struct sock_filter type[2] = {
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_PROTOCOL)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_PM_TYPE, 0, ETH_FILTER_INSNS - 1),
	};

	memcpy(prog, type, sizeof(type));
	eth_filter(port, prog + 2);
}

unsigned short eth_filter_for(uint16_t port, bool grant,
			      struct sock_filter prog[ETH_GRANT_FILTER_INSNS])
{
	if (!grant) {
		eth_filter(port, prog);
		return ETH_FILTER_INSNS;
	}
	eth_grant_filter(port, prog);
	return ETH_GRANT_FILTER_INSNS;
}
