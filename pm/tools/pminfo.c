/* SPDX-License-Identifier: MIT */
/*
 * pminfo - what PM is on this node: version, devices, the configuration in
 * effect, and the live counters of every running context.
 */
#include "pm.h"
#include "stats.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: pminfo [OPTION]...\n"
		"Show the PM library's version, the devices available on this node,\n"
		"the configuration in effect and the counters of running contexts,\n"
		"with those of the layer above PM that a context publishes (a section\n"
		"named after it, such as dsm; \"layers\" in JSON).\n"
		"\n"
		"  -c, --contexts   only the running contexts and their counters\n"
		"  -j, --json       one JSON object on standard output\n"
		"  -h, --help       this help\n"
		"  -V, --version    the library version\n"
		"\n"
		"Environment: PM_DEVICE, PM_NET_DEVICE, PM_SPIN_US, PM_SHM_RING_KIB, PM_STATS_DIR,\n"
		"PM_VERBOSE (see docs/pm/knobs.md).\n");
}

struct knob {
	const char *env, *dflt, *what;
};

static const struct knob knobs[] = {
	{ "PM_DEVICE", "composite", "device of new contexts" },
	{ "PM_NET_DEVICE", "udp", "composite's device for other nodes: udp or eth" },
	{ "PM_SPIN_US", "200", "busy-poll budget of pm_wait() before blocking, us" },
	{ "PM_SHM_RING_KIB", "512", "shm receive ring per sending peer, KiB" },
	{ "PM_UDP_RING_KIB", "512", "udp send and receive ring per remote peer, KiB" },
	{ "PM_UDP_WINDOW", "512", "udp packets in flight per peer" },
	{ "PM_UDP_NICS", "(all up IPv4)", "NICs of the udp device: names or addresses" },
	{ "PM_UDP_CONF", "/etc/score/pm.conf", "file naming the udp device's NICs" },
	{ "PM_STATS_DIR", "/dev/shm", "where contexts publish their counters" },
	{ "PM_VERBOSE", "1", "0 silences diagnostics on stderr" },
};

#define NKNOBS (sizeof(knobs) / sizeof(knobs[0]))

static const char *knob_value(const struct knob *k, bool *from_env)
{
	const char *v = getenv(k->env);

	*from_env = v && *v;
	return *from_env ? v : k->dflt;
}

/* Counters in the order of struct pm_stats, with their names (stats.h). */
#define STAT_FIELDS(X) PM_STATS_COUNTERS(X)

static const char *state_name(uint32_t s)
{
	switch (s) {
	case PM_STATS_OPEN: return "open";
	case PM_STATS_QUIESCED: return "quiesced";
	case PM_STATS_CLOSED: return "closed";
	default: return "unknown";
	}
}

/* The control word, written by scored's agent (docs/pm/control.md). */
static const char *control_name(uint32_t c)
{
	switch (c) {
	case 0: return "run";
	case 1: return "quiesce";
	default: return "unknown";
	}
}

/*
 * The counters a layer above PM (libpmdsm, ...) published in the page, if
 * any: its name and, for i < the count returned, counter i's name and
 * value.  Names are copied out of the page and checked before they are
 * printed (the page is the owner's to write).
 */
struct layer_view {
	char name[PM_STATS_LAYER_NAME];
	unsigned n;
	char names[PM_STATS_LAYER_MAX][PM_STATS_COUNTER_NAME];
	uint64_t values[PM_STATS_LAYER_MAX];
};

static void copy_name(char *dst, const char *src, size_t len)
{
	memcpy(dst, src, len);
	dst[len - 1] = 0;
}

static unsigned layer_of(const struct pm_stats_page *p, struct layer_view *v)
{
	unsigned count = pm_stats_layer_count(p);

	v->n = 0;
	if (count == 0)
		return 0;
	copy_name(v->name, p->layer.name, sizeof(v->name));
	if (!pm_stats_name_ok(v->name, sizeof(v->name) - 1))
		return 0;
	for (unsigned i = 0; i < count; i++) {
		copy_name(v->names[v->n], p->layer.names[i], sizeof(v->names[0]));
		if (pm_stats_name_ok(v->names[v->n], sizeof(v->names[0]) - 1))
			v->values[v->n++] = p->layer.values[i];
	}
	return v->n;
}

/* Visit the pages of live processes; pages of dead ones are stale. */
static int for_each_context(void (*fn)(const struct pm_stats_page *, bool, void *),
			    void *arg)
{
	const char *dir = pm_stats_dir();
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		char path[4096];
		const struct pm_stats_page *p;

		if (strncmp(e->d_name, "pm-stats.", 9) != 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (pm_stats_map(path, &p) != 0)
			continue;
		bool alive = kill(p->pid, 0) == 0 || errno == EPERM;

		if (alive && atomic_load(&p->state) != PM_STATS_CLOSED) {
			fn(p, n == 0, arg);
			n++;
		}
		pm_stats_unmap(p);
		/* A process that crashed could not remove its page: do it. */
		if (!alive)
			unlink(path);
	}
	closedir(d);
	return n;
}

static void print_context_text(const struct pm_stats_page *p, bool first, void *arg)
{
	(void)arg;
	(void)first;
	printf("\ncontext pid %d rank %d/%d  job %s  device %s  state %s  control %s\n",
	       p->pid, p->rank, p->size, p->job, p->device, state_name(atomic_load(&p->state)),
	       control_name(atomic_load(&p->control)));
#define X(f) printf("  %-20s %" PRIu64 "\n", #f, p->stats.f);
	STAT_FIELDS(X)
#undef X
	for (uint32_t i = 0; i < p->nnics && i < 8; i++) {
		const struct pm_stats_nic *n = &p->nics[i];
		char addr[INET_ADDRSTRLEN] = "?";

		inet_ntop(AF_INET, &n->addr, addr, sizeof(addr));
		printf("  nic %-8.16s %-15s tx %" PRIu64 " pkts %" PRIu64 " B  rx %" PRIu64
		       " pkts %" PRIu64 " B  %u dropped by the kernel\n", n->name, addr,
		       n->tx_packets, n->tx_bytes, n->rx_packets, n->rx_bytes, n->rx_dropped);
	}

	struct layer_view layer;

	if (layer_of(p, &layer)) {
		printf("  %s\n", layer.name);
		for (unsigned i = 0; i < layer.n; i++)
			printf("    %-31s %" PRIu64 "\n", layer.names[i], layer.values[i]);
	}
}

static void print_context_json(const struct pm_stats_page *p, bool first, void *arg)
{
	(void)arg;
	printf("%s{\"pid\":%d,\"rank\":%d,\"size\":%d,\"job\":\"%s\",\"device\":\"%s\","
	       "\"state\":\"%s\",\"control\":\"%s\",\"counters\":{", first ? "" : ",",
	       p->pid, p->rank, p->size, p->job, p->device, state_name(atomic_load(&p->state)),
	       control_name(atomic_load(&p->control)));
	const char *sep = "";
#define X(f) printf("%s\"%s\":%" PRIu64, sep, #f, p->stats.f), sep = ",";
	STAT_FIELDS(X)
#undef X
	printf("},\"nics\":[");
	for (uint32_t i = 0; i < p->nnics && i < 8; i++) {
		const struct pm_stats_nic *n = &p->nics[i];
		char addr[INET_ADDRSTRLEN] = "?";

		inet_ntop(AF_INET, &n->addr, addr, sizeof(addr));
		printf("%s{\"name\":\"%.16s\",\"addr\":\"%s\",\"tx_packets\":%" PRIu64
		       ",\"tx_bytes\":%" PRIu64 ",\"rx_packets\":%" PRIu64 ",\"rx_bytes\":%" PRIu64
		       ",\"rx_dropped\":%u}", i ? "," : "", n->name, addr, n->tx_packets, n->tx_bytes,
		       n->rx_packets, n->rx_bytes, n->rx_dropped);
	}
	printf("],\"layers\":{");

	struct layer_view layer;

	if (layer_of(p, &layer)) {
		printf("\"%s\":{", layer.name);
		for (unsigned i = 0; i < layer.n; i++)
			printf("%s\"%s\":%" PRIu64, i ? "," : "", layer.names[i], layer.values[i]);
		printf("}");
	}
	printf("}}");
}

/* Devices that can work here: shm needs a writable /dev/shm. */
static bool shm_available(void)
{
	return access("/dev/shm", W_OK) == 0;
}

/* eth needs packet sockets: CAP_NET_RAW (a socket of protocol 0 receives
 * nothing; it is only asked for). */
static bool eth_available(void)
{
	int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	close(fd);
	return true;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "contexts", no_argument, NULL, 'c' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	bool json = false, only_contexts = false;
	int c;

	while ((c = getopt_long(argc, argv, "cjhV", opts, NULL)) != -1) {
		switch (c) {
		case 'c': only_contexts = true; break;
		case 'j': json = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("%s\n", pm_version()); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "pminfo: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}

	if (json) {
		printf("{\"version\":\"%s\",\"devices\":{\"shm\":%s,\"udp\":true,\"eth\":%s,"
		       "\"composite\":true},\"config\":{", pm_version(),
		       shm_available() ? "true" : "false", eth_available() ? "true" : "false");
		for (size_t i = 0; i < NKNOBS; i++) {
			bool env;

			printf("%s\"%s\":\"%s\"", i ? "," : "", knobs[i].env,
			       knob_value(&knobs[i], &env));
		}
		printf("},\"contexts\":[");
		int n = for_each_context(print_context_json, NULL);

		printf("]}\n");
		return n < 0 ? 1 : 0;
	}

	if (!only_contexts) {
		printf("PM %s\n\ndevices on this node:\n", pm_version());
		printf("  %-10s %s\n", "shm", shm_available() ? "available (processes on this node)"
							 : "unavailable: /dev/shm not writable");
		printf("  %-10s available (reliable UDP over every configured NIC)\n", "udp");
		printf("  %-10s %s\n", "eth", eth_available()
		       ? "available (raw Ethernet frames to other nodes; PM_NET_DEVICE=eth)"
		       : "unavailable: raw frames need CAP_NET_RAW");
		printf("  %-10s available (shm on this node, udp to other nodes)\n",
		       "composite");
		printf("\nconfiguration:\n");
		for (size_t i = 0; i < NKNOBS; i++) {
			bool env;
			const char *v = knob_value(&knobs[i], &env);

			printf("  %-16s %-18s %s%s\n", knobs[i].env, v, knobs[i].what,
			       env ? " (from environment)" : "");
		}
	}
	int n = for_each_context(print_context_text, NULL);

	if (n < 0) {
		fprintf(stderr, "pminfo: %s: %s\n", pm_stats_dir(), strerror(-n));
		return 1;
	}
	if (n == 0)
		printf("\nno running contexts\n");
	return 0;
}
