/* SPDX-License-Identifier: MIT */
/*
 * fuzz_udp_rx.c - libFuzzer target over the udp protocol's receive path.
 *
 * The input is a sequence of records, each one datagram as it would arrive
 * from some rank:
 *
 *   u8 from | u8 action | u16 len (little-endian) | len bytes
 *
 * `from` (mod 4) picks the source address, bit 0 of `action` makes the
 * process take and release every delivered message afterwards (so flow
 * control, STOP and GO, are reached too).  The protocol core runs without
 * a device (src/udp/testing.h): what it sends back is discarded, and its
 * clock moves 1 ms per record, so that timers (POLL, delayed ACKs) fire
 * the same way on every run.  One exposed region (key 0x20005, 4 KiB)
 * makes remote writes and reads reachable.  Each input goes through two
 * endpoints in turn: one of a launcher's job and a detached one (peers
 * found by source socket and context id).  Any crash, sanitizer report or
 * leak is a bug; see docs/pm/fuzzing.md.
 */
#include "udp/testing.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JOBKEY 0x0123456789abcdefull
#define RANKS 4
#define REGION_KEY ((2ull << 16) | 5)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t region[4096];

static void discard(void *arg, int nic, struct udp_out *pkts, int n)
{
	(void)arg;
	(void)nic;
	(void)pkts;
	(void)n;
}

static void run(const uint8_t *data, size_t size, bool detached)
{
	static struct udp_proto pr;     /* large: not on the stack */
	struct pm_stats stats = { 0 };
	struct udp_proto_conf conf = {
		.jobkey = JOBKEY, .me = 0, .size = RANKS,
		.cap = detached ? 2 * RANKS : 0,
		.ring_bytes = 16 * 1024,        /* small: flow control is reachable */
		.wnd = 64, .stats = &stats, .drain = discard,
	};

	if (udp_testing_open(&pr, &conf))
		abort();
	udp_proto_expose(&pr, 5, REGION_KEY, region, sizeof(region));
	pr.now_ns = 1000000000ull;

	while (size >= 4) {
		uint32_t from = data[0] % RANKS;
		uint8_t action = data[1];
		size_t len = (size_t)data[2] | (size_t)data[3] << 8;
		struct sockaddr_in src = udp_testing_addr(from);

		data += 4;
		size -= 4;
		if (len > size)
			len = size;
		pr.now_ns += 1000000;
		udp_proto_input(&pr, 0, data, len, &src);
		udp_proto_timers(&pr);
		udp_outq_flush(&pr.out);
		data += len;
		size -= len;

		if (action & 1) {
			struct pm_msg m;
			volatile uint8_t sink = 0;

			while (udp_proto_recv(&pr, &m) == 0) {
				/* Touch every byte the protocol claims to hand out. */
				for (size_t i = 0; i < m.len; i++)
					sink ^= ((const uint8_t *)m.data)[i];
				if (udp_proto_release(&pr, &m) != 0)
					abort();
			}
			udp_outq_flush(&pr.out);
			(void)sink;
		}
	}
	udp_proto_fini(&pr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	run(data, size, false);
	run(data, size, true);
	return 0;
}
