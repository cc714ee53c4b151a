/* SPDX-License-Identifier: MIT */
/*
 * outq.c - the output queue of the udp protocol: the packets tx.c, rx.c and
 * proto.c make, waiting for their driver to send them.  The protocol only
 * appends; the device (device.c) sends each NIC's batch with one sendmmsg(),
 * grouped into GSO messages, and a unit test moves the packets into its
 * simulated network instead.
 */
#include "udp.h"

#include <string.h>

void udp_outq_init(struct udp_outq *q, udp_drain_fn *drain, void *arg)
{
	memset(q->n, 0, sizeof(q->n));
	q->pending = 0;
	q->drain = drain;
	q->drain_arg = arg;
}

static void drain_nic(struct udp_outq *q, int nic)
{
	q->drain(q->drain_arg, nic, q->out[nic], q->n[nic]);
	q->n[nic] = 0;
	q->pending &= ~(1u << nic);
}

void udp_outq_flush(struct udp_outq *q)
{
	while (q->pending)
		drain_nic(q, __builtin_ctz(q->pending));
}

void udp_out_packet(struct udp_proto *u, struct udp_peer *p, int path,
		    const struct wire_hdr *h, const struct wire_msg_hdr *m,
		    const void *payload, size_t len)
{
	struct udp_outq *q = &u->out;
	struct udp_path *pa = &p->paths[path];
	int nic = pa->nic;

	if (q->n[nic] == UDP_BATCH)
		drain_nic(q, nic);

	struct udp_out *o = &q->out[nic][q->n[nic]++];
	struct wire_hdr hh = *h;
	size_t hlen = WIRE_HDR_BYTES + (m ? WIRE_MSG_HDR_BYTES : 0);

	q->pending |= 1u << nic;
	hh.len = (uint16_t)(hlen - WIRE_HDR_BYTES + len);
	wire_encode(&hh, o->hdr);
	if (m)
		wire_encode_msg(m, o->hdr + WIRE_HDR_BYTES);
	o->iov[0] = (struct iovec){ o->hdr, hlen };
	o->iov[1] = (struct iovec){ (void *)payload, len };
	o->niov = len ? 2 : 1;
	o->to = &pa->to;
	o->peer = p->rank;
	o->path = (uint8_t)path;
	pa->sent++;
}
