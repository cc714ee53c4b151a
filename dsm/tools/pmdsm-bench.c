/* SPDX-License-Identifier: MIT */
/*
 * pmdsm-bench - what the DSM's protocol costs, in microseconds per
 * operation, between the two ranks of one job: a write fault with its twin
 * and its diff at the release, the same for a page homed at the writer
 * (no twin, no diff), reading pages fetched from their home in sequence
 * (read faults with read-ahead) and in a random order (one read fault per
 * page), a lock managed by the other rank, a lock managed here, a
 * barrier, and the first touch of a PMDSM_FIRST_TOUCH page whose home the
 * other rank decides.  And,
 * run separately (--pm-read-baseline), the baseline of the read fault: PM's
 * remote read of 4 KiB alone, through the same PM device, page by page as
 * the DSM fetches them.
 *
 * Methodology after pmbench (and Hpcbench), shared with it in
 * pm/tools/bench_method.h: a warm-up, an automatic iteration count per test
 * (doubling until a repetition's timed part lasts a quarter of --min-time,
 * then scaled), --reps timed repetitions reported as median, min and max.  Only the part a test measures is timed; what
 * prepares it (fetching the pages again, the home writing them so that
 * they are stale) is not.
 *
 * Rank 1 measures and prints; rank 0 serves (the home of the pages rank 1
 * faults on, the manager of the remote lock).  The ranks agree on what to
 * do next through the DSM itself: rank 1 writes a command into a shared
 * page homed at itself, and both meet at a barrier, after which rank 0
 * reads it.
 *
 * See docs/dsm/bench.md.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "pm.h"
#include "pmdsm.h"

#define PROG "pmdsm-bench"

/* The synopsis; bench_method.h's bad_usage() prints it. */
static const char short_usage[] =
	"Usage: " PROG " [--test LIST] [--pages N] [--reps N] [--min-time SEC]\n"
	"                   [--warmup N] [--iters N] [--device NAME] [--seed N]\n"
	"                   [--write-detect segv|uffd-async|uffd-wp] [--pm-read-baseline]\n"
	"                   [--json] [--help]\n"
	"Run it with two processes: mpirun -n 2 " PROG " ...\n";

#include "bench_method.h"

#define PAGE            4096u
#define MAX_PAGES       65536u
#define MAX_ITERS       1000000ull
#define DEFAULT_PAGES   256u
#define DEFAULT_REPS    5
#define DEFAULT_MIN_T   0.1
#define DEFAULT_WARMUP  2
#define DEFAULT_SEED    1
/* Batches of one write test in one step: each uses its own lock managed by
 * rank 1 (1, 3, 5, ...), never acquired before in the epoch, so that its
 * grant brings no write notice and the pages stay valid from batch to
 * batch; a step begins with a barrier (a new epoch). */
#define WRITE_STEP_MAX  (PMDSM_LOCKS / 2)
#define LOOP_STEP_MAX   100000u
#define REMOTE_LOCK     0u              /* managed by rank 0 */
#define LOCAL_LOCK      1u              /* managed by rank 1 */

enum test { T_WRITE_REMOTE, T_WRITE_HOME, T_READ, T_READ_RANDOM, T_LOCK, T_LOCK_LOCAL,
	    T_BARRIER, T_BARRIER_PEER, T_FIRST_TOUCH, T_COUNT, T_PM_READ = T_COUNT };
static const char *const test_names[] = { "write-remote", "write-home", "read", "read-random",
					  "lock", "lock-local", "barrier", "barrier-peer",
					  "first-touch", "pm-read" };
/* What one operation is, per test. */
static const char *const op_names[] = { "page", "page", "page", "page", "lock+unlock",
					"lock+unlock", "barrier", "barrier", "page", "page" };

enum cmd { CMD_QUIT = 1, CMD_RUN, CMD_CHECK };

/* Rank 1's command to rank 0, in a shared page homed at rank 1. */
struct ctl {
	uint32_t cmd;
	uint32_t test;
	uint64_t units;
	uint64_t seq;           /* the value written in the batch (CHECK: the last) */
};

struct options {
	bool tests[T_COUNT];
	unsigned pages;
	struct bench_method method;     /* --reps, --min-time, --warmup, --iters */
	const char *device;
	enum pmdsm_write_detect wd;
	uint64_t seed;                  /* read-random's order */
	bool baseline;
	bool json;
};

/* What happened in the timed parts of a test. */
struct tally {
	double seconds;
	struct pmdsm_stats st;          /* deltas */
	uint64_t csw;                   /* context switches of the process */
};

struct result {
	enum test test;
	uint64_t iters;                 /* units per repetition */
	uint64_t ops;                   /* operations per repetition */
	double v[BENCH_MAX_REPS];       /* us per operation */
	double median, min, max;
	struct tally t;                 /* over all timed repetitions */
	uint64_t total_ops;
};

struct bench {
	struct options opt;
	int rank;
	unsigned pages;
	uint8_t *data;                  /* 2 x pages: [0, pages) homed at 0, then at 1 */
	volatile struct ctl *ctl;       /* homed at rank 1 */
	uint64_t seq;
	uint64_t rng;                   /* read-random: the order's generator */
	uint32_t *order;                /* read-random: the pages' order in a batch */
	uint32_t last;                  /* read-random: the batch's last page, or NONE */
	const char *write_detect;       /* as found: "segv", "uffd-async" */
	const char *device;
	/* the baseline */
	pm_context_t *pm;
	uint8_t *region;
	pm_mr_t *mr;
	uint64_t peer_key;
};

static volatile uint64_t g_sink;

/* ---- errors (die(): bench_method.h) ---- */

static void call(int err, const char *what)
{
	if (err < 0)
		die("%s: %s", what, pmdsm_strerror(err));
}

/* ---- time (now_s(): bench_method.h) ---- */

static uint64_t ctxsw(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_nvcsw + ru.ru_nivcsw);
}

/* ---- usage ---- */

static void usage_full(void)
{
	printf(
"NAME\n"
"    " PROG " - the DSM's fault path, locks and barriers, in microseconds\n"
"\n"
"SYNOPSIS\n"
"    mpirun -n 2 " PROG " [--test LIST] [--pages N] [--reps N] [--min-time SEC]\n"
"        [--warmup N] [--iters N] [--device NAME] [--write-detect METHOD] [--seed N]\n"
"        [--json]\n"
"    mpirun -n 2 " PROG " --pm-read-baseline [--pages N] [--reps N] ... [--json]\n"
"\n"
"DESCRIPTION\n"
"    Measures libpmdsm between the two processes of a job started by any\n"
"    PMIx launcher (mpirun, srun --mpi=pmix, scrun).  Rank 1 measures and\n"
"    prints; rank 0 is the home of the pages rank 1 faults on and the\n"
"    manager of the remote lock, and follows rank 1's commands, which pass\n"
"    through a shared page and a barrier.  Only the part a test measures is\n"
"    timed: re-fetching pages, or the home making them stale, is not.\n"
"\n"
"TESTS (microseconds per operation)\n"
"    write-remote  rank 1 writes one word in each of N pages homed at rank 0\n"
"                  (valid in its cache), then releases with pmdsm_unlock() of\n"
"                  a lock managed by itself: per page, the write detection\n"
"                  (segv: a fault, a twin, mprotect; uffd-async: the kernel's\n"
"                  record, PAGEMAP_SCAN at the release, the twin refreshed;\n"
"                  uffd-wp: a fault taken by the library's thread, a twin,\n"
"                  the page armed again at the release),\n"
"                  the diff sent home and acknowledged.  Time / N.\n"
"    write-home    the same on N pages homed at rank 1, which rank 0 has\n"
"                  copied (read) at the start: write detection alone, no\n"
"                  twin, no diff.  (Pages no other rank copies are not\n"
"                  watched at all: writing them costs nothing.)\n"
"    read          rank 1 reads one word of each of N pages homed at rank 0\n"
"                  that rank 0 has written since (invalid in rank 1's\n"
"                  cache), in order: a sequential sweep, what it costs per\n"
"                  page with the DSM's read-ahead (a read fault fetches the\n"
"                  following pages too, in one pm_read of up to\n"
"                  PMDSM_READ_AHEAD pages).  Time / N.\n"
"    read-random   the same N pages in a random order (--seed), never one\n"
"                  page right after the one before, so that read-ahead never\n"
"                  starts: one read fault per page, the page fetched from its\n"
"                  home (pm_read of 4 KiB).  Time / N: the cost of one read\n"
"                  fault, the figure to hold against pm-read.\n"
"    lock          pmdsm_lock() + pmdsm_unlock() of a lock managed by rank 0\n"
"                  (a round trip), nothing written; rank 0 waits in a\n"
"                  barrier meanwhile.\n"
"    lock-local    the same with a lock managed by rank 1: no message, the\n"
"                  library's own cost (entering it, handing work to its\n"
"                  service thread and back, leaving it).\n"
"    barrier       pmdsm_barrier() on both ranks, nothing written.\n"
"    barrier-peer  pmdsm_barrier_with() on both ranks, each naming the\n"
"                  other (a barrier of a few, here of two: no manager, one\n"
"                  message each way), nothing written.\n"
"    first-touch   both ranks allocate 2N+1 pages with PMDSM_FIRST_TOUCH (no\n"
"                  message), then rank 1 reads one word of each of the N\n"
"                  pages whose home rank 0 decides (their manager, by the\n"
"                  page's place in the heap): per page a fault, the\n"
"                  question and its answer (a round trip), and the page\n"
"                  homed at rank 1 without a fetch.  Which N pages is found\n"
"                  untimed, by touching the last page first and looking at\n"
"                  the home_asks counter.  Both ranks then free the\n"
"                  allocation.  Time / N.\n"
"    all           the nine (the default).\n"
"\n"
"    --pm-read-baseline runs no DSM: each rank opens PM (pm.h) on the same\n"
"    device, rank 0 registers N pages, sends rank 1 their key and polls\n"
"    (pm_recv) until rank 1 is done, and rank 1 reads them one by one with\n"
"    pm_read() of 4 KiB into N pages of its own, waiting for each as the\n"
"    DSM's fetch does (pm_test(), pm_wait()).  Time / N: the read fault's\n"
"    baseline.  (PM has one context per process, so the baseline is its own\n"
"    invocation.)\n"
"\n"
"OPTIONS\n"
"    --test LIST     comma-separated tests, or all (default: all).\n"
"    --pages N       pages per batch of the page tests (default %u, at most\n"
"                    %u).\n"
"    --reps N        timed repetitions per test (default %d).\n"
"    --min-time SEC  how long one repetition's timed part should last; the\n"
"                    iteration count (batches of N pages, or operations) is\n"
"                    calibrated by doubling from 1 until it lasts SEC/4, then\n"
"                    scaled (default %.1f).\n"
"    --warmup N      iterations run before calibrating each test (default %d).\n"
"    --iters N       fixed iterations per repetition: no calibration.\n"
"    --device NAME   PM's device (pmdsm_attr.pm_device; default $PM_DEVICE,\n"
"                    else composite).\n"
"    --seed N        the order of read-random's pages (default %d); each batch\n"
"                    has its own order, drawn from this seed.\n"
"    --write-detect segv|uffd-async|uffd-wp\n"
"                    pmdsm_attr.write_detect (default: $PMDSM_WRITE_DETECT,\n"
"                    else the library's choice).  The method in use, as the\n"
"                    library says (pmdsm_write_detect()), is printed.\n"
"    --pm-read-baseline  the baseline above instead of the DSM tests.\n"
"    --json          one JSON object per test on standard output instead of\n"
"                    the table.\n"
"    --help          this text.\n"
"\n"
"VERIFICATION\n"
"    write-remote: after its repetitions rank 0 checks that every page it\n"
"    homes holds rank 1's last value (the diffs arrived).  read and\n"
"    read-random: rank 1 checks that every word it read is the value rank 0\n"
"    wrote.  first-touch: rank 1 checks that every page it touched first\n"
"    reads zero and is homed at rank 1.  pm-read: rank 1 checks the pages it\n"
"    read against rank 0's pattern.  The DSM's counters over the timed\n"
"    parts (faults, twins, diffs, pages fetched and read ahead,\n"
"    PAGEMAP_SCANs, questions for homes, per operation) are printed with\n"
"    the figures; a test whose counters say it did not do its\n"
"    work (no diff per page of write-remote, no page fetched per page of read\n"
"    and read-random, not one read fault per page of read-random, not one\n"
"    barrier of a few per barrier-peer, not one question and no fetch per\n"
"    page of first-touch) fails the run.\n"
"\n"
"ENVIRONMENT\n"
"    PMDSM_WRITE_DETECT, PMDSM_READ_AHEAD, PMDSM_HEAP_SIZE (docs/dsm/guide.md);\n"
"    PMDSM_PREFETCH is set to 0: prefetch at barriers would take the read\n"
"    tests' faults away.\n"
"    PM_DEVICE, PM_SPIN_US, PM_UDP_NICS, ... (docs/pm/knobs.md).\n"
"\n"
"EXIT STATUS\n"
"    0 success, 1 a failure (the DSM or PM failed, wrong process count, a\n"
"    check failed), 2 a bad command line.\n"
"\n"
"EXAMPLES\n"
"    mpirun -n 2 --bind-to core " PROG " --write-detect segv\n"
"    PMDSM_WRITE_DETECT=uffd-async mpirun -n 2 " PROG " --test write-remote --json\n"
"    mpirun -n 2 --bind-to core " PROG " --test read,read-random --device shm\n"
"    mpirun -n 2 " PROG " --pm-read-baseline --device shm\n"
"\n"
"SEE ALSO\n"
"    docs/dsm/bench.md, scripts/bench (make bench, suite dsm), pmbench(1),\n"
"    pmdsm-check(1)\n",
	       DEFAULT_PAGES, MAX_PAGES, DEFAULT_REPS, DEFAULT_MIN_T, DEFAULT_WARMUP,
	       DEFAULT_SEED);
}

/* ---- command line ---- */

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { O_TEST = 256, O_PAGES, O_DEVICE, O_WD, O_SEED, O_BASELINE, O_JSON };
	static const struct option longopts[] = {
		{ "test", required_argument, NULL, O_TEST },
		{ "pages", required_argument, NULL, O_PAGES },
		BENCH_LONGOPTS,
		{ "device", required_argument, NULL, O_DEVICE },
		{ "write-detect", required_argument, NULL, O_WD },
		{ "seed", required_argument, NULL, O_SEED },
		{ "pm-read-baseline", no_argument, NULL, O_BASELINE },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	bool any_test = false;
	uint64_t v;
	int c;

	memset(o, 0, sizeof(*o));
	o->pages = DEFAULT_PAGES;
	o->method.reps = DEFAULT_REPS;
	o->method.min_time = DEFAULT_MIN_T;
	o->method.warmup = DEFAULT_WARMUP;
	o->seed = DEFAULT_SEED;
	while ((c = bench_getopt(argc, argv, longopts, &o->method, MAX_ITERS)) != -1) {
		switch (c) {
		case O_TEST:
			if (!bench_parse_tests(optarg, test_names, T_COUNT, o->tests))
				bad_usage("--test: an empty list");
			any_test = true;
			break;
		case O_PAGES:
			if (!parse_u64(optarg, MAX_PAGES, &v) || v == 0)
				bad_usage("--pages: '%s' is not a count from 1 to %u", optarg,
					  MAX_PAGES);
			o->pages = (unsigned)v;
			break;
		case O_DEVICE:
			if (!*optarg)
				bad_usage("--device: an empty name");
			o->device = optarg;
			break;
		case O_WD:
			if (strcmp(optarg, "segv") == 0)
				o->wd = PMDSM_WRITE_SEGV;
			else if (strcmp(optarg, "uffd-async") == 0)
				o->wd = PMDSM_WRITE_UFFD_ASYNC;
			else if (strcmp(optarg, "uffd-wp") == 0)
				o->wd = PMDSM_WRITE_UFFD_WP;
			else
				bad_usage("--write-detect: unknown method '%s' (segv, uffd-async, "
					  "uffd-wp)",
					  optarg);
			break;
		case O_SEED:
			if (!parse_u64(optarg, UINT64_MAX, &o->seed))
				bad_usage("--seed: '%s' is not a number", optarg);
			break;
		case O_BASELINE:
			o->baseline = true;
			break;
		case O_JSON:
			o->json = true;
			break;
		}
	}
	if (o->baseline && (any_test || o->wd))
		bad_usage("--pm-read-baseline measures PM alone: no --test or --write-detect "
			  "with it");
	if (!any_test)
		for (int t = 0; t < T_COUNT; t++)
			o->tests[t] = true;
}

/* ---- the DSM's counters ---- */

#define STAT_FIELDS(X) \
	X(read_faults) X(write_faults) X(pages_fetched) X(fetch_bytes) X(twins) \
	X(diffs_sent) X(diff_bytes) X(diffs_applied) X(invalidations) X(barriers) \
	X(locks) X(lock_remote) X(wp_scans) X(dropped) \
	X(fault_ns) X(fetch_ns) X(release_ns) X(barrier_ns) X(lock_ns) X(read_ahead_pages) X(home_asks) \
	X(cold_pages) X(cold_writes) X(prefetch_overlapped) X(prefetch_waits) \
	X(peer_barriers) X(peer_barrier_ns)

static void stats_add_delta(struct pmdsm_stats *sum, const struct pmdsm_stats *a,
			    const struct pmdsm_stats *z)
{
#define X(f) sum->f += z->f - a->f;
	STAT_FIELDS(X)
#undef X
}

static void tally_add(struct tally *sum, const struct tally *t)
{
	struct pmdsm_stats zero = { 0 };

	sum->seconds += t->seconds;
	sum->csw += t->csw;
	stats_add_delta(&sum->st, &zero, &t->st);
}

/* A timed part: the clock, the DSM's counters and the context switches. */
struct timer {
	double t0;
	uint64_t csw0;
	struct pmdsm_stats st0;
};

/*
 * Before each timed batch of page reads (read, read-random and the
 * pm-read baseline alike), a quiet pause: on a rate-limited link (the
 * virtual cluster's --rate, a tbf whose burst is 4 ms of the rate) the
 * token bucket then starts every batch full, for the DSM's fetches as for
 * the baseline's reads, which would otherwise meet the link in whatever
 * state the untimed work between batches left it.
 */
#define QUIET_BEFORE_READS_NS 5000000L

static void quiet_pause(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = QUIET_BEFORE_READS_NS };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static void timer_start(const struct bench *b, struct timer *tm)
{
	if (!b->opt.baseline)
		call(pmdsm_stats_get(&tm->st0, sizeof(tm->st0)), "pmdsm_stats_get");
	tm->csw0 = ctxsw();
	tm->t0 = now_s();
}

static void timer_stop(const struct bench *b, const struct timer *tm, struct tally *t)
{
	double t1 = now_s();
	uint64_t csw1 = ctxsw();
	struct pmdsm_stats st1 = { 0 };

	t->seconds += t1 - tm->t0;
	t->csw += csw1 - tm->csw0;
	if (!b->opt.baseline) {
		call(pmdsm_stats_get(&st1, sizeof(st1)), "pmdsm_stats_get");
		stats_add_delta(&t->st, &tm->st0, &st1);
	}
}

/* ---- the DSM: the pages and the commands ---- */

static inline volatile uint64_t *word_of(const struct bench *b, unsigned page)
{
	/* A different word of each page, as an application's data would be. */
	return (volatile uint64_t *)(b->data + (size_t)page * PAGE) + (page * 67u) % (PAGE / 8);
}

static void send_cmd(struct bench *b, enum cmd c, enum test t, uint64_t units, uint64_t seq)
{
	b->ctl->cmd = c;
	b->ctl->test = t;
	b->ctl->units = units;
	b->ctl->seq = seq;
	call(pmdsm_barrier(), "pmdsm_barrier");
}

/* Rank 1: make pages [first, first + n) valid here (untimed). */
static void touch(const struct bench *b, unsigned first, unsigned n)
{
	uint64_t s = 0;

	for (unsigned i = first; i < first + n; i++)
		s += *word_of(b, i);
	g_sink += s;
}

/* Rank 1, write-remote and write-home: units batches, each writing one word
 * of each page and releasing with a lock of its own that is new in this
 * epoch (the command's barrier began one). */
static void write_batches(struct bench *b, unsigned first, uint64_t units, struct tally *t)
{
	for (uint64_t u = 0; u < units; u++) {
		unsigned l = LOCAL_LOCK + 2u * (unsigned)u;
		uint64_t v = ++b->seq;
		struct timer tm;

		touch(b, first, b->pages);
		call(pmdsm_lock(l), "pmdsm_lock");
		timer_start(b, &tm);
		for (unsigned i = first; i < first + b->pages; i++)
			*word_of(b, i) = v;
		call(pmdsm_unlock(l), "pmdsm_unlock");
		timer_stop(b, &tm, t);
	}
}

/* splitmix64: read-random's order, reproducible from --seed. */
static uint64_t next_random(uint64_t *state)
{
	uint64_t x = (*state += 0x9e3779b97f4a7c15ull);

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#define NONE UINT32_MAX

/* Would the DSM see page order[i] as the next of a sequential sweep? */
static bool follows(const struct bench *b, unsigned i)
{
	uint32_t before = i ? b->order[i - 1] : b->last;

	return before != NONE && b->order[i] == before + 1;
}

/* Rank 1, read-random: the order of the next batch (untimed).  A random
 * permutation of the pages in which no page comes right after the page
 * before it (the last of the previous batch for the first), so that the
 * DSM's read-ahead, which grows only on such a fault, never starts and
 * every page is its own read fault.  There is one for 3 pages or more. */
static void random_order(struct bench *b)
{
	unsigned n = b->pages;

	for (unsigned i = 0; i < n; i++)
		b->order[i] = i;
	for (unsigned i = n - 1; i > 0; i--) {
		unsigned j = (unsigned)(next_random(&b->rng) % (i + 1));
		uint32_t t = b->order[i];

		b->order[i] = b->order[j];
		b->order[j] = t;
	}
	for (int pass = 0; pass < 1000; pass++) {
		bool clean = true;

		for (unsigned i = 0; i < n; i++) {
			if (!follows(b, i))
				continue;
			unsigned j = (unsigned)(next_random(&b->rng) % n);
			uint32_t t = b->order[i];

			b->order[i] = b->order[j];
			b->order[j] = t;
			clean = false;
		}
		if (clean)
			break;
	}
	b->last = b->order[n - 1];
}

/* Rank 1, read and read-random: one batch; rank 0 has written every page
 * it homes with b->seq, and the command's barrier told rank 1 so. */
static void read_batch(struct bench *b, enum test test, uint64_t expect, struct tally *t)
{
	static uint64_t got[MAX_PAGES];
	struct timer tm;

	if (test == T_READ_RANDOM) {
		random_order(b);
		quiet_pause();
		timer_start(b, &tm);
		for (unsigned i = 0; i < b->pages; i++)
			got[b->order[i]] = *word_of(b, b->order[i]);
		timer_stop(b, &tm, t);
	} else {
		quiet_pause();
		timer_start(b, &tm);
		for (unsigned i = 0; i < b->pages; i++)
			got[i] = *word_of(b, i);
		timer_stop(b, &tm, t);
	}
	for (unsigned i = 0; i < b->pages; i++)
		if (got[i] != expect)
			die("%s: word %u of page %u (homed at rank 0) is %" PRIu64 ", rank 0 "
			    "wrote %" PRIu64 " before the barrier", test_names[test],
			    (unsigned)((i * 67u) % (PAGE / 8)), i, got[i], expect);
}

/* first-touch: each batch's allocation, 2 x pages + 1 pages, made by both
 * ranks alike. */
static uint8_t *first_touch_alloc(const struct bench *b)
{
	size_t bytes = (2 * (size_t)b->pages + 1) * PAGE;
	uint8_t *a = pmdsm_alloc(bytes, PMDSM_FIRST_TOUCH);

	if (!a)
		die("pmdsm_alloc of %zu bytes (first touch): %s", bytes, strerror(errno));
	return a;
}

static uint64_t home_asks(void)
{
	struct pmdsm_stats st = { 0 };

	call(pmdsm_stats_get(&st, sizeof(st)), "pmdsm_stats_get");
	return st.home_asks;
}

/* Rank 1, first-touch: units batches, each on a fresh allocation that rank
 * 0 makes and frees in step (serve()).  The managers alternate page by
 * page, so touching the last page (untimed) tells by the home_asks counter
 * whether rank 0 manages the pages of its parity or the others. */
static void first_touch_batches(struct bench *b, uint64_t units, struct tally *t)
{
	for (uint64_t u = 0; u < units; u++) {
		uint8_t *a = first_touch_alloc(b);
		uint64_t asks0 = home_asks();
		const unsigned probe = 2 * b->pages;

		g_sink += *(volatile uint64_t *)(a + (size_t)probe * PAGE);

		unsigned parity = home_asks() - asks0 == 1 ? 0 : 1;
		struct timer tm;
		uint64_t s = 0;

		timer_start(b, &tm);
		for (unsigned i = 0; i < b->pages; i++)
			s += *(volatile uint64_t *)(a + (size_t)(2 * i + parity) * PAGE);
		timer_stop(b, &tm, t);
		for (unsigned i = 0; i < b->pages; i++) {
			int home = pmdsm_home(a + (size_t)(2 * i + parity) * PAGE);

			if (home != 1)
				die("first-touch: page %u of the allocation, touched first by rank 1, "
				    "is homed at %d", 2 * i + parity, home);
		}
		if (s)
			die("first-touch: a page touched first reads %" PRIu64 ", not zero", s);
		call(pmdsm_free(a), "pmdsm_free");
	}
}

/* Rank 0, first-touch: the same allocations, freed when rank 1 is done. */
static void first_touch_serve(const struct bench *b, uint64_t units)
{
	for (uint64_t u = 0; u < units; u++)
		call(pmdsm_free(first_touch_alloc(b)), "pmdsm_free");
}

/* Both ranks, barrier and barrier-peer: units barriers of the test's kind,
 * of all or of the two ranks (each naming the other). */
static void barriers(const struct bench *b, enum test test, uint64_t units)
{
	const int peer = 1 - b->rank;

	for (uint64_t u = 0; u < units; u++)
		if (test == T_BARRIER_PEER)
			call(pmdsm_barrier_with(&peer, 1), "pmdsm_barrier_with");
		else
			call(pmdsm_barrier(), "pmdsm_barrier");
}

/* Rank 1: one command of units units of test t; the timed parts go to t. */
static void step(struct bench *b, enum test test, uint64_t units, struct tally *t)
{
	struct timer tm;

	switch (test) {
	case T_WRITE_REMOTE:
	case T_WRITE_HOME:
		send_cmd(b, CMD_RUN, test, units, 0);
		write_batches(b, test == T_WRITE_REMOTE ? 0 : b->pages, units, t);
		break;
	case T_READ:
	case T_READ_RANDOM:
		/* Rank 0 writes its pages between the two barriers. */
		send_cmd(b, CMD_RUN, test, units, ++b->seq);
		call(pmdsm_barrier(), "pmdsm_barrier");
		read_batch(b, test, b->seq, t);
		break;
	case T_LOCK:
	case T_LOCK_LOCAL: {
		unsigned l = test == T_LOCK ? REMOTE_LOCK : LOCAL_LOCK;

		send_cmd(b, CMD_RUN, test, units, 0);
		timer_start(b, &tm);
		for (uint64_t u = 0; u < units; u++) {
			call(pmdsm_lock(l), "pmdsm_lock");
			call(pmdsm_unlock(l), "pmdsm_unlock");
		}
		timer_stop(b, &tm, t);
		break;
	}
	case T_BARRIER:
	case T_BARRIER_PEER:
		send_cmd(b, CMD_RUN, test, units, 0);
		timer_start(b, &tm);
		barriers(b, test, units);
		timer_stop(b, &tm, t);
		break;
	case T_FIRST_TOUCH:
		send_cmd(b, CMD_RUN, test, units, 0);
		first_touch_batches(b, units, t);
		break;
	default:
		die("internal error: test %d", test);
	}
	/* The end of the command: rank 0 waits here meanwhile. */
	call(pmdsm_barrier(), "pmdsm_barrier");
}

static uint64_t step_max(enum test t)
{
	switch (t) {
	case T_WRITE_REMOTE:
	case T_WRITE_HOME:
		return WRITE_STEP_MAX;
	case T_READ:
	case T_READ_RANDOM:
		return 1;
	default:
		return LOOP_STEP_MAX;
	}
}

static bool page_test(enum test t)
{
	return t == T_WRITE_REMOTE || t == T_WRITE_HOME || t == T_READ || t == T_READ_RANDOM ||
	       t == T_FIRST_TOUCH || t == T_PM_READ;
}

static uint64_t ops_per_unit(const struct bench *b, enum test t)
{
	return page_test(t) ? b->pages : 1;
}

/* Rank 0: serve rank 1's commands until it says quit. */
static void serve(struct bench *b)
{
	for (;;) {
		call(pmdsm_barrier(), "pmdsm_barrier");

		struct ctl c = { .cmd = b->ctl->cmd, .test = b->ctl->test, .units = b->ctl->units,
				 .seq = b->ctl->seq };

		if (c.cmd == CMD_QUIT)
			return;
		if (c.cmd == CMD_CHECK) {
			/* write-remote's diffs arrived: every page holds the last value. */
			for (unsigned i = 0; i < b->pages; i++)
				if (*word_of(b, i) != c.seq)
					die("write-remote: word %u of page %u (homed here) is %" PRIu64
					    ", rank 1's last write was %" PRIu64 ": a diff was lost",
					    (unsigned)((i * 67u) % (PAGE / 8)), i, *word_of(b, i),
					    c.seq);
		} else if (c.cmd != CMD_RUN || c.test >= T_COUNT) {
			die("protocol error: command %u, test %u", c.cmd, c.test);
		} else if (c.test == T_READ || c.test == T_READ_RANDOM) {
			for (unsigned i = 0; i < b->pages; i++)
				*word_of(b, i) = c.seq;
			call(pmdsm_barrier(), "pmdsm_barrier");
		} else if (c.test == T_BARRIER || c.test == T_BARRIER_PEER) {
			barriers(b, c.test, c.units);
		} else if (c.test == T_FIRST_TOUCH) {
			first_touch_serve(b, c.units);
		}
		/* Others: rank 1 works alone; this rank answers it from the
		 * barrier that ends the command. */
		call(pmdsm_barrier(), "pmdsm_barrier");
	}
}

/* ---- the baseline: pm_read alone ---- */

static void pm_die(const char *what, int err)
{
	die("%s: %s", what, pm_strerror(err));
}

/* Rank 1: pm_read page i of rank 0's region into page i of ours, one at a
 * time, each waited for as the DSM's fetch waits (dsm/src/fault.c). */
static void pm_read_batch(struct bench *b, struct tally *t)
{
	struct timer tm;

	quiet_pause();
	timer_start(b, &tm);
	for (unsigned i = 0; i < b->pages; i++) {
		struct pm_op op;
		int err;

		while ((err = pm_read(b->pm, 0, b->region + (size_t)i * PAGE, PAGE, b->peer_key,
				      (uint64_t)i * PAGE, &op)) == -EAGAIN)
			pm_wait(b->pm, 10);
		if (err)
			pm_die("pm_read", err);
		while (!pm_test(b->pm, &op))
			if (!pm_test(b->pm, &op))
				pm_wait(b->pm, 100);
		if (op.status)
			pm_die("pm_read completion", op.status);
	}
	timer_stop(b, &tm, t);
}

static uint8_t pattern(unsigned i)
{
	return (uint8_t)(i * 131u + (i >> 8) + 7u);
}

/* ---- measuring (rank 1) ---- */

/* units iterations of test, in steps; the timed parts go to t. */
static void run_units(struct bench *b, enum test test, uint64_t units, struct tally *t)
{
	if (test == T_PM_READ) {
		for (uint64_t u = 0; u < units; u++)
			pm_read_batch(b, t);
		return;
	}
	while (units) {
		uint64_t n = units < step_max(test) ? units : step_max(test);

		step(b, test, n, t);
		units -= n;
	}
}

/* What bench_calibrate() times: the timed parts of units of one test. */
struct units_arg {
	struct bench *b;
	enum test test;
};

static double timed_units(void *arg, uint64_t iters)
{
	struct units_arg *a = arg;
	struct tally t = { 0 };

	run_units(a->b, a->test, iters, &t);
	return t.seconds;
}

static uint64_t calibrate(struct bench *b, enum test test)
{
	struct units_arg a = { .b = b, .test = test };

	return bench_calibrate(&b->opt.method, MAX_ITERS, timed_units, &a);
}

static void measure(struct bench *b, enum test test, struct result *r)
{
	const struct bench_method *m = &b->opt.method;

	memset(r, 0, sizeof(*r));
	r->test = test;
	if (m->warmup) {
		struct tally t = { 0 };

		run_units(b, test, m->warmup, &t);
	}
	r->iters = m->iters ? m->iters : calibrate(b, test);
	r->ops = r->iters * ops_per_unit(b, test);
	for (int i = 0; i < m->reps; i++) {
		struct tally t = { 0 };

		run_units(b, test, r->iters, &t);
		r->v[i] = t.seconds / (double)r->ops * 1e6;
		tally_add(&r->t, &t);
	}
	r->total_ops = r->ops * (uint64_t)m->reps;
	bench_summarise(r->v, m->reps, &r->median, &r->min, &r->max);
}

/* Did the test do its work?  Checked on the DSM's counters. */
static void check_work(const struct bench *b, const struct result *r)
{
	const struct pmdsm_stats *s = &r->t.st;
	uint64_t n = r->total_ops;

	switch (r->test) {
	case T_WRITE_REMOTE:
		if (s->diffs_sent != n)
			die("write-remote: %" PRIu64 " diffs for %" PRIu64 " pages written (one "
			    "each expected: are the first %u pages not homed at rank 0?)",
			    s->diffs_sent, n, b->pages);
		if (s->pages_fetched)
			die("write-remote: %" PRIu64 " pages fetched in the timed part (the pages "
			    "should have stayed valid)", s->pages_fetched);
		break;
	case T_WRITE_HOME:
		if (s->diffs_sent || s->twins)
			die("write-home: %" PRIu64 " diffs and %" PRIu64 " twins for pages homed "
			    "here", s->diffs_sent, s->twins);
		break;
	case T_READ:
		if (s->pages_fetched != n)
			die("read: %" PRIu64 " pages fetched for %" PRIu64 " pages read",
			    s->pages_fetched, n);
		break;
	case T_READ_RANDOM:
		if (s->pages_fetched != n)
			die("read-random: %" PRIu64 " pages fetched for %" PRIu64 " pages read",
			    s->pages_fetched, n);
		if (s->read_faults != n && b->pages >= 3)
			die("read-random: %" PRIu64 " read faults for %" PRIu64 " pages read (one "
			    "each expected: the DSM read ahead %" PRIu64 " pages)", s->read_faults, n,
			    s->read_ahead_pages);
		break;
	case T_BARRIER_PEER:
		if (s->peer_barriers != n || s->barriers)
			die("barrier-peer: %" PRIu64 " barriers of a few and %" PRIu64 " of all for "
			    "%" PRIu64 " (one of a few each expected)", s->peer_barriers, s->barriers,
			    n);
		break;
	case T_FIRST_TOUCH:
		if (s->home_asks != n || s->pages_fetched || s->read_faults)
			die("first-touch: %" PRIu64 " questions to rank 0, %" PRIu64 " pages fetched "
			    "and %" PRIu64 " read faults for %" PRIu64 " pages touched first (one "
			    "question each, no fetch expected)", s->home_asks, s->pages_fetched,
			    s->read_faults, n);
		break;
	default:
		break;
	}
}

/* ---- output ---- */

static double per(uint64_t x, uint64_t n)
{
	return n ? (double)x / (double)n : 0.0;
}

static void print_json(const struct bench *b, const struct result *r)
{
	FILE *f = stdout;
	const struct bench_method *m = &b->opt.method;
	const struct pmdsm_stats *s = &r->t.st;
	uint64_t n = r->total_ops;

	fprintf(f, "{\"test\":\"%s\",\"write_detect\":", test_names[r->test]);
	if (r->test == T_PM_READ)
		fputs("null", f);
	else
		json_string(f, b->write_detect);
	fputs(",\"device\":", f);
	json_string(f, b->device);
	fputs(",\"peer_device\":", f);
	if (b->pm && pm_peer_device(b->pm, 0))
		json_string(f, pm_peer_device(b->pm, 0));
	else
		fputs("null", f);
	fprintf(f, ",\"op\":\"%s\",\"pages\":", op_names[r->test]);
	if (page_test(r->test))
		fprintf(f, "%u", b->pages);
	else
		fputs("null", f);
	fprintf(f, ",\"iterations\":%" PRIu64 ",\"ops_per_rep\":%" PRIu64
		",\"reps\":%d,\"warmup\":%" PRIu64 ",\"min_time_s\":%g,\"us_per_op\":{\"median\":%.4f,"
		"\"min\":%.4f,\"max\":%.4f,\"samples\":[", r->iters, r->ops, m->reps,
		m->warmup, m->min_time, fin(r->median), fin(r->min), fin(r->max));
	for (int i = 0; i < m->reps; i++)
		fprintf(f, "%s%.4f", i ? "," : "", fin(r->v[i]));
	fprintf(f, "]},\"ctxsw_per_op\":%.4f", per(r->t.csw, n));
	if (r->test != T_PM_READ) {
		fputs(",\"per_op\":{", f);
		bool first = true;
#define X(fl) fprintf(f, "%s\"" #fl "\":%.4f", first ? "" : ",", per(s->fl, n)); first = false;
		STAT_FIELDS(X)
#undef X
		fputc('}', f);
	}
	fputs(",\"verified\":true,\"pmdsm_version\":", f);
	json_string(f, pmdsm_version());
	fputs(",\"pm_version\":", f);
	json_string(f, pm_version());
	fputs("}\n", f);
	fflush(f);
}

static void print_header(const struct bench *b)
{
	const struct bench_method *m = &b->opt.method;

	if (b->opt.baseline)
		printf("# %s: PM's remote read of 4 KiB alone (pm_read, pm_test, pm_wait), "
		       "device %s (rank 0 via %s), %u pages per batch, min-time %g s, %d reps, "
		       "warm-up %" PRIu64 "\n", PROG, b->device,
		       pm_peer_device(b->pm, 0) ? pm_peer_device(b->pm, 0) : "?", b->pages,
		       m->min_time, m->reps, m->warmup);
	else
		printf("# %s: libpmdsm %s, write detection %s, device %s, %u pages per batch, "
		       "min-time %g s, %d reps, warm-up %" PRIu64 "\n", PROG, pmdsm_version(),
		       b->write_detect, b->device, b->pages, m->min_time, m->reps, m->warmup);
	printf("# microseconds per operation; per op: faults (read+write), twins, diffs, "
	       "pages fetched, of them read ahead, PAGEMAP_SCANs, questions for a first-touch "
	       "page's home, context switches\n"
	       "%-13s %-12s %9s %10s %10s %10s %6s %6s %6s %6s %6s %6s %6s %6s\n",
	       "test", "op", "iters", "median_us", "min_us", "max_us", "faults", "twins",
	       "diffs", "fetch", "ahead", "scans", "asks", "ctxsw");
	fflush(stdout);
}

static void print_row(const struct bench *b, const struct result *r)
{
	const struct pmdsm_stats *s = &r->t.st;
	uint64_t n = r->total_ops;

	printf("%-13s %-12s %9" PRIu64 " %10.3f %10.3f %10.3f ", test_names[r->test],
	       op_names[r->test], r->iters, r->median, r->min, r->max);
	if (b->opt.baseline)
		/* No DSM: its counters mean nothing here. */
		printf("%6s %6s %6s %6s %6s %6s %6s %6.2f\n", "-", "-", "-", "-", "-", "-", "-",
		       per(r->t.csw, n));
	else
		printf("%6.2f %6.2f %6.2f %6.2f %6.2f %6.3f %6.2f %6.2f\n",
		       per(s->read_faults + s->write_faults, n), per(s->twins, n),
		       per(s->diffs_sent, n), per(s->pages_fetched, n),
		       per(s->read_ahead_pages, n), per(s->wp_scans, n), per(s->home_asks, n),
		       per(r->t.csw, n));
	fflush(stdout);
}

static void report(struct bench *b, struct result *r)
{
	if (b->opt.json)
		print_json(b, r);
	else
		print_row(b, r);
}

/* ---- main ---- */

static void *alloc_pages(unsigned n)
{
	size_t len = (size_t)n * PAGE;
	void *p = aligned_alloc(PAGE, len);

	if (!p)
		die("cannot allocate %zu bytes", len);
	memset(p, 0, len);      /* faulted in now, not timed */
	return p;
}

static int run_baseline(struct bench *b)
{
	struct pm_open_attr attr = { .device = b->opt.device };
	int err = pm_open(&b->pm, &attr);

	if (err) {
		if (launcher_rank0() || err != -ENODEV)
			fprintf(stderr, PROG ": cannot open PM%s%s%s: %s\n",
				b->opt.device ? " device '" : "", b->opt.device ? b->opt.device : "",
				b->opt.device ? "'" : "", pm_strerror(err));
		return 1;
	}
	b->rank = bench_rank = pm_rank(b->pm);
	if (pm_size(b->pm) != 2) {
		if (b->rank == 0)
			fprintf(stderr, PROG " needs 2 processes, this job has %d: mpirun -n 2 "
				PROG " ...\n", pm_size(b->pm));
		pm_close(b->pm);
		return 1;
	}
	b->region = alloc_pages(b->pages);

	struct pm_msg m;

	if (b->rank == 0) {
		/* The home: N pages with a pattern, registered; their key to rank 1. */
		for (unsigned i = 0; i < b->pages; i++)
			memset(b->region + (size_t)i * PAGE, pattern(i), PAGE);
		err = pm_mr_register(b->pm, b->region, (size_t)b->pages * PAGE, &b->mr);
		if (err)
			pm_die("pm_mr_register", err);

		void *buf;
		uint64_t key = pm_mr_key(b->mr);

		while ((err = pm_send_buffer(b->pm, 1, sizeof(key), &buf)) == -EAGAIN)
			pm_wait(b->pm, 100);
		if (err)
			pm_die("pm_send_buffer", err);
		memcpy(buf, &key, sizeof(key));
		if ((err = pm_send(b->pm, 1, sizeof(key))))
			pm_die("pm_send", err);
		/* Serve (on a network device the remote reads are answered by
		 * whoever progresses the context) until rank 1's word, polling
		 * all the while: PM at its best, never woken for a read (as a
		 * DSM home that waits in a barrier polls, comm.c). */
		while ((err = pm_recv(b->pm, &m)) == -EAGAIN)
			;
		if (err)
			pm_die("pm_recv", err);
		pm_release(b->pm, &m);
	} else {
		while ((err = pm_recv(b->pm, &m)) == -EAGAIN) {
			int w = pm_wait(b->pm, 1000);

			if (w && w != -ETIMEDOUT)
				pm_die("pm_wait", w);
		}
		if (err)
			pm_die("pm_recv", err);
		if (m.len != sizeof(b->peer_key))
			die("protocol error: a key of %zu bytes", m.len);
		memcpy(&b->peer_key, m.data, sizeof(b->peer_key));
		pm_release(b->pm, &m);

		struct result r;

		if (!b->opt.json)
			print_header(b);
		memset(b->region, 0, (size_t)b->pages * PAGE);
		measure(b, T_PM_READ, &r);
		for (unsigned i = 0; i < b->pages; i++)
			for (unsigned k = 0; k < PAGE; k++)
				if (b->region[(size_t)i * PAGE + k] != pattern(i))
					die("pm-read: byte %u of page %u is 0x%02x, expected 0x%02x", k,
					    i, b->region[(size_t)i * PAGE + k], pattern(i));
		report(b, &r);

		void *buf;

		while ((err = pm_send_buffer(b->pm, 0, 1, &buf)) == -EAGAIN)
			pm_wait(b->pm, 100);
		if (err)
			pm_die("pm_send_buffer", err);
		*(uint8_t *)buf = 'q';
		if ((err = pm_send(b->pm, 0, 1)))
			pm_die("pm_send", err);
	}
	/* As pmbench: rank 1's word is the last; it quiesces so that it is
	 * delivered, and does not fail when rank 0 has gone already. */
	err = pm_quiesce(b->pm);
	if (err && !(b->rank == 1 && (err == -ETIMEDOUT || err == -ECONNRESET || err == -EPIPE)))
		pm_die("pm_quiesce", err);
	if (b->mr)
		pm_mr_deregister(b->pm, b->mr);
	pm_close(b->pm);
	free(b->region);
	return 0;
}

static int run_dsm(struct bench *b)
{
	struct pmdsm_attr attr = { .write_detect = b->opt.wd, .pm_device = b->opt.device };

	/* The read tests measure read faults: a barrier's prefetch would
	 * fetch the pages before them (docs/dsm/design.md). */
	setenv("PMDSM_PREFETCH", "0", 1);

	int err = pmdsm_init(&attr);

	if (err) {
		if (launcher_rank0() || err != -ENODEV)
			fprintf(stderr, PROG ": cannot open the DSM: %s\n", pmdsm_strerror(err));
		return 1;
	}
	b->rank = bench_rank = pmdsm_rank();
	if (pmdsm_size() != 2) {
		if (b->rank == 0)
			fprintf(stderr, PROG " needs 2 processes, this job has %d: mpirun -n 2 "
				PROG " ...\n", pmdsm_size());
		pmdsm_finalize();
		return 1;
	}
	/* Block placement: pages [0, N) homed at rank 0, [N, 2N) at rank 1;
	 * the command page (the second of two) at rank 1. */
	b->data = pmdsm_alloc((size_t)2 * b->pages * PAGE, PMDSM_BLOCK);
	uint8_t *ctl = pmdsm_alloc(2 * PAGE, PMDSM_BLOCK);

	if (!b->data || !ctl)
		die("pmdsm_alloc: %s", strerror(errno));
	b->ctl = (volatile struct ctl *)(ctl + PAGE);
	b->rng = b->opt.seed;
	b->last = NONE;
	b->order = calloc(b->pages, sizeof(*b->order));
	if (!b->order)
		die("cannot allocate %u words", b->pages);
	/* Rank 0 copies the pages rank 1 homes, once: rank 1 then watches its
	 * writes to them, which write-home measures (a page that no other rank
	 * copies costs its home nothing).  Rank 1's release at the second
	 * barrier finds them copied. */
	if (b->rank == 0)
		touch(b, b->pages, b->pages);
	call(pmdsm_barrier(), "pmdsm_barrier");
	call(pmdsm_barrier(), "pmdsm_barrier");
	if (b->rank == 0) {
		serve(b);
	} else {
		b->write_detect = pmdsm_write_detect();
		if (!b->opt.json)
			print_header(b);
		for (int t = 0; t < T_COUNT; t++) {
			struct result r;

			if (!b->opt.tests[t])
				continue;
			measure(b, (enum test)t, &r);
			check_work(b, &r);
			if (t == T_WRITE_REMOTE) {
				/* Rank 0 checks its pages, then the command ends. */
				send_cmd(b, CMD_CHECK, (enum test)t, 0, b->seq);
				call(pmdsm_barrier(), "pmdsm_barrier");
			}
			report(b, &r);
		}
		send_cmd(b, CMD_QUIT, 0, 0, 0);
	}
	call(pmdsm_finalize(), "pmdsm_finalize");
	free(b->order);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };

	parse_options(argc, argv, &b.opt);
	b.pages = b.opt.pages;
	b.device = b.opt.device ? b.opt.device : getenv("PM_DEVICE");
	if (!b.device || !*b.device)
		b.device = "composite";
	return b.opt.baseline ? run_baseline(&b) : run_dsm(&b);
}
