/* SPDX-License-Identifier: MIT */
/*
 * test_pminfo.c - pminfo shows what a context publishes, the counters of a
 * layer above PM (pm_stats_layer()) included, in text and in JSON.
 *
 * A singleton context publishes a layer and counts in it; pminfo (its path
 * is the argument) reads the page from outside, as on a node.
 */
#include "check.h"
#include "pm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* pminfo's standard output with ARGS, and its exit status 0. */
static char *run_pminfo(const char *pminfo, const char *args)
{
	static char out[1 << 16];
	char cmd[4096];
	size_t len = 0, got;

	snprintf(cmd, sizeof(cmd), "'%s' %s", pminfo, args);
	FILE *f = popen(cmd, "r");

	CHECK_MSG(f, "popen %s", cmd);
	while ((got = fread(out + len, 1, sizeof(out) - 1 - len, f)) > 0)
		len += got;
	out[len] = 0;
	CHECK_MSG(pclose(f) == 0, "%s failed:\n%s", cmd, out);
	return out;
}

static void check_has(const char *out, const char *what, const char *cmd)
{
	CHECK_MSG(strstr(out, what), "pminfo %s does not show '%s':\n%s", cmd, what, out);
}

int main(int argc, char **argv)
{
	CHECK_MSG(argc == 2, "usage: test_pminfo PMINFO");
	const char *pminfo = argv[1];
	const char *dir = check_tmp_dir_make("pminfo");

	setenv("PM_STATS_DIR", dir, 1);
	check_unset_pmix();

	/* A context without a layer: no section, an empty "layers". */
	struct pm_open_attr attr = { .device = "shm" };
	pm_context_t *ctx;

	CHECK_OK(pm_open(&ctx, &attr));
	char *out = run_pminfo(pminfo, "--json");

	check_has(out, "\"msgs_sent\":0", "--json");
	check_has(out, "\"layers\":{}}", "--json");

	static const char *const names[] = { "read_faults", "fetch_bytes", "fault_ns" };
	uint64_t *c;

	CHECK_OK(pm_stats_layer(ctx, "dsm", names, 3, &c));
	c[0] = 7;
	c[1] = 8192;
	c[2] = 1500000000ull;

	out = run_pminfo(pminfo, "--contexts");
	check_has(out, "  dsm\n", "--contexts");
	check_has(out, "    read_faults                     7\n", "--contexts");
	check_has(out, "    fetch_bytes                     8192\n", "--contexts");
	check_has(out, "    fault_ns                        1500000000\n", "--contexts");
	/* The section comes after PM's own counters. */
	CHECK(strstr(out, "  dsm\n") > strstr(out, "refused_resends"));

	out = run_pminfo(pminfo, "--json");
	check_has(out, "\"layers\":{\"dsm\":{\"read_faults\":7,\"fetch_bytes\":8192,"
		       "\"fault_ns\":1500000000}}}", "--json");

	CHECK_OK(pm_close(ctx));
	out = run_pminfo(pminfo, "--contexts");
	check_has(out, "no running contexts", "--contexts");
	printf("pminfo tests passed\n");
	return 0;
}
