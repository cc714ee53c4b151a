/* SPDX-License-Identifier: MIT */
/*
 * fuzz_udp_rx.c - libFuzzer target over the udp device's receive path.
 *
 * The input is a sequence of records, each one datagram as it would arrive
 * from some rank:
 *
 *   u8 from | u8 action | u16 len (little-endian) | len bytes
 *
 * `from` (mod 4) picks the source address, bit 0 of `action` makes the
 * process take and release every delivered message afterwards (so flow
 * control, STOP and GO, are reached too).  The device has no sockets: what
 * it sends back is discarded.  One exposed region (key 0x20005, 4 KiB)
 * makes remote writes and reads reachable.  Any crash, sanitizer report or
 * leak is a bug; see docs/pm/fuzzing.md.
 */
#include "core/pm_internal.h"
#include "stats.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define JOBKEY 0x0123456789abcdefull
#define RANKS 4
#define REGION_KEY ((2ull << 16) | 5)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t region[4096];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pm_context *ctx = calloc(1, sizeof(*ctx));
	struct pm_stats_page *page = calloc(1, sizeof(*page));

	if (!ctx || !page)
		abort();
	ctx->page = page;
	ctx->stats = &page->stats;
	/* No agent: the control word stays RUN, as pm_open() would set it up. */
	ctx->control = &page->control;
	ctx->control_slot = -1;
	ctx->rank = 0;
	ctx->size = RANKS;
	ctx->udp_ring_kib = 16;         /* small: flow control is reachable */
	ctx->udp_window = 64;
	ctx->dev = pm_udp_testing_create(ctx, JOBKEY, 0, RANKS);
	if (!ctx->dev)
		abort();
	ctx->dev->ops->expose(ctx->dev, 5, REGION_KEY, region, sizeof(region));

	while (size >= 4) {
		uint32_t from = data[0] % RANKS;
		uint8_t action = data[1];
		size_t len = (size_t)data[2] | (size_t)data[3] << 8;

		data += 4;
		size -= 4;
		if (len > size)
			len = size;
		pm_udp_testing_input(ctx->dev, from, data, len);
		data += len;
		size -= len;

		if (action & 1) {
			struct pm_msg m;
			volatile uint8_t sink = 0;

			while (pm_recv(ctx, &m) == 0) {
				/* Touch every byte the device claims to hand out. */
				for (size_t i = 0; i < m.len; i++)
					sink ^= ((const uint8_t *)m.data)[i];
				if (pm_release(ctx, &m) != 0)
					abort();
			}
			(void)sink;
		}
	}
	ctx->dev->ops->destroy(ctx->dev);
	free(page);
	free(ctx);
	return 0;
}
