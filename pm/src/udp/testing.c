/* SPDX-License-Identifier: MIT */
/* testing.c - a udp protocol endpoint with no device (testing.h). */
#include "testing.h"

#include <arpa/inet.h>

#define TESTING_MTU 1500

struct sockaddr_in udp_testing_addr(uint32_t rank)
{
	return (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_addr.s_addr = htonl(0x7f000001u + rank),
				     .sin_port = htons((uint16_t)(20000 + rank)) };
}

int udp_testing_open(struct udp_proto *u, const struct udp_proto_conf *conf)
{
	int err = udp_proto_init(u, conf);

	for (uint32_t r = 0; !err && r < u->size; r++) {
		struct udp_peer *p = &u->peers[r];

		p->rank = (int)r;
		/* Detached (conf->cap): every peer has the job's key and its
		 * rank as context id, so the same packets reach it, looked up
		 * by source socket and id instead of by rank. */
		p->key = conf->jobkey;
		p->id = r;
		p->npaths = 1;
		p->paths[0] = (struct udp_path){ .nic = 0, .to = udp_testing_addr(r), .up = true };
		/* IPv4 and UDP headers, then ours. */
		p->frag = TESTING_MTU - 20 - 8 - WIRE_HDR_BYTES;
		p->max_inflight = UDP_INFLIGHT_MAX;
		p->max_message = ring_max_message(u->ring_bytes);
		err = udp_peer_open(u, p);
	}
	if (err)
		udp_proto_fini(u);
	return err;
}
