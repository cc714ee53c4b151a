/* SPDX-License-Identifier: MIT */
/*
 * pm_layer - a PM program whose context publishes the counters of a layer
 * above PM, as libpmdsm does (pm_stats_layer(), docs/pm/stats.md), and
 * counts in them every 10 ms for SECONDS (default 120):
 *
 *   ticks           one per 10 ms
 *   tick_ns         10,000,000 per tick (exported in seconds)
 *   payload_bytes   4096 per tick
 *
 * under the layer "testlayer": what scored's agent exports without
 * knowing the layer (tests/scored/test_metrics.py, which builds it with cc
 * against build/lib/libpm.so).  Prints "pm_layer: rank R publishes" once
 * the counters are in the page.
 */
#include <pm.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	static const char *const names[] = { "ticks", "tick_ns", "payload_bytes" };
	double seconds = argc > 1 ? atof(argv[1]) : 120;
	pm_context_t *ctx;
	uint64_t *c;
	int err = pm_open(&ctx, NULL);

	if (err) {
		fprintf(stderr, "pm_layer: pm_open: %s\n", pm_strerror(err));
		return 1;
	}
	err = pm_stats_layer(ctx, "testlayer", names, 3, &c);
	if (err) {
		fprintf(stderr, "pm_layer: pm_stats_layer: %s\n", pm_strerror(err));
		return 1;
	}
	printf("pm_layer: rank %d publishes\n", pm_rank(ctx));
	fflush(stdout);

	const struct timespec tick = { .tv_sec = 0, .tv_nsec = 10000000 };

	for (long i = 0; i < (long)(seconds * 100); i++) {
		nanosleep(&tick, NULL);
		c[0]++;
		c[1] += 10000000;
		c[2] += 4096;
	}
	pm_close(ctx);
	return 0;
}
