/* SPDX-License-Identifier: MIT */
/* wire.c - encoding and validating PM/Ethernet packets (wire.h). */
#include "wire.h"

#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void wire_encode(const struct wire_hdr *h, uint8_t *buf)
{
	buf[0] = h->version;
	buf[1] = (uint8_t)(h->type | h->flags << WIRE_TYPE_BITS);
	put16(buf + 2, h->len);
	put32(buf + 4, h->src);
	put32(buf + 8, h->seq);
	put32(buf + 12, h->ack);
	put64(buf + 16, wire_key(h->jobkey, h->dst));
}

enum wire_verdict wire_decode(const uint8_t *buf, size_t n, uint64_t jobkey,
			      uint32_t size, uint32_t me, struct wire_hdr *h)
{
	if (n < WIRE_HDR_BYTES)
		return WIRE_SHORT;
	h->version = buf[0];
	h->type = buf[1] & ((1u << WIRE_TYPE_BITS) - 1);
	h->flags = buf[1] >> WIRE_TYPE_BITS;
	h->len = get16(buf + 2);
	h->src = get32(buf + 4);
	h->seq = get32(buf + 8);
	h->ack = get32(buf + 12);
	h->jobkey = jobkey;
	h->dst = me;

	if (h->version != WIRE_VERSION)
		return WIRE_BAD_VERSION;
	if (h->type == 0 || h->type > WIRE_TYPE_MAX)
		return WIRE_BAD_TYPE;
	if (h->flags & ~(uint16_t)WIRE_F_KNOWN)
		return WIRE_BAD_FLAGS;
	if (h->type != WIRE_DATA && (h->flags & (WIRE_F_FIRST | WIRE_F_LAST)))
		return WIRE_BAD_FLAGS;
	if (n - WIRE_HDR_BYTES != h->len)
		return n - WIRE_HDR_BYTES < h->len ? WIRE_SHORT : WIRE_BAD_LEN;
	if (h->type == WIRE_DATA ? h->len == 0 : h->len != 0)
		return WIRE_BAD_LEN;
	if ((h->flags & WIRE_F_FIRST) && h->len < WIRE_MSG_HDR_BYTES)
		return WIRE_BAD_LEN;
	if (get64(buf + 16) != wire_key(jobkey, me))
		return WIRE_FOREIGN_JOB;
	if (h->src >= size)
		return WIRE_UNKNOWN_PEER;
	return WIRE_OK;
}

void wire_encode_msg(const struct wire_msg_hdr *m, uint8_t *buf)
{
	put32(buf + 0, m->total);
	buf[4] = m->kind;
	memset(buf + 5, 0, 3);
	put64(buf + 8, m->key);
	put64(buf + 16, m->offset);
	put64(buf + 24, m->cookie);
}

int wire_decode_msg(const uint8_t *buf, size_t n, struct wire_msg_hdr *m)
{
	if (n < WIRE_MSG_HDR_BYTES)
		return -1;
	m->total = get32(buf + 0);
	m->kind = buf[4];
	memset(m->_pad, 0, sizeof(m->_pad));
	m->key = get64(buf + 8);
	m->offset = get64(buf + 16);
	m->cookie = get64(buf + 24);
	return m->kind > WIRE_KIND_MAX ? -1 : 0;
}

void wire_encode_atomic(const struct wire_atomic *a, uint8_t *buf)
{
	put32(buf + 0, a->op);
	put32(buf + 4, 0);
	put64(buf + 8, a->operand);
	put64(buf + 16, a->compare);
}

int wire_decode_atomic(const uint8_t *buf, struct wire_atomic *a)
{
	a->op = get32(buf + 0);
	a->operand = get64(buf + 8);
	a->compare = get64(buf + 16);
	return get32(buf + 4) ? -1 : 0;
}

size_t wire_gro_segment(const uint8_t *buf, size_t n, uint64_t jobkey, uint32_t me)
{
	if (n < WIRE_HDR_BYTES || buf[0] != WIRE_VERSION || get64(buf + 16) != wire_key(jobkey, me))
		return 0;

	size_t seg = WIRE_HDR_BYTES + get16(buf + 2);

	return seg < n ? seg : 0;
}

const char *wire_verdict_name(enum wire_verdict v)
{
	static const char *const names[WIRE_VERDICTS] = {
		[WIRE_OK] = "ok",
		[WIRE_SHORT] = "short",
		[WIRE_BAD_VERSION] = "bad_version",
		[WIRE_BAD_TYPE] = "bad_type",
		[WIRE_BAD_FLAGS] = "bad_flags",
		[WIRE_BAD_LEN] = "bad_len",
		[WIRE_FOREIGN_JOB] = "foreign_job",
		[WIRE_UNKNOWN_PEER] = "unknown_peer",
	};
	return (unsigned)v < WIRE_VERDICTS ? names[v] : "unknown";
}
