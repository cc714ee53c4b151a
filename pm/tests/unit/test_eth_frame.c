/* SPDX-License-Identifier: MIT */
/*
 * test_eth_frame.c - the eth device's link header and socket filter
 * (pm/src/eth/frame.h): the test vector of docs/pm/wire.md ("Raw Ethernet
 * frames": the bytes must match and the document must carry the same
 * line), round trips, every reason a frame is refused, and the filter run
 * by the kernel itself.
 *
 * The filter is attached to one end of an AF_UNIX datagram socketpair: the
 * kernel runs a socket's classic BPF program on every datagram sent to it
 * (and silently discards those it refuses), with offset 0 at the first
 * byte of the datagram, as a SOCK_DGRAM packet socket has it at the first
 * byte after the Ethernet header.  So the very program the device attaches
 * is checked by the kernel's verifier and interpreter, without root.
 */
#include "check.h"
#include "eth/frame.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A link header for a 64-byte PM packet from port 0x5678 on 10.250.0.1 to
 * port 0x1234, as docs/pm/wire.md prints it. */
static const char VECTOR_LINE[] = "eth link: 12345678 0afa0001 00400000";
static const uint8_t VECTOR[ETH_LINK_HDR_BYTES] = {
	0x12, 0x34, 0x56, 0x78, 0x0a, 0xfa, 0x00, 0x01, 0x00, 0x40, 0x00, 0x00,
};
#define VECTOR_LEN 64

static struct eth_link_hdr vector_hdr(void)
{
	struct eth_link_hdr h;

	memset(&h, 0, sizeof(h));
	h.dst_port = 0x1234;
	h.src_port = 0x5678;
	h.src_addr = inet_addr("10.250.0.1");
	h.len = VECTOR_LEN;
	return h;
}

/* "name: 12345678 ..." as docs/pm/wire.md prints bytes. */
static void hex_line(char *out, size_t len, const char *name, const uint8_t *b, size_t n)
{
	size_t k = (size_t)snprintf(out, len, "%s: ", name);

	for (size_t i = 0; i < n && k + 3 < len; i++)
		k += (size_t)snprintf(out + k, len - k, "%02x%s", b[i], i % 4 == 3 && i + 1 < n ? " " : "");
}

static char *load_doc(const char *path)
{
	FILE *f = fopen(path, "r");

	CHECK_MSG(f != NULL, "cannot open %s", path);
	char *doc = calloc(1, 1 << 20);

	CHECK_MSG(doc != NULL, "out of memory");
	size_t n = fread(doc, 1, (1 << 20) - 1, f);

	CHECK_MSG(n > 0 && !ferror(f), "cannot read %s", path);
	fclose(f);
	return doc;
}

static void same_hdr(const struct eth_link_hdr *a, const struct eth_link_hdr *b)
{
	CHECK_EQ(a->dst_port, b->dst_port);
	CHECK_EQ(a->src_port, b->src_port);
	CHECK_EQ(a->src_addr, b->src_addr);
	CHECK_EQ(a->len, b->len);
}

static void vector(const char *doc)
{
	struct eth_link_hdr h = vector_hdr(), d;
	uint8_t frame[ETH_LINK_HDR_BYTES + VECTOR_LEN];
	char line[128];

	CHECK_EQ(ETH_LINK_HDR_BYTES, 12);
	CHECK_EQ(ETH_PM_TYPE, 0x88b5);
	memset(frame, 0xee, sizeof(frame));
	eth_link_hdr_encode(&h, frame);
	CHECK_MSG(memcmp(frame, VECTOR, sizeof(VECTOR)) == 0, "the link header's bytes differ "
		  "from the vector (ports and len big-endian, address as in sockaddr_in, reserved 0)");
	CHECK_MSG(frame[ETH_LINK_HDR_BYTES] == 0xee, "encode wrote past the header");
	hex_line(line, sizeof(line), "eth link", frame, ETH_LINK_HDR_BYTES);
	CHECK_MSG(strcmp(line, VECTOR_LINE) == 0, "vector:\n  got  %s\n  want %s", line, VECTOR_LINE);
	CHECK_MSG(strstr(doc, VECTOR_LINE) != NULL, "docs/pm/wire.md lacks the line '%s'", VECTOR_LINE);

	/* Exactly the packet the header announces. */
	memset(&d, 0x5a, sizeof(d));
	CHECK_OK(eth_link_hdr_decode(frame, sizeof(frame), &d));
	same_hdr(&d, &h);
	/* A short frame padded by the NIC to 60 bytes: len says what is PM's. */
	uint8_t padded[60] = { 0 };

	h.len = 5;
	eth_link_hdr_encode(&h, padded);
	CHECK_OK(eth_link_hdr_decode(padded, sizeof(padded), &d));
	same_hdr(&d, &h);
}

static void round_trips(void)
{
	static const uint16_t ports[] = { 0, 1, 0x00ff, 0x0100, 0x7fff, 0x8000, 0xfffe, 0xffff };
	static const uint16_t lens[] = { 0, 1, 32, 1488, 8988, 0xffff - ETH_LINK_HDR_BYTES };
	static uint8_t frame[ETH_LINK_HDR_BYTES + 0xffff];

	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++)
		for (size_t j = 0; j < sizeof(lens) / sizeof(lens[0]); j++) {
			struct eth_link_hdr h, d;

			memset(&h, 0, sizeof(h));
			h.dst_port = ports[i];
			h.src_port = (uint16_t)~ports[i];
			h.src_addr = htonl(0xc0a80000u | (uint32_t)i << 8 | (uint32_t)j);
			h.len = lens[j];
			eth_link_hdr_encode(&h, frame);
			CHECK_EQ(frame[0] << 8 | frame[1], h.dst_port);
			CHECK_EQ(frame[2] << 8 | frame[3], h.src_port);
			CHECK_EQ(frame[8] << 8 | frame[9], h.len);
			CHECK_EQ(frame[10] | frame[11], 0);
			CHECK_OK(eth_link_hdr_decode(frame, ETH_LINK_HDR_BYTES + h.len, &d));
			same_hdr(&d, &h);
		}
}

static void rejections(void)
{
	uint8_t frame[ETH_LINK_HDR_BYTES + 64];
	struct eth_link_hdr h = vector_hdr(), d;

	/* Shorter than the header, whatever its bytes say. */
	h.len = 0;
	eth_link_hdr_encode(&h, frame);
	for (size_t n = 0; n < ETH_LINK_HDR_BYTES; n++)
		CHECK_MSG(eth_link_hdr_decode(frame, n, &d) == -EBADMSG,
			  "a %zu-byte frame was accepted", n);
	CHECK_OK(eth_link_hdr_decode(frame, ETH_LINK_HDR_BYTES, &d));
	CHECK_EQ(d.len, 0);

	/* len larger than what the frame holds: by one, by much, the most. */
	for (size_t body = 0; body <= 64; body += 16) {
		static const uint32_t over[] = { 1, 2, 1000, 0x10000 };

		for (size_t k = 0; k < sizeof(over) / sizeof(over[0]); k++) {
			uint32_t len = (uint32_t)body + over[k];

			h.len = (uint16_t)(len > 0xffff ? 0xffff : len);
			eth_link_hdr_encode(&h, frame);
			CHECK_MSG(eth_link_hdr_decode(frame, ETH_LINK_HDR_BYTES + body, &d) == -EBADMSG,
				  "len %u in a frame with %zu bytes after the header was accepted",
				  h.len, body);
		}
		h.len = (uint16_t)body;
		eth_link_hdr_encode(&h, frame);
		CHECK_OK(eth_link_hdr_decode(frame, ETH_LINK_HDR_BYTES + body, &d));
		CHECK_EQ(d.len, body);
	}

	/* Any bit of the reserved field. */
	h.len = 8;
	for (int bit = 0; bit < 16; bit++) {
		eth_link_hdr_encode(&h, frame);
		frame[10 + (bit < 8)] = (uint8_t)(1u << (bit % 8));
		CHECK_MSG(eth_link_hdr_decode(frame, ETH_LINK_HDR_BYTES + 8, &d) == -EBADMSG,
			  "reserved 0x%02x%02x was accepted", frame[10], frame[11]);
	}
	frame[10] = frame[11] = 0xff;
	CHECK_ERR(eth_link_hdr_decode(frame, sizeof(frame), &d), -EBADMSG);
}

/* ---- the socket filter ---- */

static void program_fields(void)
{
	struct sock_filter p[ETH_FILTER_INSNS];

	eth_filter(0xbeef, p);
	/* Load the half-word at offset 0 (dst_port, big-endian as BPF loads). */
	CHECK_EQ(p[0].code, BPF_LD | BPF_H | BPF_ABS);
	CHECK_EQ(p[0].k, 0);
	CHECK_EQ(p[1].code, BPF_JMP | BPF_JEQ | BPF_K);
	CHECK_EQ(p[1].k, 0xbeef);
	/* The last instruction is reached on a mismatch and keeps nothing. */
	CHECK_EQ(p[ETH_FILTER_INSNS - 1].code, BPF_RET | BPF_K);
	CHECK_EQ(p[ETH_FILTER_INSNS - 1].k, 0);
}

/* The grant's program: eth_filter's behind a check of the EtherType,
 * whose mismatch lands on eth_filter's last instruction (keep nothing). */
static void grant_program_fields(void)
{
	struct sock_filter g[ETH_GRANT_FILTER_INSNS], p[ETH_FILTER_INSNS];

	eth_grant_filter(0xbeef, g);
	eth_filter(0xbeef, p);
	CHECK_EQ(g[0].code, BPF_LD | BPF_H | BPF_ABS);
	CHECK_EQ(g[0].k, (uint32_t)(SKF_AD_OFF + SKF_AD_PROTOCOL));
	CHECK_EQ(g[1].code, BPF_JMP | BPF_JEQ | BPF_K);
	CHECK_EQ(g[1].k, ETH_PM_TYPE);
	CHECK_EQ(g[1].jt, 0);
	CHECK_EQ(1 + 1 + g[1].jf, ETH_GRANT_FILTER_INSNS - 1);
	CHECK(memcmp(g + 2, p, sizeof(p)) == 0);
}

struct pair {
	int tx, rx;
};

static struct pair filtered_pair_with(uint16_t port, bool grant)
{
	struct sock_filter prog[ETH_GRANT_FILTER_INSNS];
	struct sock_fprog fprog = { .len = eth_filter_for(port, grant, prog), .filter = prog };
	int sv[2];

	CHECK_MSG(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s",
		  strerror(errno));
	CHECK_MSG(setsockopt(sv[1], SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof(fprog)) == 0,
		  "the kernel refused eth_filter(%u): %s", port, strerror(errno));
	/* Room for every datagram the test sends before it reads. */
	int big = 1 << 20;

	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	return (struct pair){ sv[0], sv[1] };
}

static struct pair filtered_pair(uint16_t port)
{
	return filtered_pair_with(port, false);
}

/* Send a frame of n bytes; did it arrive, whole and unchanged? */
static bool passes(struct pair p, const uint8_t *frame, size_t n)
{
	static uint8_t got[ETH_LINK_HDR_BYTES + 9100];

	/* The kernel tosses a refused datagram without telling the sender. */
	CHECK_MSG(send(p.tx, frame, n, 0) == (ssize_t)n, "send: %s", strerror(errno));
	ssize_t r = recv(p.rx, got, sizeof(got), MSG_DONTWAIT | MSG_TRUNC);

	if (r < 0) {
		CHECK_MSG(errno == EAGAIN || errno == EWOULDBLOCK, "recv: %s", strerror(errno));
		return false;
	}
	CHECK_MSG((size_t)r == n, "the filter cut a %zu-byte frame to %zd bytes", n, r);
	CHECK_MSG(memcmp(got, frame, n) == 0, "a frame changed on its way through the filter");
	return true;
}

static void frame_to(uint8_t *frame, uint16_t dst, size_t body)
{
	struct eth_link_hdr h;

	memset(&h, 0, sizeof(h));
	h.dst_port = dst;
	h.src_port = 4242;
	h.src_addr = inet_addr("10.250.0.1");
	h.len = (uint16_t)body;
	eth_link_hdr_encode(&h, frame);
	for (size_t i = 0; i < body; i++)
		frame[ETH_LINK_HDR_BYTES + i] = (uint8_t)(i * 7 + 1);
}

static void kernel_runs_filter(void)
{
	static const uint16_t ports[] = { 1, 0x00ff, 0x0100, 0x1234, 0x8000, 33000, 0xffff };
	static uint8_t frame[ETH_LINK_HDR_BYTES + 9000];

	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		uint16_t port = ports[i];
		struct pair p = filtered_pair(port);

		/* Ours, small to jumbo. */
		static const size_t bodies[] = { 0, 1, 32, 1488, 9000 };

		for (size_t b = 0; b < sizeof(bodies) / sizeof(bodies[0]); b++) {
			frame_to(frame, port, bodies[b]);
			CHECK_MSG(passes(p, frame, ETH_LINK_HDR_BYTES + bodies[b]),
				  "a %zu-byte frame for port %u was filtered out",
				  ETH_LINK_HDR_BYTES + bodies[b], port);
		}
		/* Ours as far as the filter can tell (it looks at dst_port only):
		 * a malformed header is the device's to drop and count. */
		frame_to(frame, port, 8);
		CHECK(passes(p, frame, 2));
		frame[10] = 1;
		CHECK(passes(p, frame, ETH_LINK_HDR_BYTES + 8));

		/* Another port: either byte off, swapped, every single bit. */
		uint16_t others[3 + 16];
		size_t no = 0;

		others[no++] = (uint16_t)(port ^ 0xff00);
		others[no++] = (uint16_t)(port ^ 0x00ff);
		others[no++] = (uint16_t)(port << 8 | port >> 8);
		for (int bit = 0; bit < 16; bit++)
			others[no++] = (uint16_t)(port ^ (1u << bit));
		for (size_t k = 0; k < no; k++) {
			if (others[k] == port)
				continue;
			frame_to(frame, others[k], 32);
			CHECK_MSG(!passes(p, frame, ETH_LINK_HDR_BYTES + 32),
				  "a frame for port %u passed the filter of port %u", others[k], port);
		}
		/* Too short to hold a port: nothing to load, nothing kept. */
		frame_to(frame, port, 0);
		CHECK_MSG(!passes(p, frame, 1), "a 1-byte frame passed the filter");

		/* And ours still pass after all that. */
		frame_to(frame, port, 100);
		CHECK(passes(p, frame, ETH_LINK_HDR_BYTES + 100));
		close(p.tx);
		close(p.rx);
	}
}

/* The kernel runs the grant's program too, and keeps a frame for the
 * right port out when its EtherType is not PM's: on a unix socket, whose
 * datagrams have none (0), the frame eth_filter passes is refused. */
static void kernel_runs_grant_filter(void)
{
	static uint8_t frame[ETH_LINK_HDR_BYTES + 64];
	struct pair plain = filtered_pair_with(0x1234, false);
	struct pair grant = filtered_pair_with(0x1234, true);

	frame_to(frame, 0x1234, 64);
	CHECK(passes(plain, frame, sizeof(frame)));
	CHECK_MSG(!passes(grant, frame, sizeof(frame)),
		  "the grant's filter kept a frame whose EtherType is not PM's");
	close(plain.tx);
	close(plain.rx);
	close(grant.tx);
	close(grant.rx);
}

int main(int argc, char **argv)
{
	CHECK_MSG(argc == 2, "usage: test_eth_frame docs/pm/wire.md");
	char *doc = load_doc(argv[1]);

	vector(doc);
	free(doc);
	round_trips();
	rejections();
	program_fields();
	kernel_runs_filter();
	grant_program_fields();
	kernel_runs_grant_filter();
	printf("eth_frame: link header vector, round trips, rejections and the socket filters "
	       "ok\n");
	return 0;
}
