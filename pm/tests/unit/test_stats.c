/* SPDX-License-Identifier: MIT */
/*
 * test_stats.c - the statistics page (pm/src/stats.[ch]).
 *
 * The byte layout is an interface: pminfo, scored's agent and anything
 * else read the page from outside the process.  The offsets below are the
 * specification (stats.h, docs/pm/stats.md); the test checks the compiled
 * structure against them, then reads a published page back as raw bytes
 * at those offsets, as a foreign reader would.
 */
#include "check.h"
#include "core/pm_internal.h"
#include "stats.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct field {
	const char *name;
	size_t offset, spec;
};

#define F(member, at) { #member, offsetof(struct pm_stats_page, member), at }

/* The counters, in their documented order, each a u64 from offset 368. */
static const char *const counters[] = {
	"msgs_sent", "bytes_sent", "msgs_recv", "bytes_recv", "send_eagain",
	"rma_writes", "rma_reads", "rma_bytes", "regcache_hits", "regcache_misses",
	"regcache_evictions", "waits_blocked", "retransmits", "drops", "stops",
	"gos", "loses", "quiesces", "quiesce_ns", "rto_polls", "dups", "refused_resends",
};

/* The list every reader is generated from (stats.h) names the same ones. */
static const char *const listed[] = {
#define NAME(m) #m,
	PM_STATS_COUNTERS(NAME)
#undef NAME
};

#define NCOUNTERS (sizeof(counters) / sizeof(counters[0]))

static size_t counter_offset(const char *name)
{
#define C(m) if (strcmp(name, #m) == 0) return offsetof(struct pm_stats, m);
	C(msgs_sent) C(bytes_sent) C(msgs_recv) C(bytes_recv) C(send_eagain)
	C(rma_writes) C(rma_reads) C(rma_bytes) C(regcache_hits)
	C(regcache_misses) C(regcache_evictions) C(waits_blocked)
	C(retransmits) C(drops) C(stops) C(gos) C(loses) C(quiesces)
	C(quiesce_ns) C(rto_polls) C(dups) C(refused_resends)
#undef C
	check_fail(__FILE__, __LINE__, "no counter %s", name);
}

static void test_layout(void)
{
	const struct field fields[] = {
		F(magic, 0), F(version, 8), F(page_bytes, 12), F(pid, 16), F(rank, 20),
		F(size, 24), F(nlocal, 28), F(job, 32), F(device, 288), F(start_ns, 304),
		F(state, 312), F(control, 316), F(reserved, 320), F(stats, 368),
	};

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		CHECK_MSG(fields[i].offset == fields[i].spec,
			  "field %s at offset %zu, documented at %zu", fields[i].name,
			  fields[i].offset, fields[i].spec);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->job), 256);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->device), 16);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->state), 4);
	for (size_t i = 0; i < NCOUNTERS; i++)
		CHECK_MSG(counter_offset(counters[i]) == 8 * i,
			  "counter %s at %zu, documented at %zu", counters[i],
			  counter_offset(counters[i]), 8 * i);
	/* The counters end at 544 (docs/pm/stats.md); what follows is the
	 * per-NIC block of the udp device (offsets in stats.h). */
	CHECK_EQ(sizeof(struct pm_stats), 8 * NCOUNTERS);
	CHECK_EQ(sizeof(listed) / sizeof(listed[0]), NCOUNTERS);
	for (size_t i = 0; i < NCOUNTERS; i++)
		CHECK_MSG(strcmp(listed[i], counters[i]) == 0, "PM_STATS_COUNTERS[%zu] is %s, documented %s",
			  i, listed[i], counters[i]);
	CHECK_EQ(offsetof(struct pm_stats_page, stats) + sizeof(struct pm_stats), 544);
	CHECK_EQ(offsetof(struct pm_stats_page, nnics), 544);
	CHECK_EQ(offsetof(struct pm_stats_page, nics), 552);
	CHECK_EQ(offsetof(struct pm_stats_nic, addr), 16);
	CHECK_EQ(offsetof(struct pm_stats_nic, tx_packets), 24);
	CHECK_EQ(offsetof(struct pm_stats_nic, rx_bytes), 48);
	CHECK_EQ(sizeof(struct pm_stats_nic), 56);
	CHECK_EQ(offsetof(struct pm_stats_page, layer), 552 + sizeof(((struct pm_stats_page *)0)->nics));
	CHECK_EQ(offsetof(struct pm_stats_page, layer), 1000);
	CHECK_EQ(PM_STATS_V2_BYTES, 1000);
	/* The layer area (version 3). */
	CHECK_EQ(offsetof(struct pm_stats_page, layer.name), 1000);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->layer.name), 16);
	CHECK_EQ(offsetof(struct pm_stats_page, layer.count), 1016);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->layer.count), 4);
	CHECK_EQ(offsetof(struct pm_stats_page, layer.names), 1024);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->layer.names[0]), 32);
	CHECK_EQ(offsetof(struct pm_stats_page, layer.values), 2048);
	CHECK_EQ(PM_STATS_LAYER_MAX, 32);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->layer.names), 32 * 32);
	CHECK_EQ(sizeof(((struct pm_stats_page *)0)->layer.values), 32 * 8);
	CHECK_EQ(sizeof(struct pm_stats_page), 2304);
	CHECK_EQ(PM_STATS_VERSION, 3);
	CHECK_EQ(PM_STATS_VERSION_MIN, 2);
	CHECK(memcmp(PM_STATS_MAGIC, "PMSTATS1", 8) == 0);
	CHECK_EQ(PM_STATS_OPEN, 1);
	CHECK_EQ(PM_STATS_QUIESCED, 2);
	CHECK_EQ(PM_STATS_CLOSED, 3);
}

/* The statistics directory of the test (check.h removes it at exit). */
static const char *dir;

static int files_in_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	CHECK(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static uint64_t u64_at(const uint8_t *b, size_t off)
{
	uint64_t v;

	memcpy(&v, b + off, 8);
	return v;
}

static uint32_t u32_at(const uint8_t *b, size_t off)
{
	uint32_t v;

	memcpy(&v, b + off, 4);
	return v;
}

static void read_file(const char *path, uint8_t *buf, size_t len)
{
	int fd = open(path, O_RDONLY);

	CHECK_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
	CHECK_EQ(pread(fd, buf, len, 0), (ssize_t)len);
	close(fd);
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	CHECK_MSG(fd >= 0, "create %s: %s", path, strerror(errno));
	CHECK_EQ(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static void test_publish_and_map(void)
{
	struct pm_context *ctx = calloc(1, sizeof(*ctx));
	struct timespec t0, t1;

	CHECK(ctx);
	ctx->rank = 3;
	ctx->size = 8;
	ctx->boot.nlocal = 4;
	snprintf(ctx->boot.job, sizeof(ctx->boot.job), "job-%s", "stats-test");

	clock_gettime(CLOCK_REALTIME, &t0);
	CHECK_OK(pm_stats_publish(ctx, "composite"));
	clock_gettime(CLOCK_REALTIME, &t1);
	CHECK(ctx->page && ctx->stats == &ctx->page->stats);

	/* The file is PM_STATS_DIR/pm-stats.PID.SEQ. */
	char prefix[256];

	snprintf(prefix, sizeof(prefix), "%s/pm-stats.%d.", dir, (int)getpid());
	CHECK_MSG(strncmp(ctx->stats_path, prefix, strlen(prefix)) == 0,
		  "page at %s, expected %s*", ctx->stats_path, prefix);
	CHECK_EQ(files_in_dir(), 1);

	/* The owner counts; a reader sees it live. */
	for (size_t i = 0; i < NCOUNTERS; i++)
		((uint64_t *)ctx->stats)[i] = 1000 + i;

	const struct pm_stats_page *p;

	CHECK_OK(pm_stats_map(ctx->stats_path, &p));
	CHECK(memcmp(p->magic, "PMSTATS1", 8) == 0);
	CHECK_EQ(p->version, 3);
	CHECK_EQ(p->page_bytes, sizeof(struct pm_stats_page));
	CHECK_EQ(p->pid, getpid());
	CHECK_EQ(p->rank, 3);
	CHECK_EQ(p->size, 8);
	CHECK_EQ(p->nlocal, 4);
	CHECK(strcmp(p->job, "job-stats-test") == 0);
	CHECK(strcmp(p->device, "composite") == 0);
	CHECK_EQ(atomic_load(&p->state), PM_STATS_OPEN);
	uint64_t ns0 = (uint64_t)t0.tv_sec * 1000000000u + (uint64_t)t0.tv_nsec;
	uint64_t ns1 = (uint64_t)t1.tv_sec * 1000000000u + (uint64_t)t1.tv_nsec;

	CHECK_U64(p->start_ns, >=, ns0);
	CHECK_U64(p->start_ns, <=, ns1);
	CHECK_EQ(p->stats.msgs_sent, 1000);
	CHECK_EQ(p->stats.refused_resends, 1000 + NCOUNTERS - 1);
	ctx->stats->drops = 77;
	CHECK_EQ(p->stats.drops, 77);

	/* The raw bytes at the documented offsets. */
	uint8_t raw[sizeof(struct pm_stats_page)];

	read_file(ctx->stats_path, raw, sizeof(raw));
	CHECK(memcmp(raw, "PMSTATS1", 8) == 0);
	CHECK_EQ(u32_at(raw, 8), 3);
	CHECK_EQ(u32_at(raw, 12), sizeof(struct pm_stats_page));
	CHECK_EQ((int32_t)u32_at(raw, 16), getpid());
	CHECK_EQ((int32_t)u32_at(raw, 20), 3);
	CHECK_EQ((int32_t)u32_at(raw, 24), 8);
	CHECK_EQ((int32_t)u32_at(raw, 28), 4);
	CHECK(strcmp((const char *)raw + 32, "job-stats-test") == 0);
	CHECK(strcmp((const char *)raw + 288, "composite") == 0);
	CHECK_EQ(u64_at(raw, 304), p->start_ns);
	CHECK_EQ(u32_at(raw, 312), PM_STATS_OPEN);
	/* No layer published: the area is empty. */
	CHECK_EQ(u32_at(raw, 1016), 0);
	CHECK_EQ(raw[1000], 0);
	CHECK_EQ(pm_stats_layer_count(p), 0);
	for (size_t i = 0; i < NCOUNTERS; i++) {
		uint64_t want = strcmp(counters[i], "drops") == 0 ? 77 : 1000 + i;

		CHECK_MSG(u64_at(raw, 368 + 8 * i) == want, "%s at %zu: %llu, expected %llu",
			  counters[i], 368 + 8 * i,
			  (unsigned long long)u64_at(raw, 368 + 8 * i),
			  (unsigned long long)want);
	}

	/* A second page of the same process gets its own file. */
	struct pm_context *ctx2 = calloc(1, sizeof(*ctx2));

	CHECK(ctx2);
	snprintf(ctx2->boot.job, sizeof(ctx2->boot.job), "%s", "other");
	CHECK_OK(pm_stats_publish(ctx2, "shm"));
	CHECK(strcmp(ctx2->stats_path, ctx->stats_path) != 0);
	CHECK_EQ(files_in_dir(), 2);
	pm_stats_unpublish(ctx2);
	CHECK(ctx2->page == NULL && ctx2->stats == NULL);
	CHECK_EQ(files_in_dir(), 1);
	pm_stats_unpublish(ctx2);       /* twice: nothing happens */
	free(ctx2);

	/* Unpublishing marks the page closed for readers still mapping it,
	 * and removes the file. */
	char path[sizeof(ctx->stats_path)];

	memcpy(path, ctx->stats_path, sizeof(path));
	pm_stats_unpublish(ctx);
	CHECK_EQ(atomic_load(&p->state), PM_STATS_CLOSED);
	CHECK_EQ(p->stats.drops, 77);
	CHECK_EQ(files_in_dir(), 0);
	const struct pm_stats_page *q = NULL;

	CHECK_ERR(pm_stats_map(path, &q), -ENOENT);
	CHECK(q == NULL);
	pm_stats_unmap(p);
	free(ctx);
}

static void test_map_rejects(void)
{
	char path[128];
	struct pm_stats_page good;
	const struct pm_stats_page *p;

	memset(&good, 0, sizeof(good));
	memcpy(good.magic, PM_STATS_MAGIC, 8);
	good.version = PM_STATS_VERSION;
	good.page_bytes = sizeof(good);
	snprintf(path, sizeof(path), "%s/pm-stats.1.0", dir);

	/* A well-formed page made by hand maps. */
	write_file(path, &good, sizeof(good));
	CHECK_OK(pm_stats_map(path, &p));
	pm_stats_unmap(p);

	/* Too short (would fault a reader past its end). */
	write_file(path, &good, sizeof(good) - 1);
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);
	write_file(path, &good, 0);
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);

	/* Wrong magic (also: a page still being made), wrong version. */
	struct pm_stats_page bad = good;

	memset(bad.magic, 0, 8);
	write_file(path, &bad, sizeof(bad));
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);
	bad = good;
	bad.magic[7] = '2';
	write_file(path, &bad, sizeof(bad));
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);
	bad = good;
	bad.version = PM_STATS_VERSION + 1;
	write_file(path, &bad, sizeof(bad));
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);
	bad = good;
	bad.version = 1;
	write_file(path, &bad, sizeof(bad));
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);

	/* Version 3 needs its layer area: a page cut at the end of version 2's
	 * layout is refused as version 3... */
	write_file(path, &good, PM_STATS_V2_BYTES);
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);

	/* ... and accepted as version 2 (a process linked with an older
	 * libpm), with no layer whatever the bytes past its end say. */
	struct pm_stats_page v2 = good;

	v2.version = 2;
	v2.page_bytes = PM_STATS_V2_BYTES;
	v2.stats.msgs_sent = 12;
	write_file(path, &v2, PM_STATS_V2_BYTES);
	CHECK_OK(pm_stats_map(path, &p));
	CHECK_EQ(p->version, 2);
	CHECK_EQ(p->stats.msgs_sent, 12);
	CHECK_EQ(pm_stats_layer_count(p), 0);
	pm_stats_unmap(p);
	atomic_store(&v2.layer.count, 3);
	write_file(path, &v2, sizeof(v2));
	CHECK_OK(pm_stats_map(path, &p));
	CHECK_EQ(pm_stats_layer_count(p), 0);
	pm_stats_unmap(p);
	write_file(path, &v2, PM_STATS_V2_BYTES - 1);
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);
	/* Version 2 with a wrong magic is refused like any other. */
	memcpy(v2.magic, "PMSTATS2", 8);
	write_file(path, &v2, PM_STATS_V2_BYTES);
	CHECK_ERR(pm_stats_map(path, &p), -EPROTO);

	/* A layer count past the area (a page written by hand) reads as none. */
	bad = good;
	atomic_store(&bad.layer.count, PM_STATS_LAYER_MAX + 1);
	write_file(path, &bad, sizeof(bad));
	CHECK_OK(pm_stats_map(path, &p));
	CHECK_EQ(pm_stats_layer_count(p), 0);
	pm_stats_unmap(p);

	/* Not there. */
	CHECK_OK(unlink(path));
	CHECK_ERR(pm_stats_map(path, &p), -ENOENT);
	CHECK_EQ(files_in_dir(), 0);
}

/*
 * /dev/shm is everybody's: a name taken by a link (planted to make a
 * process write where its user may, or root's agent where root may) or by
 * any file is skipped, never followed or reused; pages are 0600; a link is
 * not mapped as a page.
 */
static void test_planted_names(void)
{
	char target[128], link[128];
	uint8_t before[64], after[64];

	snprintf(target, sizeof(target), "%s/victim", dir);
	memset(before, 'v', sizeof(before));
	write_file(target, before, sizeof(before));
	/* The names this process is about to use (it has used a few before). */
	for (int seq = 0; seq < 16; seq++) {
		snprintf(link, sizeof(link), "%s/pm-stats.%d.%d", dir, (int)getpid(), seq);
		unlink(link);
		CHECK_OK(symlink(target, link));
	}

	struct pm_context *ctx = calloc(1, sizeof(*ctx));

	CHECK(ctx);
	snprintf(ctx->boot.job, sizeof(ctx->boot.job), "%s", "planted");
	CHECK_OK(pm_stats_publish(ctx, "udp"));
	ctx->stats->msgs_sent = 5;

	struct stat st;

	CHECK_OK(lstat(ctx->stats_path, &st));
	CHECK_MSG(S_ISREG(st.st_mode), "%s is not a regular file", ctx->stats_path);
	CHECK_EQ(st.st_mode & 0777, 0600);
	read_file(target, after, sizeof(after));
	CHECK_MSG(memcmp(before, after, sizeof(after)) == 0, "the planted link was followed");

	const struct pm_stats_page *p;

	snprintf(link, sizeof(link), "%s/pm-stats.%d.0", dir, (int)getpid());
	CHECK_ERR(pm_stats_map(link, &p), -EPROTO);
	CHECK_OK(pm_stats_map(ctx->stats_path, &p));
	CHECK_EQ(p->stats.msgs_sent, 5);
	pm_stats_unmap(p);

	pm_stats_unpublish(ctx);
	free(ctx);
	for (int seq = 0; seq < 16; seq++) {
		snprintf(link, sizeof(link), "%s/pm-stats.%d.%d", dir, (int)getpid(), seq);
		unlink(link);
	}
	CHECK_OK(unlink(target));
}

/* The layer area of a context's page as a foreign reader sees it: the
 * raw bytes of the file at the documented offsets. */
static void read_page(const pm_context_t *ctx, uint8_t raw[2304])
{
	read_file(ctx->stats_path, raw, 2304);
	CHECK(memcmp(raw, "PMSTATS1", 8) == 0);
	CHECK_EQ(u32_at(raw, 8), 3);
	CHECK_EQ(u32_at(raw, 12), 2304);
}

/* Every way pm_stats_layer() refuses leaves the area as it was. */
static void check_refused(pm_context_t *ctx, const char *layer, const char *const *names,
			  unsigned n, int err, const char *what)
{
	uint64_t *c = (uint64_t *)&c;
	int got = pm_stats_layer(ctx, layer, names, n, &c);

	CHECK_MSG(got == err, "%s: %s, expected %d", what, check_errname(got), err);
	CHECK_MSG(c == NULL, "%s: *counters left set", what);
}

static void test_layer(void)
{
	static const char *const names[] = { "read_faults", "fetch_bytes", "fault_ns" };
	struct pm_open_attr attr = { .device = "shm" };
	pm_context_t *ctx, *ctx2;
	uint8_t raw[2304];
	uint64_t *c = NULL;

	check_unset_pmix();
	CHECK_OK(pm_open(&ctx, &attr));

	/* Arguments refused, before anything is written. */
	CHECK_ERR(pm_stats_layer(NULL, "dsm", names, 3, &c), -EINVAL);
	CHECK_ERR(pm_stats_layer(ctx, "dsm", names, 3, NULL), -EINVAL);
	check_refused(ctx, NULL, names, 3, -EINVAL, "no layer name");
	check_refused(ctx, "dsm", NULL, 3, -EINVAL, "no names");
	check_refused(ctx, "dsm", names, 0, -EINVAL, "no counters");
	check_refused(ctx, "dsm", names, PM_STATS_LAYER_MAX + 1, -E2BIG, "33 counters");
	check_refused(ctx, "", names, 3, -EINVAL, "empty layer name");
	check_refused(ctx, "DSM", names, 3, -EINVAL, "upper case");
	check_refused(ctx, "d-sm", names, 3, -EINVAL, "a dash");
	check_refused(ctx, "abcdefghijklmnop", names, 3, -EINVAL, "16 characters");
	check_refused(ctx, "pm", names, 3, -EINVAL, "PM's own name");
	check_refused(ctx, "agent", names, 3, -EINVAL, "the agent's name");
	check_refused(ctx, "pm_rma", names, 3, -EINVAL, "in PM's metric names");
	check_refused(ctx, "agent_x", names, 3, -EINVAL, "in the agent's metric names");
	const char *const empty[] = { "a", "" };
	const char *const upper[] = { "a", "Faults" };
	const char *const space[] = { "read faults" };
	const char *const newline[] = { "x\ny" };
	const char *const long32[] = { "abcdefghijklmnopqrstuvwxyz012345" };
	const char *const dup[] = { "a", "b", "a" };
	const char *const null[] = { "a", NULL };

	check_refused(ctx, "dsm", empty, 2, -EINVAL, "an empty counter name");
	check_refused(ctx, "dsm", upper, 2, -EINVAL, "a counter name in upper case");
	check_refused(ctx, "dsm", space, 1, -EINVAL, "a space");
	check_refused(ctx, "dsm", newline, 1, -EINVAL, "a newline");
	check_refused(ctx, "dsm", long32, 1, -EINVAL, "a counter name of 32 characters");
	check_refused(ctx, "dsm", dup, 3, -EINVAL, "a counter twice");
	check_refused(ctx, "dsm", null, 2, -EINVAL, "a NULL name");
	read_page(ctx, raw);
	CHECK_EQ(u32_at(raw, 1016), 0);
	CHECK_EQ(raw[1000], 0);

	/* Published: the names and the zeroed values are in the page. */
	CHECK_OK(pm_stats_layer(ctx, "dsm", names, 3, &c));
	CHECK(c != NULL);
	CHECK(c == ctx->page->layer.values);
	CHECK_EQ((uintptr_t)c % 8, 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(c[i], 0);
	c[0] = 5;
	c[1] += 4096;
	c[2] = 123456789012ull;
	read_page(ctx, raw);
	CHECK(strcmp((const char *)raw + 1000, "dsm") == 0);
	CHECK_EQ(u32_at(raw, 1016), 3);
	for (int i = 0; i < 3; i++)
		CHECK_MSG(strcmp((const char *)raw + 1024 + 32 * i, names[i]) == 0,
			  "name %d at %d: '%.32s'", i, 1024 + 32 * i, (const char *)raw + 1024 + 32 * i);
	CHECK_EQ(raw[1024 + 32 * 3], 0);
	CHECK_EQ(u64_at(raw, 2048), 5);
	CHECK_EQ(u64_at(raw, 2056), 4096);
	CHECK_EQ(u64_at(raw, 2064), 123456789012ull);
	CHECK_EQ(u64_at(raw, 2072), 0);

	/* A reader through pm_stats_map() sees the same, live. */
	const struct pm_stats_page *p;

	CHECK_OK(pm_stats_map(ctx->stats_path, &p));
	CHECK_EQ(pm_stats_layer_count(p), 3);
	CHECK(strcmp(p->layer.name, "dsm") == 0);
	CHECK(strcmp(p->layer.names[2], "fault_ns") == 0);
	c[0]++;
	CHECK_EQ(p->layer.values[0], 6);

	/* One layer per context: a second is refused, the first stays. */
	const char *const other[] = { "x" };

	check_refused(ctx, "mpi", other, 1, -EEXIST, "a second layer");
	check_refused(ctx, "dsm", names, 3, -EEXIST, "the same layer again");
	CHECK_EQ(pm_stats_layer_count(p), 3);
	CHECK(strcmp(p->layer.name, "dsm") == 0);
	CHECK_EQ(p->layer.values[0], 6);

	/* The longest names, the most counters, in another context. */
	char longnames[PM_STATS_LAYER_MAX][32];
	const char *many[PM_STATS_LAYER_MAX];

	for (int i = 0; i < PM_STATS_LAYER_MAX; i++) {
		snprintf(longnames[i], sizeof(longnames[i]), "counter_%02d_abcdefghijklmnopqrst", i);
		CHECK_EQ(strlen(longnames[i]), 31);
		many[i] = longnames[i];
	}
	CHECK_OK(pm_open(&ctx2, &attr));
	uint64_t *c2;

	CHECK_OK(pm_stats_layer(ctx2, "abcdefghijklmno", many, PM_STATS_LAYER_MAX, &c2));
	c2[PM_STATS_LAYER_MAX - 1] = 31;
	read_page(ctx2, raw);
	CHECK(strcmp((const char *)raw + 1000, "abcdefghijklmno") == 0);
	CHECK_EQ(u32_at(raw, 1016), PM_STATS_LAYER_MAX);
	CHECK(strcmp((const char *)raw + 1024 + 32 * 31, longnames[31]) == 0);
	CHECK_EQ(u64_at(raw, 2048 + 8 * 31), 31);
	CHECK_OK(pm_close(ctx2));

	/* The words live until pm_close(), which removes the page. */
	char path[sizeof(ctx->stats_path)];

	memcpy(path, ctx->stats_path, sizeof(path));
	CHECK_OK(pm_close(ctx));
	CHECK_EQ(atomic_load(&p->state), PM_STATS_CLOSED);
	CHECK_EQ(p->layer.values[0], 6);
	pm_stats_unmap(p);
	CHECK_ERR(pm_stats_map(path, &p), -ENOENT);
}

static void test_dir(void)
{
	CHECK(strcmp(pm_stats_dir(), dir) == 0);
	setenv("PM_STATS_DIR", "", 1);
	CHECK(strcmp(pm_stats_dir(), "/dev/shm") == 0);
	unsetenv("PM_STATS_DIR");
	CHECK(strcmp(pm_stats_dir(), "/dev/shm") == 0);
	setenv("PM_STATS_DIR", dir, 1);

	/* A directory that does not exist: publishing fails cleanly. */
	struct pm_context *ctx = calloc(1, sizeof(*ctx));

	CHECK(ctx);
	setenv("PM_STATS_DIR", "/nonexistent-pm-test-dir", 1);
	CHECK_ERR(pm_stats_publish(ctx, "shm"), -ENOENT);
	CHECK(ctx->page == NULL);
	pm_stats_unpublish(ctx);
	free(ctx);
	setenv("PM_STATS_DIR", dir, 1);
}

int main(void)
{
	dir = check_tmp_dir_make("stats");
	setenv("PM_STATS_DIR", dir, 1);

	test_layout();
	test_publish_and_map();
	test_map_rejects();
	test_planted_names();
	test_layer();
	test_dir();

	CHECK_EQ(files_in_dir(), 0);
	CHECK_OK(rmdir(dir));
	printf("stats tests passed\n");
	return 0;
}
