/* SPDX-License-Identifier: MIT */
/*
 * wire.h - the PM/Ethernet (udp device) packet format.
 *
 * Every UDP datagram is one packet: a 24-byte header, then payload.  All
 * fields are little-endian.  Byte layout, semantics and test vectors:
 * docs/pm/wire.md.  Decoding validates everything a packet claims; the
 * receive path trusts nothing else.
 */
#ifndef PM_UDP_WIRE_H
#define PM_UDP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_VERSION    2u
#define WIRE_HDR_BYTES  24u
#define WIRE_MSG_HDR_BYTES 32u          /* in the first fragment of a message */
#define WIRE_TYPE_BITS  4u              /* byte 1: the type below, the flags above */

enum wire_type {
	WIRE_DATA = 1,          /* a fragment of a message; seq numbered */
	WIRE_ACK = 2,           /* cumulative ack only */
	WIRE_STOP = 3,          /* seq = k: k refused, no room; k-1 acked */
	WIRE_GO = 4,            /* seq = k: room again, send from k */
	WIRE_LOSE = 5,          /* seq = k: k+1 missing; k acked; resend from k+1 */
	WIRE_PROBE = 6,         /* path liveness probe; seq = probe id */
	WIRE_PROBE_ACK = 7,     /* answer on the same path */
	WIRE_POLL = 8,          /* seq = k, the sender's oldest unacknowledged
				   packet: "say where you are" (ACK, LOSE, STOP or GO) */
	WIRE_TYPE_MAX = 8,
};

enum wire_flags {
	WIRE_F_FIRST = 1u << 0, /* DATA: first fragment, carries a message header */
	WIRE_F_LAST = 1u << 1,  /* DATA: last fragment of its message */
	WIRE_F_ACK = 1u << 2,   /* the ack field is valid (piggy-backed ack) */
	WIRE_F_KNOWN = WIRE_F_FIRST | WIRE_F_LAST | WIRE_F_ACK,
};

/* What a message carries (first fragment's message header). */
enum wire_kind {
	WIRE_KIND_MSG = 0,      /* a user message */
	WIRE_KIND_WRITE = 1,    /* remote write: payload goes to (rkey, offset) */
	WIRE_KIND_READ_REQ = 2, /* remote read request: len bytes at (rkey, offset) */
	WIRE_KIND_READ_RESP = 3,/* the data of a read: goes to the reader's op */
	WIRE_KIND_RMA_DONE = 4, /* end of a remote op: status in offset; of an
				   atomic: the word's old value in key */
	WIRE_KIND_ATOMIC = 5,   /* an atomic on the word at (rkey, offset) */
	WIRE_KIND_MAX = 5,
};

/*
 * A packet header as the code sees it.  On the wire, jobkey and dst travel
 * as one 64-bit field, wire_key(jobkey, dst): the receiver checks both with
 * one comparison, and the 8 bytes a separate dst took are payload again
 * (a 1500-byte MTU carries 1448 bytes a packet, as a TCP segment does).
 */
struct wire_hdr {
	uint8_t version;
	uint8_t type;
	uint16_t flags;
	uint16_t len;           /* payload bytes after the header */
	uint64_t jobkey;        /* the receiver's job key (a detached context's own key) */
	uint32_t src;           /* sender's rank */
	uint32_t dst;           /* receiver's rank */
	uint32_t seq;
	uint32_t ack;           /* highest in-order seq received from dst */
};

/*
 * The key field of a packet to dst: the job key with dst folded in by a
 * bijection (an odd multiplier), so that for one job key every receiver's
 * field differs, and one that does not know the job key cannot make any.
 */
static inline uint64_t wire_key(uint64_t jobkey, uint32_t dst)
{
	return jobkey ^ ((uint64_t)dst * 0x9e3779b97f4a7c15ull);
}

/* First fragment of a message: what follows the packet header. */
struct wire_msg_hdr {
	uint32_t total;         /* bytes of the message body after this header */
	uint8_t kind;           /* enum wire_kind */
	uint8_t _pad[3];
	uint64_t key;           /* WRITE/READ_REQ: rkey */
	uint64_t offset;        /* WRITE/READ_REQ: offset; RMA_DONE: status */
	uint64_t cookie;        /* WRITE/READ_REQ/READ_RESP/RMA_DONE: the op */
};

/* The body of an ATOMIC message. */
#define WIRE_ATOMIC_BYTES 24u
struct wire_atomic {
	uint32_t op;            /* enum pm_atomic_op */
	uint64_t operand;
	uint64_t compare;       /* CSWAP */
};

/* Why a packet was dropped. */
enum wire_verdict {
	WIRE_OK = 0,
	WIRE_SHORT,             /* shorter than its header or its len */
	WIRE_BAD_VERSION,
	WIRE_BAD_TYPE,
	WIRE_BAD_FLAGS,
	WIRE_BAD_LEN,           /* len disagrees with the datagram or the type */
	WIRE_FOREIGN_JOB,       /* the key is not wire_key(this job's, me) */
	WIRE_UNKNOWN_PEER,
	WIRE_VERDICTS,
};

/* Write h into buf (WIRE_HDR_BYTES bytes). */
void wire_encode(const struct wire_hdr *h, uint8_t *buf);

/*
 * Parse and validate a datagram of n bytes: version, type, flags, length
 * (against n, and DATA carries payload, control none), the key (this job's
 * and to me: h->jobkey and h->dst are then jobkey and me), source rank <
 * size.
 */
enum wire_verdict wire_decode(const uint8_t *buf, size_t n, uint64_t jobkey,
			      uint32_t size, uint32_t me, struct wire_hdr *h);

void wire_encode_msg(const struct wire_msg_hdr *m, uint8_t *buf);
/* -1 when the message header is malformed (unknown kind). */
int wire_decode_msg(const uint8_t *buf, size_t n, struct wire_msg_hdr *m);

/* An ATOMIC body (WIRE_ATOMIC_BYTES); decode: -1 when the reserved word is
 * not zero (the op itself is the receiver's to judge). */
void wire_encode_atomic(const struct wire_atomic *a, uint8_t *buf);
int wire_decode_atomic(const uint8_t *buf, struct wire_atomic *a);

const char *wire_verdict_name(enum wire_verdict v);

/*
 * The segment size of a GRO buffer of n bytes read without its control
 * message: the length of its first packet when that packet is one of this
 * job's to me (version and key) and shorter than the buffer, else 0
 * (one datagram).  GRO joins datagrams of one size only (the last may be
 * shorter), so the first packet's length is every segment's.  A foreign or
 * malformed datagram is never cut, and so is dropped and counted once.
 */
size_t wire_gro_segment(const uint8_t *buf, size_t n, uint64_t jobkey, uint32_t me);

/* Serial-number arithmetic on 32-bit sequence numbers (RFC 1982). */
static inline int32_t seq_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

#endif /* PM_UDP_WIRE_H */
