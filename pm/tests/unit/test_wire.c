/* SPDX-License-Identifier: MIT */
/*
 * test_wire.c - the PM/Ethernet packet format: the test vectors of
 * docs/pm/wire.md (encoded bytes must match, and the document must carry the
 * same lines), decoding round trips, and every reason a packet is dropped.
 */
#include "check.h"
#include "pm.h"
#include "udp/wire.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JOBKEY 0x0123456789abcdefull

/* "name: 02712500 01000000 ..." as docs/pm/wire.md prints it. */
static void hex_line(char *out, size_t len, const char *name, const uint8_t *b, size_t n)
{
	size_t k = (size_t)snprintf(out, len, "%s: ", name);

	for (size_t i = 0; i < n && k + 3 < len; i++)
		k += (size_t)snprintf(out + k, len - k, "%02x%s", b[i], i % 4 == 3 && i + 1 < n ? " " : "");
}

static char *doc;

static void load_doc(const char *path)
{
	FILE *f = fopen(path, "r");

	CHECK_MSG(f != NULL, "cannot open %s", path);
	doc = calloc(1, 1 << 20);
	CHECK_MSG(doc != NULL, "out of memory");
	size_t n = fread(doc, 1, (1 << 20) - 1, f);

	CHECK_MSG(n > 0 && !ferror(f), "cannot read %s", path);
	fclose(f);
}

static void vector(const char *name, const struct wire_hdr *h, const struct wire_msg_hdr *m,
		   const char *expect)
{
	uint8_t b[WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES];
	char line[512];
	size_t n = WIRE_HDR_BYTES;

	wire_encode(h, b);
	if (m) {
		wire_encode_msg(m, b + WIRE_HDR_BYTES);
		n += WIRE_MSG_HDR_BYTES;
	}
	hex_line(line, sizeof(line), name, b, n);
	CHECK_MSG(strcmp(line, expect) == 0, "vector %s:\n  got  %s\n  want %s", name, line, expect);
	CHECK_MSG(strstr(doc, expect) != NULL, "docs/pm/wire.md lacks the line '%s'", expect);

	/* And it decodes back to the same fields. */
	struct wire_hdr d;
	uint8_t pkt[256] = { 0 };

	memcpy(pkt, b, n);
	CHECK_EQ(wire_decode(pkt, WIRE_HDR_BYTES + h->len, JOBKEY, 1u << 20, h->dst, &d), WIRE_OK);
	CHECK_MSG(d.version == h->version && d.type == h->type && d.flags == h->flags &&
		  d.len == h->len && d.jobkey == h->jobkey && d.src == h->src && d.dst == h->dst &&
		  d.seq == h->seq && d.ack == h->ack, "vector %s does not decode to its fields", name);
	if (m) {
		struct wire_msg_hdr dm;

		CHECK_EQ(wire_decode_msg(pkt + WIRE_HDR_BYTES, WIRE_MSG_HDR_BYTES, &dm), 0);
		CHECK_EQ(dm.total, m->total);
		CHECK_EQ(dm.kind, m->kind);
		CHECK_EQ(dm.key, m->key);
		CHECK_EQ(dm.offset, m->offset);
		CHECK_EQ(dm.cookie, m->cookie);
	}
}

static void vectors(void)
{
	struct wire_hdr data = { WIRE_VERSION, WIRE_DATA,
				 WIRE_F_FIRST | WIRE_F_LAST | WIRE_F_ACK, 32 + 5, JOBKEY, 1, 0, 7, 3 };
	struct wire_msg_hdr msg = { .total = 5, .kind = WIRE_KIND_MSG };

	vector("data", &data, &msg, "data: 02712500 01000000 07000000 03000000 efcdab89 67452301 "
	       "05000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000");

	struct wire_hdr ack = { WIRE_VERSION, WIRE_ACK, WIRE_F_ACK, 0, JOBKEY, 0, 1, 0, 41 };

	vector("ack", &ack, NULL, "ack: 02420000 00000000 00000000 29000000 fab1e1f6 de3c149f");

	struct wire_hdr stop = { WIRE_VERSION, WIRE_STOP, WIRE_F_ACK, 0, JOBKEY, 0, 1,
				 0x100, 0xff };

	vector("stop", &stop, NULL, "stop: 02430000 00000000 00010000 ff000000 fab1e1f6 de3c149f");

	struct wire_hdr lose = { WIRE_VERSION, WIRE_LOSE, WIRE_F_ACK, 0, JOBKEY, 0, 1,
				 0xfffffffe, 0xfffffffe };

	vector("lose", &lose, NULL, "lose: 02450000 00000000 feffffff feffffff fab1e1f6 de3c149f");

	struct wire_hdr write = { WIRE_VERSION, WIRE_DATA, WIRE_F_FIRST | WIRE_F_ACK,
				  32 + 1000, JOBKEY, 2, 3, 9, 0 };
	struct wire_msg_hdr wm = { .total = 4096, .kind = WIRE_KIND_WRITE, .key = 0x20005,
				   .offset = 128, .cookie = 0x10001 };

	vector("write", &write, &wm, "write: 02510804 02000000 09000000 00000000 d0b974f4 4b2885db "
	       "00100000 01000000 05000200 00000000 80000000 00000000 01000100 00000000");
}

/* Every reason to drop, one packet each. */
/* An atomic's request carries its body in the first packet: the vector
 * shows all of it; and the body decodes back (a reserved word set: -1). */
static void atomic_vectors(void)
{
	struct wire_hdr h = { WIRE_VERSION, WIRE_DATA,
			      WIRE_F_FIRST | WIRE_F_LAST | WIRE_F_ACK,
			      WIRE_MSG_HDR_BYTES + WIRE_ATOMIC_BYTES, JOBKEY, 1, 0, 12, 4 };
	struct wire_msg_hdr m = { .total = WIRE_ATOMIC_BYTES, .kind = WIRE_KIND_ATOMIC,
				  .key = 0x28005, .offset = 0x5d5000000040ull, .cookie = 0x30002 };
	struct wire_atomic a = { .op = PM_ATOMIC_CSWAP, .operand = 2, .compare = 0 }, d;
	uint8_t b[WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES + WIRE_ATOMIC_BYTES];
	char line[512];

	wire_encode(&h, b);
	wire_encode_msg(&m, b + WIRE_HDR_BYTES);
	wire_encode_atomic(&a, b + WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES);
	hex_line(line, sizeof(line), "atomic", b, sizeof(b));
	const char *expect = "atomic: 02713800 01000000 0c000000 04000000 efcdab89 67452301 "
			     "18000000 05000000 05800200 00000000 40000000 505d0000 02000300 "
			     "00000000 03000000 00000000 02000000 00000000 00000000 00000000";

	CHECK_MSG(strcmp(line, expect) == 0, "vector atomic:\n  got  %s\n  want %s", line,
		  expect);
	CHECK_MSG(strstr(doc, expect) != NULL, "docs/pm/wire.md lacks the line '%s'", expect);
	CHECK_EQ(wire_decode_atomic(b + WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES, &d), 0);
	CHECK_EQ(d.op, a.op);
	CHECK_EQ(d.operand, a.operand);
	CHECK_EQ(d.compare, a.compare);
	b[WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES + 5] = 1;        /* the reserved word */
	CHECK_EQ(wire_decode_atomic(b + WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES, &d), -1);

	/* Its answer: RMA_DONE, status 0, the old value 1 in key. */
	struct wire_hdr rh = { WIRE_VERSION, WIRE_DATA,
			       WIRE_F_FIRST | WIRE_F_LAST | WIRE_F_ACK, WIRE_MSG_HDR_BYTES, JOBKEY,
			       0, 1, 5, 12 };
	struct wire_msg_hdr rm = { .kind = WIRE_KIND_RMA_DONE, .key = 1, .cookie = 0x30002 };

	vector("atomic-done", &rh, &rm, "atomic-done: 02712000 00000000 05000000 0c000000 "
	       "fab1e1f6 de3c149f 00000000 04000000 01000000 00000000 00000000 00000000 "
	       "02000300 00000000");
}

static void verdicts(void)
{
	struct wire_hdr ok = { WIRE_VERSION, WIRE_DATA, WIRE_F_ACK, 4, JOBKEY, 1, 0, 1, 0 };
	uint8_t b[64];
	struct wire_hdr d, h;

#define VERDICT(mutate, n, want)                                                   \
	do {                                                                       \
		h = ok;                                                            \
		mutate;                                                            \
		wire_encode(&h, b);                                                \
		CHECK_EQ(wire_decode(b, (n), JOBKEY, 4, 0, &d), (want));           \
	} while (0)

	VERDICT((void)0, 28, WIRE_OK);
	VERDICT((void)0, 23, WIRE_SHORT);
	VERDICT((void)0, 27, WIRE_SHORT);
	VERDICT((void)0, 29, WIRE_BAD_LEN);
	VERDICT(h.version = 1, 28, WIRE_BAD_VERSION);
	VERDICT(h.type = 0, 28, WIRE_BAD_TYPE);
	VERDICT(h.type = 9, 28, WIRE_BAD_TYPE);
	VERDICT(h.flags = 0x8, 28, WIRE_BAD_FLAGS);
	VERDICT((h.type = WIRE_ACK, h.flags = WIRE_F_LAST, h.len = 0), 24, WIRE_BAD_FLAGS);
	VERDICT((h.type = WIRE_ACK, h.len = 4), 28, WIRE_BAD_LEN);
	VERDICT(h.len = 0, 24, WIRE_BAD_LEN);
	VERDICT((h.flags = WIRE_F_FIRST, h.len = 8), 32, WIRE_BAD_LEN);
	VERDICT(h.jobkey = JOBKEY + 1, 28, WIRE_FOREIGN_JOB);
	VERDICT(h.src = 4, 28, WIRE_UNKNOWN_PEER);
	/* Another rank's packet: its key is another's, even in the same job. */
	VERDICT(h.dst = 3, 28, WIRE_FOREIGN_JOB);
	/* What a version-1 packet of this job to rank 0 began with. */
	memcpy(b, (const uint8_t[]){ 0x50, 0x4d, 0x01, 0x01 }, 4);
	CHECK_EQ(wire_decode(b, 28, JOBKEY, 4, 0, &d), WIRE_BAD_VERSION);
	/* wire_key is one-to-one in dst for a job key, and never the key itself
	 * but for rank 0. */
	for (uint32_t r = 1; r < 1000; r++) {
		CHECK(wire_key(JOBKEY, r) != wire_key(JOBKEY, r - 1));
		CHECK(wire_key(JOBKEY, r) != JOBKEY);
	}
	for (int v = 0; v < WIRE_VERDICTS; v++)
		CHECK_MSG(strcmp(wire_verdict_name((enum wire_verdict)v), "unknown") != 0,
		      "verdict %d has no name", v);

	/* A message header with an unknown kind is refused. */
	struct wire_msg_hdr m = { .total = 1, .kind = WIRE_KIND_MAX + 1 };

	wire_encode_msg(&m, b);
	CHECK_EQ(wire_decode_msg(b, WIRE_MSG_HDR_BYTES, &m), -1);
	CHECK_EQ(wire_decode_msg(b, WIRE_MSG_HDR_BYTES - 1, &m), -1);
}

/* A GRO buffer read without its control message is cut where its first
 * packet ends, and only when that packet is this job's. */
static void gro_segments(void)
{
	struct wire_hdr h = { WIRE_VERSION, WIRE_DATA, WIRE_F_ACK, 100, JOBKEY, 1, 0, 1, 0 };
	uint8_t b[3 * 124] = { 0 };

	for (int i = 0; i < 3; i++) {
		h.seq = (uint32_t)i + 1;
		h.len = i < 2 ? 100 : 40;       /* the last segment may be shorter */
		wire_encode(&h, b + i * 124);
	}
	CHECK_EQ(wire_gro_segment(b, 2 * 124 + 64, JOBKEY, 0), 124);
	CHECK_EQ(wire_gro_segment(b, 124, JOBKEY, 0), 0);           /* one datagram */
	CHECK_EQ(wire_gro_segment(b, 23, JOBKEY, 0), 0);            /* shorter than a header */
	CHECK_EQ(wire_gro_segment(b, 2 * 124, JOBKEY + 1, 0), 0);   /* another job's: never cut */
	CHECK_EQ(wire_gro_segment(b, 2 * 124, JOBKEY, 1), 0);       /* another rank's: never cut */
	b[0] ^= 1;
	CHECK_EQ(wire_gro_segment(b, 2 * 124, JOBKEY, 0), 0);       /* garbage: never cut */
}

static void serial_arithmetic(void)
{
	CHECK_MSG(seq_diff(1, 0xffffffffu) == 2, "wrap: 1 follows 0xffffffff by 2");
	CHECK_MSG(seq_diff(0xffffffffu, 1) == -2, "wrap backwards");
	CHECK_MSG(seq_diff(5, 5) == 0, "equal");
	CHECK_MSG(seq_diff(0x80000000u + 10, 10) < 0, "half the space away is 'before'");
}

int main(int argc, char **argv)
{
	CHECK_MSG(argc == 2, "usage: test_wire docs/pm/wire.md");
	load_doc(argv[1]);
	vectors();
	atomic_vectors();
	verdicts();
	gro_segments();
	serial_arithmetic();
	free(doc);
	printf("wire: vectors, verdicts, GRO segments and serial arithmetic ok\n");
	return 0;
}
