/* SPDX-License-Identifier: MIT */
/*
 * pmbench - PM point-to-point benchmark: ping-pong latency, one-way stream
 * bandwidth and bidirectional bandwidth between two processes of one job.
 *
 * Methodology after Hpcbench (seed 002, sections 3.4-3.6): a warm-up, an
 * automatic iteration count per size (doubling until a batch lasts a quarter
 * of --min-time, then scaling), --reps timed repetitions reported as median,
 * min and max, and system counters from /proc/stat and getrusage() sampled
 * on both ranks around the repetitions of every size.  pmdsm-bench measures
 * the same way: the method's options, calibration and summary are in
 * bench_method.h.
 *
 * Rank 0 measures, decides and prints; rank 1 serves the commands rank 0
 * sends it in PM messages (there is no second channel: control and data
 * share the ordered per-pair message stream, and each side always knows
 * which kind it expects next).
 *
 * Data paths, per size:
 *   ring  size <= pm_max_message(): pm_send_buffer(), memcpy of the payload
 *         from a source buffer into the send buffer, pm_send(); the receiver
 *         reads the message in place and pm_release()s it.
 *   rma   larger: pm_write() of the payload into the region the peer
 *         registered at start, then a small notification message.
 *
 * See docs/pm/bench.md.
 */
#include "pm.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PROG "pmbench"

/* The synopsis; bench_method.h's bad_usage() prints it. */
static const char short_usage[] =
	"Usage: " PROG " [--device shm|composite|udp]\n"
	"               [--test pingpong|stream|bidir|atomic|all]\n"
	"               [--sizes LIST] [--reps N] [--min-time SEC] [--warmup N]\n"
	"               [--iters N] [--recv none|read|copy] [--json] [--help]\n"
	"Run it with two processes: mpirun -n 2 " PROG " ...\n";

#include "bench_method.h"

#define MAX_SIZE        (1ul << 30)     /* largest --sizes value */
#define MAX_SIZES       256
#define MAX_ITERS       (1ull << 32)
#define DEFAULT_REPS    5
#define DEFAULT_MIN_T   0.1
#define DEFAULT_WARMUP  20
#define SPIN_POLLS      256             /* pm_recv() polls before pm_wait() */
#define WAIT_MS         1000            /* one pm_wait() */
#define STALL_S         20.0            /* silence that fails the run */

#define CTL_MAGIC       0x504d4243u     /* "PMBC" */
#define NOTE_MAGIC      0x504d424eu     /* "PMBN" */
#define CREDIT_MAGIC    0x504d4252u     /* "PMBR": the receive region is free again */

enum test { T_PINGPONG, T_STREAM, T_BIDIR, T_ATOMIC, T_COUNT };
static const char *const test_names[T_COUNT] = { "pingpong", "stream", "bidir", "atomic" };

enum path { P_RING, P_RMA };
static const char *const path_names[] = { "ring", "rma" };

enum op {
	OP_HELLO = 1,   /* a: largest size, b: rkey, c: max message, d: region bytes */
	OP_RUN,         /* a: test, b: size, c: iterations, d: flags */
	OP_READY,       /* the partner is set up for the batch: start the clock */
	OP_ACK,         /* the partner took every message of the batch */
	OP_SAMPLE,      /* take the "before" system sample */
	OP_REPORT,      /* take the "after" sample and send the deltas */
	OP_DELTAS,      /* rank 1's deltas (struct sys_delta follows) */
	OP_QUIT,        /* rank 0 is done */
	OP_BYE,         /* rank 1 saw it: both may close */
};

enum run_flags {
	RUN_RMA = 1u << 0,          /* payloads go through remote memory */
	RUN_CHECK_FIRST = 1u << 1,  /* verify the first message of the batch */
	RUN_CHECK_LAST = 1u << 2,   /* verify the last message of the batch */
	RUN_RECV_READ = 1u << 3,    /* the receiver reads every payload in place */
	RUN_RECV_COPY = 1u << 4,    /* the receiver copies ring payloads out */
	RUN_CREDIT = 1u << 5,       /* rma: one credit per payload (see send_data) */
};

struct ctl {
	uint32_t magic;
	uint32_t op;
	uint64_t a, b, c, d;
};

/* The notification that follows a pm_write() of a payload. */
struct note {
	uint32_t magic;
	uint32_t _pad;
	uint64_t len;
	uint64_t seq;
};

/* System counters of one rank between two samples. */
struct sys_delta {
	double wall_s;
	int32_t cpu_id;                 /* the CPU the rank is pinned to, -1 none */
	uint32_t _pad;
	uint64_t busy, user, sys, total; /* jiffies of cpu_id (or all CPUs) */
	uint64_t ctxt, intr;            /* node-wide, from /proc/stat */
	uint64_t utime_us, stime_us;    /* this process, from getrusage() */
	uint64_t nvcsw, nivcsw;
};

struct sys_sample {
	struct timespec when;
	int cpu_id;
	uint64_t busy, user, sys, total, ctxt, intr;
	struct rusage ru;
};

/* What the receiver does with a payload before releasing it. */
enum recv_mode { RECV_NONE, RECV_READ, RECV_COPY };
static const char *const recv_names[] = { "none", "read", "copy" };

struct options {
	const char *device;
	bool tests[T_COUNT];
	size_t sizes[MAX_SIZES];
	int nsizes;
	struct bench_method method;     /* --reps, --min-time, --warmup, --iters */
	bool json;
	enum recv_mode recv;
};

struct bench {
	pm_context_t *ctx;
	int rank, peer;
	struct options opt;
	size_t max_msg;                 /* smallest of both ranks' pm_max_message() */
	size_t buf_len;                 /* the largest size of the run */
	uint8_t *src;                   /* our payload pattern */
	uint8_t *expect;                /* the partner's payload pattern */
	uint8_t *dst;                   /* --recv copy target */
	uint8_t *region;                /* where the partner pm_write()s */
	pm_mr_t *mr;
	uint64_t peer_key;
	size_t peer_region;
	size_t pattern_size;            /* size the patterns are made for */
	struct pm_msg held;             /* last message, kept for a late check */
	bool holding;
	uint64_t seq_out, seq_in;       /* rma notifications */
	uint64_t atomic_next;           /* atomic: the old value the next fetch-add
					   must see (0: not known yet) */
	bool atomic_known;
	uint64_t credits;               /* RUN_CREDIT: payloads we may write now */
	unsigned stalled;               /* pm_wait() timeouts in a row */
	const char *doing;              /* for error messages */
	struct sys_sample before;
};

/* ---- errors (die(): bench_method.h) ---- */

static void die_pm(const char *what, int err)
{
	die("%s: %s", what, pm_strerror(err));
}

/* ---- usage ---- */

static void usage_full(void)
{
	printf(
"NAME\n"
"    " PROG " - PM point-to-point latency and bandwidth benchmark\n"
"\n"
"SYNOPSIS\n"
"    mpirun -n 2 " PROG " [--device shm|composite|udp]\n"
"        [--test pingpong|stream|bidir|atomic|all] [--sizes LIST] [--reps N]\n"
"        [--min-time SEC] [--warmup N] [--iters N] [--recv none|read|copy]\n"
"        [--json]\n"
"\n"
"DESCRIPTION\n"
"    Measures PM between the two processes of a job started by any PMIx\n"
"    launcher (mpirun, srun --mpi=pmix, scrun).  Rank 0 measures and prints;\n"
"    rank 1 is its partner and follows rank 0's commands.\n"
"\n"
"    Messages up to pm_max_message() bytes use PM's zero-copy hand-off: the\n"
"    sender takes a buffer with pm_send_buffer(), copies the payload into it\n"
"    from a source buffer and calls pm_send(); the receiver reads the message\n"
"    where it landed and pm_release()s it (see --recv).  Larger messages\n"
"    use remote memory: each rank registers a receive region at start and\n"
"    sends its key to the other; a transfer is a pm_write() of the payload\n"
"    into the partner's region followed by a small notification message.\n"
"    The 'path' column says which was used (ring or rma).\n"
"\n"
"TESTS\n"
"    pingpong  rank 0 sends a message, rank 1 returns one of the same size;\n"
"              latency = round-trip time / 2, in microseconds.\n"
"    stream    rank 0 sends a batch of messages back to back, rank 1 takes\n"
"              them all and answers with one small acknowledgement; the\n"
"              clock stops at the acknowledgement.  MB/s = 10^6 bytes/s.\n"
"    bidir     both ranks send a batch at the same time while taking the\n"
"              other's; aggregate MB/s of both directions.\n"
"    atomic    rank 0 fetch-adds 1 to a 64-bit word of rank 1's registered\n"
"              region (pm_atomic), one at a time, each to completion;\n"
"              microseconds per operation (size 8, whatever --sizes says).\n"
"              Rank 1 only progresses meanwhile: on udp its progress runs\n"
"              them.  Every old value must be the previous one plus 1.\n"
"    all       the four, in that order (the default is pingpong+stream).\n"
"\n"
"OPTIONS\n"
"    --device NAME   the PM device: sets pm_open_attr.device (default: the\n"
"                    library's, i.e. $PM_DEVICE or composite).\n"
"    --test NAME     pingpong, stream, bidir, atomic or all; may be repeated or\n"
"                    given as a comma list (default: pingpong,stream).\n"
"    --sizes LIST    comma-separated message sizes in bytes; a K or M suffix\n"
"                    means KiB or MiB (8,1K,1M).  Default: every power of two\n"
"                    p from 1 B to 4 MiB with p-3 and p+3 beside it (the\n"
"                    perturbation of NetPIPE and Hpcbench), at least 1 B.\n"
"    --reps N        timed repetitions per size (default %d).\n"
"    --min-time SEC  how long one repetition should last; the iteration\n"
"                    count is calibrated per size by doubling from 1 until a\n"
"                    batch lasts SEC/4, then scaled (default %.1f).\n"
"    --warmup N      iterations run before calibrating each size (default %d).\n"
"    --iters N       fixed iterations per repetition: no calibration.\n"
"    --recv MODE     what the receiver does with each payload (default none):\n"
"                    none  takes it and releases it untouched (the zero-copy\n"
"                          hand-off: the data stays where the sender put it\n"
"                          until someone reads it);\n"
"                    read  reads every byte in place once (sums its words);\n"
"                    copy  copies a ring message into a private buffer before\n"
"                          releasing it, as MPI_Recv() into a user buffer\n"
"                          must; a remote-memory payload already is in the\n"
"                          receive region, which plays the user buffer.\n"
"                    With read and copy, stream and bidir move remote-memory\n"
"                    payloads one at a time: the sender writes the next one\n"
"                    only after the receiver has taken the last and sent a\n"
"                    credit back (as an MPI rendezvous send completes only\n"
"                    when the receiver has the data); rma_credit in the JSON.\n"
"    --json          one JSON object per test and size on standard output,\n"
"                    instead of the table.\n"
"    --help          this text.\n"
"\n"
"VERIFICATION\n"
"    The payloads carry a pattern that depends on the size and the sender.\n"
"    The receiving rank checks the first message (during the warm-up) and\n"
"    the last message of every size (after the clock has stopped) and the\n"
"    run fails on any mismatch, naming the byte.\n"
"\n"
"SYSTEM COUNTERS\n"
"    Around the repetitions of each size both ranks sample /proc/stat and\n"
"    getrusage(); rank 1 sends its deltas to rank 0.  Per rank: busy %% of the\n"
"    CPU it is pinned to (of all CPUs when it is not pinned; /proc/stat has\n"
"    jiffy resolution), the process's own CPU %% and context switches per\n"
"    second, and the node's context switches and interrupts per second.\n"
"\n"
"ENVIRONMENT\n"
"    PM_DEVICE, PM_SPIN_US, PM_SHM_RING_KIB (pm_max_message() is a quarter of\n"
"    the ring), PM_VERBOSE: see docs/pm/knobs.md.\n"
"\n"
"EXIT STATUS\n"
"    0 success, 1 a failure (PM error, wrong process count, data mismatch),\n"
"    2 a bad command line.\n"
"\n"
"EXAMPLES\n"
"    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\\n"
"      mpirun -n 2 --bind-to core " PROG " --device shm --sizes 8,1K,1M\n"
"    mpirun -n 2 " PROG " --test all --json > pm.json\n"
"\n"
"SEE ALSO\n"
"    docs/pm/bench.md, scripts/bench (make bench), pminfo(1)\n",
	       DEFAULT_REPS, DEFAULT_MIN_T, DEFAULT_WARMUP);
}

/* ---- command line ---- */

static bool parse_size(const char *s, size_t *out)
{
	char *end;

	if (!*s || *s == '-' || *s == '+' || *s == ' ')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);

	if (errno || end == s)
		return false;
	if (*end == 'K' || *end == 'k') {
		v = v > MAX_SIZE ? v : v << 10;
		end++;
	} else if (*end == 'M' || *end == 'm') {
		v = v > MAX_SIZE ? v : v << 20;
		end++;
	}
	if (*end || v == 0 || v > MAX_SIZE)
		return false;
	*out = (size_t)v;
	return true;
}

static int cmp_size(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;

	return x < y ? -1 : x > y;
}

/* Sort and drop duplicates. */
static void tidy_sizes(struct options *o)
{
	int n = 0;

	qsort(o->sizes, (size_t)o->nsizes, sizeof(o->sizes[0]), cmp_size);
	for (int i = 0; i < o->nsizes; i++)
		if (n == 0 || o->sizes[n - 1] != o->sizes[i])
			o->sizes[n++] = o->sizes[i];
	o->nsizes = n;
}

static void default_sizes(struct options *o)
{
	o->nsizes = 0;
	for (size_t p = 1; p <= (4ul << 20); p <<= 1) {
		o->sizes[o->nsizes++] = p > 4 ? p - 3 : 1;
		o->sizes[o->nsizes++] = p;
		o->sizes[o->nsizes++] = p + 3;
	}
	tidy_sizes(o);
}

static void parse_sizes(struct options *o, const char *arg)
{
	char *copy = strdup(arg), *save = NULL;

	if (!copy)
		die("out of memory");
	o->nsizes = 0;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		size_t v;

		if (!parse_size(tok, &v))
			bad_usage("--sizes: '%s' is not a size from 1 to 1G (e.g. 8,1K,1M)", tok);
		if (o->nsizes == MAX_SIZES)
			bad_usage("--sizes: at most %d sizes", MAX_SIZES);
		o->sizes[o->nsizes++] = v;
	}
	free(copy);
	if (o->nsizes == 0)
		bad_usage("--sizes: an empty list");
	tidy_sizes(o);
}

static void parse_options(int argc, char **argv, struct options *o)
{
	enum { O_DEVICE = 256, O_TEST, O_SIZES, O_RECV, O_JSON };
	static const struct option longopts[] = {
		{ "device", required_argument, NULL, O_DEVICE },
		{ "test", required_argument, NULL, O_TEST },
		{ "sizes", required_argument, NULL, O_SIZES },
		BENCH_LONGOPTS,
		{ "recv", required_argument, NULL, O_RECV },
		{ "json", no_argument, NULL, O_JSON },
		{ NULL, 0, NULL, 0 },
	};
	bool any_test = false;
	int c;

	memset(o, 0, sizeof(*o));
	o->method.reps = DEFAULT_REPS;
	o->method.min_time = DEFAULT_MIN_T;
	o->method.warmup = DEFAULT_WARMUP;
	default_sizes(o);
	while ((c = bench_getopt(argc, argv, longopts, &o->method, MAX_ITERS)) != -1) {
		switch (c) {
		case O_DEVICE:
			if (!*optarg)
				bad_usage("--device: an empty name");
			o->device = optarg;
			break;
		case O_TEST:
			bench_parse_tests(optarg, test_names, T_COUNT, o->tests);
			any_test = true;
			break;
		case O_SIZES:
			parse_sizes(o, optarg);
			break;
		case O_RECV: {
			int m;

			for (m = 0; m <= RECV_COPY && strcmp(optarg, recv_names[m]) != 0; m++)
				;
			if (m > RECV_COPY)
				bad_usage("--recv: unknown mode '%s' (none, read, copy)", optarg);
			o->recv = (enum recv_mode)m;
			break;
		}
		case O_JSON:
			o->json = true;
			break;
		}
	}
	if (!any_test)
		o->tests[T_PINGPONG] = o->tests[T_STREAM] = true;
	if (o->tests[T_ATOMIC] && o->sizes[o->nsizes - 1] < 8)
		bad_usage("--test atomic: its word lives in the partner's receive region, "
			  "as large as the largest size: give one of at least 8");
}

/* ---- payload patterns ---- */

/* Byte i of a payload of size bytes sent by rank: changes with all three, so
 * a message of another size, direction or offset does not pass. */
static void fill_pattern(uint8_t *buf, size_t size, int rank)
{
	uint32_t seed = (uint32_t)(size * 2654435761u) ^ (rank ? 0xa5u : 0x3cu);

	for (size_t i = 0; i < size; i++)
		buf[i] = (uint8_t)(seed + i * 13u + (i >> 8) * 7u + (i >> 16));
}

static void set_pattern(struct bench *b, size_t size)
{
	if (b->pattern_size == size)
		return;
	fill_pattern(b->src, size, b->rank);
	fill_pattern(b->expect, size, b->peer);
	b->pattern_size = size;
}

static void verify(struct bench *b, const void *data, size_t len, size_t size,
		   const char *which)
{
	if (len != size)
		die("data check failed (%s, %s message of size %zu): received %zu bytes",
		    b->doing, which, size, len);
	if (memcmp(data, b->expect, size) == 0)
		return;

	const uint8_t *d = data;
	size_t i = 0;

	while (i < size && d[i] == b->expect[i])
		i++;
	die("data check failed (%s, %s message of size %zu): byte %zu is 0x%02x, "
	    "expected 0x%02x", b->doing, which, size, i, d[i], b->expect[i]);
}

/* --recv read: touch every byte where it lies; the sum goes nowhere but
 * cannot be optimised away.  Four independent 16-byte accumulators (GCC's
 * and Clang's vector extension: SSE2 on x86-64, NEON on arm64) keep several
 * loads in flight; a single 64-bit sum is one dependent add per 8 bytes,
 * slower than memcpy() over the same bytes when they are in cache. */
static volatile uint64_t g_sink;

typedef uint64_t u64x2 __attribute__((vector_size(16)));

static void read_all(const void *data, size_t len)
{
	const uint8_t *p = data;
	u64x2 a = { 0, 0 }, b = { 0, 0 }, c = { 0, 0 }, d = { 0, 0 }, w;
	uint64_t sum = 0;
	size_t i = 0;

	for (; i + 4 * sizeof(w) <= len; i += 4 * sizeof(w)) {
		memcpy(&w, p + i, sizeof(w));
		a += w;
		memcpy(&w, p + i + sizeof(w), sizeof(w));
		b += w;
		memcpy(&w, p + i + 2 * sizeof(w), sizeof(w));
		c += w;
		memcpy(&w, p + i + 3 * sizeof(w), sizeof(w));
		d += w;
	}
	for (; i < len; i++)
		sum += p[i];
	a += b + c + d;
	g_sink += sum + a[0] + a[1];
}

/* ---- progress ---- */

static void progress_wait(struct bench *b)
{
	int err = pm_wait(b->ctx, WAIT_MS);

	if (err == 0)
		return;
	if (err == -ECONNRESET || pm_peer_alive(b->ctx, b->peer) == 0)
		die("rank %d died (%s)", b->peer, b->doing);
	if (err != -ETIMEDOUT)
		die_pm("pm_wait", err);
	/* Progress resets the count; the fast paths only store a zero. */
	if (++b->stalled * (WAIT_MS / 1000.0) >= STALL_S)
		die("nothing from rank %d for %.0f s (%s)", b->peer, STALL_S, b->doing);
}

/* Non-blocking: a buffer for len bytes to the partner, or NULL. */
static void *try_buffer(struct bench *b, size_t len)
{
	void *buf;
	int err = pm_send_buffer(b->ctx, b->peer, len, &buf);

	if (err == 0)
		return buf;
	if (err != -EAGAIN)
		die_pm("pm_send_buffer", err);
	return NULL;
}

static void *get_buffer(struct bench *b, size_t len)
{
	unsigned polls = 0;
	void *buf;

	while (!(buf = try_buffer(b, len))) {
		if (++polls >= SPIN_POLLS) {
			polls = 0;
			progress_wait(b);
		}
	}
	return buf;
}

static void send_now(struct bench *b, size_t len)
{
	int err = pm_send(b->ctx, b->peer, len);

	if (err)
		die_pm("pm_send", err);
	b->stalled = 0;
}

static bool try_recv(struct bench *b, struct pm_msg *m)
{
	int err = pm_recv(b->ctx, m);

	if (err == -EAGAIN)
		return false;
	if (err)
		die_pm("pm_recv", err);
	if (m->peer != b->peer)
		die("message from unexpected rank %d", m->peer);
	return true;
}

static void recv_msg(struct bench *b, struct pm_msg *m)
{
	unsigned polls = 0;

	while (!try_recv(b, m)) {
		if (++polls >= SPIN_POLLS) {
			polls = 0;
			progress_wait(b);
		}
	}
	b->stalled = 0;
}

static void release(struct bench *b, const struct pm_msg *m)
{
	int err = pm_release(b->ctx, m);

	if (err)
		die_pm("pm_release", err);
}

/* ---- control messages ---- */

static void send_ctl(struct bench *b, enum op op, uint64_t a, uint64_t bb, uint64_t c,
		     uint64_t d, const void *extra, size_t extra_len)
{
	struct ctl *m = get_buffer(b, sizeof(*m) + extra_len);

	m->magic = CTL_MAGIC;
	m->op = op;
	m->a = a;
	m->b = bb;
	m->c = c;
	m->d = d;
	if (extra_len)
		memcpy(m + 1, extra, extra_len);
	send_now(b, sizeof(*m) + extra_len);
}

/* Receive the next control message; it must be one of want (a bit set of
 * 1 << op).  The caller releases msg. */
static const struct ctl *recv_ctl(struct bench *b, unsigned want, struct pm_msg *msg)
{
	recv_msg(b, msg);

	const struct ctl *c = msg->data;

	if (msg->len < sizeof(*c) || c->magic != CTL_MAGIC || c->op >= 32 ||
	    !(want & (1u << c->op)))
		die("protocol error: expected a control message (%s), got %zu bytes "
		    "(op %u)", b->doing, msg->len,
		    msg->len >= sizeof(*c) ? c->op : 0);
	return c;
}

static void expect_ctl(struct bench *b, enum op op)
{
	struct pm_msg m;

	recv_ctl(b, 1u << op, &m);
	release(b, &m);
}

/* ---- data messages ---- */

static bool is_credit(const struct pm_msg *m)
{
	return m->len == sizeof(struct note) &&
	       ((const struct note *)m->data)->magic == CREDIT_MAGIC;
}

/* RUN_CREDIT: the receiver is done with the payload in its region. */
static void send_credit(struct bench *b)
{
	struct note *n = get_buffer(b, sizeof(*n));

	n->magic = CREDIT_MAGIC;
	n->_pad = 0;
	n->len = 0;
	n->seq = b->seq_in;
	send_now(b, sizeof(*n));
}

/* Wait for a credit: the only message a sender of payloads can get while
 * it has none (the receiver's acknowledgement follows its last credit). */
static void take_credit(struct bench *b)
{
	struct pm_msg m;

	recv_msg(b, &m);
	if (!is_credit(&m))
		die("protocol error: expected a credit (%s), got %zu bytes", b->doing, m.len);
	b->credits++;
	release(b, &m);
}

/* Send one payload; false (nothing sent) when there is no room now and
 * block is false. */
static bool send_data(struct bench *b, size_t size, unsigned flags, bool block)
{
	if (flags & RUN_RMA) {
		if (flags & RUN_CREDIT) {
			/* The receive region holds one payload: write the next only
			 * when the receiver has taken the last one (MPI's rendezvous
			 * completes a large send the same way: after the receiver
			 * has the data). */
			if (!b->credits && !block)
				return false;
			while (!b->credits)
				take_credit(b);
		}
		/* Reserve the notification first so that a written payload is
		 * always announced. */
		struct note *n = block ? get_buffer(b, sizeof(*n)) : try_buffer(b, sizeof(*n));
		struct pm_op op;

		if (!n)
			return false;
		if (flags & RUN_CREDIT)
			b->credits--;

		int err = pm_write(b->ctx, b->peer, b->src, size, b->peer_key, 0, &op);

		if (err)
			die_pm("pm_write", err);
		while (!pm_test(b->ctx, &op))
			;
		if (op.status)
			die_pm("pm_write completion", op.status);
		n->magic = NOTE_MAGIC;
		n->_pad = 0;
		n->len = size;
		n->seq = b->seq_out++;
		send_now(b, sizeof(*n));
		return true;
	}

	void *buf = block ? get_buffer(b, size) : try_buffer(b, size);

	if (!buf)
		return false;
	memcpy(buf, b->src, size);
	send_now(b, size);
	return true;
}

/* Take one received payload message m: check it when asked, copy it out
 * when asked, and release it unless hold (the caller then owns b->held). */
static void take_data(struct bench *b, struct pm_msg *m, size_t size, unsigned flags,
		      bool check, bool hold)
{
	if (flags & RUN_RMA) {
		const struct note *n = m->data;

		if (m->len != sizeof(*n) || n->magic != NOTE_MAGIC)
			die("protocol error: expected a notification (%s), got %zu bytes",
			    b->doing, m->len);
		if (n->len != size || n->seq != b->seq_in)
			die("protocol error: notification of %" PRIu64 " bytes, seq %" PRIu64
			    " (expected %zu, seq %" PRIu64 ")", n->len, n->seq, size,
			    b->seq_in);
		b->seq_in++;
		if (check)
			verify(b, b->region, size, size, "first");
		if (flags & RUN_RECV_READ)
			read_all(b->region, size);
		/* The last payload of a batch is still checked after the clock;
		 * the next batch starts with a free region (and one credit). */
		if ((flags & RUN_CREDIT) && !hold)
			send_credit(b);
	} else {
		if (check)
			verify(b, m->data, m->len, size, "first");
		else if (m->len != size)
			die("protocol error: a %zu-byte message (%s), expected %zu",
			    m->len, b->doing, size);
		if (flags & RUN_RECV_READ)
			read_all(m->data, m->len);
		else if (flags & RUN_RECV_COPY)
			memcpy(b->dst, m->data, m->len);
	}
	if (hold) {
		b->held = *m;
		b->holding = true;
	} else {
		release(b, m);
	}
}

static void recv_data(struct bench *b, size_t size, unsigned flags, bool check, bool hold)
{
	struct pm_msg m;

	recv_msg(b, &m);
	take_data(b, &m, size, flags, check, hold);
}

/* After the clock: verify the last message if asked, then let it go. */
static void finish_held(struct bench *b, size_t size, unsigned flags)
{
	if (!b->holding)
		return;
	if (flags & RUN_CHECK_LAST) {
		if (flags & RUN_RMA)
			verify(b, b->region, size, size, "last");
		else
			verify(b, b->held.data, b->held.len, size, "last");
	}
	release(b, &b->held);
	b->holding = false;
}

/* ---- the three tests: one batch of iters iterations ---- */

static void pingpong(struct bench *b, size_t size, uint64_t iters, unsigned flags)
{
	bool first = flags & RUN_CHECK_FIRST;

	for (uint64_t i = 0; i < iters; i++) {
		if (b->rank == 0) {
			send_data(b, size, flags, true);
			recv_data(b, size, flags, first && i == 0, i + 1 == iters);
		} else {
			recv_data(b, size, flags, first && i == 0, i + 1 == iters);
			send_data(b, size, flags, true);
		}
	}
}

static void stream(struct bench *b, size_t size, uint64_t iters, unsigned flags)
{
	if (b->rank == 0) {
		for (uint64_t i = 0; i < iters; i++)
			send_data(b, size, flags, true);
		expect_ctl(b, OP_ACK);
	} else {
		for (uint64_t i = 0; i < iters; i++)
			recv_data(b, size, flags, (flags & RUN_CHECK_FIRST) && i == 0,
				  i + 1 == iters);
		send_ctl(b, OP_ACK, 0, 0, 0, 0, NULL, 0);
	}
}

static void bidir(struct bench *b, size_t size, uint64_t iters, unsigned flags)
{
	uint64_t sent = 0, got = 0;
	unsigned idle = 0;

	while (sent < iters || got < iters) {
		bool moved = false;
		struct pm_msg m;

		if (sent < iters && send_data(b, size, flags, false)) {
			sent++;
			moved = true;
		}
		/* Once every payload is in, only credits can still come (the
		 * partner's acknowledgement waits for all of ours). */
		while ((got < iters || ((flags & RUN_CREDIT) && sent < iters)) &&
		       try_recv(b, &m)) {
			if ((flags & RUN_CREDIT) && is_credit(&m)) {
				b->credits++;
				release(b, &m);
				moved = true;
				continue;
			}
			take_data(b, &m, size, flags, (flags & RUN_CHECK_FIRST) && got == 0,
				  got + 1 == iters);
			got++;
			moved = true;
			b->stalled = 0;
		}
		if (moved) {
			idle = 0;
		} else if (++idle >= SPIN_POLLS) {
			idle = 0;
			progress_wait(b);
		}
	}
	/* Each side's acknowledgement follows all its payloads: rank 0's clock
	 * stops when both directions are complete. */
	if (b->rank == 1)
		send_ctl(b, OP_ACK, 0, 0, 0, 0, NULL, 0);
	else
		expect_ctl(b, OP_ACK);
}

/* Rank 0 fetch-adds 1 to the first word of rank 1's region, one at a time,
 * each to completion; rank 1 only progresses (on udp its progress runs
 * them) until rank 0's acknowledgement.  Every old value must be the last
 * one plus 1: each applied once, in order. */
static void atomic(struct bench *b, uint64_t iters)
{
	if (b->rank == 1) {
		expect_ctl(b, OP_ACK);
		return;
	}
	for (uint64_t i = 0; i < iters; i++) {
		struct pm_op op;
		uint64_t old;
		unsigned polls = 0;
		int err;

		while ((err = pm_atomic(b->ctx, b->peer, PM_ATOMIC_ADD, 1, 0, &old, b->peer_key, 0,
					&op)) == -EAGAIN)
			progress_wait(b);
		if (err)
			die_pm("pm_atomic", err);
		while (!pm_test(b->ctx, &op))
			if (++polls % SPIN_POLLS == 0)
				progress_wait(b);
		if (op.status)
			die_pm("pm_atomic (completion)", op.status);
		if (b->atomic_known && old != b->atomic_next)
			die("fetch-add: old value %" PRIu64 ", expected %" PRIu64, old,
			    b->atomic_next);
		b->atomic_next = old + 1;
		b->atomic_known = true;
	}
	send_ctl(b, OP_ACK, 0, 0, 0, 0, NULL, 0);
}

static void run_test(struct bench *b, enum test t, size_t size, uint64_t iters,
		     unsigned flags)
{
	b->credits = 1;
	switch (t) {
	case T_PINGPONG: pingpong(b, size, iters, flags); break;
	case T_STREAM: stream(b, size, iters, flags); break;
	case T_BIDIR: bidir(b, size, iters, flags); break;
	case T_ATOMIC: atomic(b, iters); break;
	default: die("unknown test %d", (int)t);
	}
}

/* ---- system counters ---- */

static int pinned_cpu(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) != 1)
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set))
			return c;
	return -1;
}

static void sample(struct sys_sample *s)
{
	char want[32];
	FILE *f = fopen("/proc/stat", "re");
	char *line = NULL;
	size_t cap = 0;

	memset(s, 0, sizeof(*s));
	s->cpu_id = pinned_cpu();
	if (s->cpu_id >= 0)
		snprintf(want, sizeof(want), "cpu%d ", s->cpu_id);
	else
		snprintf(want, sizeof(want), "cpu ");
	if (f) {
		while (getline(&line, &cap, f) > 0) {
			unsigned long long v[10] = { 0 };

			if (strncmp(line, want, strlen(want)) == 0) {
				sscanf(line + strlen(want), "%llu %llu %llu %llu %llu %llu %llu %llu",
				       &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
				/* user nice system idle iowait irq softirq steal;
				 * guest time is already counted in user. */
				s->user = v[0] + v[1];
				s->sys = v[2] + v[5] + v[6];
				s->total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
				s->busy = s->total - v[3] - v[4];
			} else if (strncmp(line, "ctxt ", 5) == 0) {
				s->ctxt = strtoull(line + 5, NULL, 10);
			} else if (strncmp(line, "intr ", 5) == 0) {
				s->intr = strtoull(line + 5, NULL, 10);
			}
		}
		free(line);
		fclose(f);
	}
	getrusage(RUSAGE_SELF, &s->ru);
	clock_gettime(CLOCK_MONOTONIC, &s->when);
}

static uint64_t tv_us(const struct timeval *tv)
{
	return (uint64_t)tv->tv_sec * 1000000u + (uint64_t)tv->tv_usec;
}

static struct sys_delta delta(const struct sys_sample *a, const struct sys_sample *z)
{
	struct sys_delta d = {
		.wall_s = (double)(z->when.tv_sec - a->when.tv_sec) +
			  (double)(z->when.tv_nsec - a->when.tv_nsec) * 1e-9,
		.cpu_id = a->cpu_id == z->cpu_id ? a->cpu_id : -1,
		.busy = z->busy - a->busy,
		.user = z->user - a->user,
		.sys = z->sys - a->sys,
		.total = z->total - a->total,
		.ctxt = z->ctxt - a->ctxt,
		.intr = z->intr - a->intr,
		.utime_us = tv_us(&z->ru.ru_utime) - tv_us(&a->ru.ru_utime),
		.stime_us = tv_us(&z->ru.ru_stime) - tv_us(&a->ru.ru_stime),
		.nvcsw = (uint64_t)(z->ru.ru_nvcsw - a->ru.ru_nvcsw),
		.nivcsw = (uint64_t)(z->ru.ru_nivcsw - a->ru.ru_nivcsw),
	};
	return d;
}

struct cpu_report {
	int cpu_id;
	double busy_pct, user_pct, sys_pct;     /* of cpu_id, or of the node */
	double proc_pct;                        /* this process, of one CPU */
	double csw_per_s;                       /* this process */
	double node_ctxt_per_s, node_intr_per_s;
};

static double ratio(double num, double den)
{
	return den > 0 ? num / den : 0.0;
}

static struct cpu_report cpu_report(const struct sys_delta *d)
{
	struct cpu_report r = {
		.cpu_id = d->cpu_id,
		.busy_pct = 100.0 * ratio((double)d->busy, (double)d->total),
		.user_pct = 100.0 * ratio((double)d->user, (double)d->total),
		.sys_pct = 100.0 * ratio((double)d->sys, (double)d->total),
		.proc_pct = 100.0 * ratio((double)(d->utime_us + d->stime_us) * 1e-6, d->wall_s),
		.csw_per_s = ratio((double)(d->nvcsw + d->nivcsw), d->wall_s),
		.node_ctxt_per_s = ratio((double)d->ctxt, d->wall_s),
		.node_intr_per_s = ratio((double)d->intr, d->wall_s),
	};
	return r;
}

/* ---- rank 1: the partner ---- */

static void prepare_run(struct bench *b, size_t size, unsigned flags)
{
	if (size > b->buf_len)
		die("protocol error: size %zu beyond the %zu announced", size, b->buf_len);
	if ((flags & RUN_RMA) && size > b->peer_region)
		die("size %zu does not fit the partner's region of %zu", size, b->peer_region);
	set_pattern(b, size);
}

static void serve(struct bench *b)
{
	for (;;) {
		struct pm_msg m;
		const struct ctl *c = recv_ctl(b, (1u << OP_RUN) | (1u << OP_SAMPLE) |
					       (1u << OP_REPORT) | (1u << OP_QUIT), &m);
		struct ctl cmd = *c;

		release(b, &m);
		switch (cmd.op) {
		case OP_RUN: {
			enum test t = (enum test)cmd.a;
			size_t size = (size_t)cmd.b;
			unsigned flags = (unsigned)cmd.d;

			if (cmd.a >= T_COUNT)
				die("protocol error: test %" PRIu64, cmd.a);
			b->doing = test_names[t];
			prepare_run(b, size, flags);
			send_ctl(b, OP_READY, 0, 0, 0, 0, NULL, 0);
			run_test(b, t, size, cmd.c, flags);
			finish_held(b, size, flags);
			break;
		}
		case OP_SAMPLE:
			sample(&b->before);
			break;
		case OP_REPORT: {
			struct sys_sample after;
			struct sys_delta d;

			sample(&after);
			d = delta(&b->before, &after);
			send_ctl(b, OP_DELTAS, 0, 0, 0, 0, &d, sizeof(d));
			break;
		}
		case OP_QUIT:
			send_ctl(b, OP_BYE, 0, 0, 0, 0, NULL, 0);
			return;
		}
	}
}

/* ---- rank 0: measuring ---- */

/* One batch, timed from the partner's READY to the end of the test. */
static double batch(struct bench *b, enum test t, size_t size, uint64_t iters,
		    unsigned flags)
{
	send_ctl(b, OP_RUN, t, size, iters, flags, NULL, 0);
	expect_ctl(b, OP_READY);

	double t0 = now_s();

	run_test(b, t, size, iters, flags);

	double t1 = now_s();

	finish_held(b, size, flags);
	return t1 - t0;
}

/* What bench_calibrate() times: batches of one test and size. */
struct batch_arg {
	struct bench *b;
	enum test t;
	size_t size;
	unsigned flags;
};

static double timed_batch(void *arg, uint64_t iters)
{
	struct batch_arg *a = arg;

	return batch(a->b, a->t, a->size, iters, a->flags);
}

static uint64_t calibrate(struct bench *b, enum test t, size_t size, unsigned flags)
{
	struct batch_arg a = { .b = b, .t = t, .size = size, .flags = flags };

	return bench_calibrate(&b->opt.method, MAX_ITERS, timed_batch, &a);
}

struct result {
	enum test test;
	size_t size;
	enum path path;
	bool credit;            /* RUN_CREDIT: one credit per rma payload */
	uint64_t iters;
	double v[BENCH_MAX_REPS];     /* per repetition: us or MB/s */
	double median, min, max;
	struct cpu_report cpu[2];
};

static void measure(struct bench *b, enum test t, size_t size, struct result *r)
{
	unsigned flags = (size > b->max_msg ? RUN_RMA : 0) |
			 (b->opt.recv == RECV_READ ? RUN_RECV_READ : 0) |
			 (b->opt.recv == RECV_COPY ? RUN_RECV_COPY : 0);

	/* A receiver that uses its payloads (read, copy) must have each one to
	 * itself until it is done: a stream of rma payloads then waits for
	 * one credit per payload.  Ping-pong needs none: the answer is one. */
	if ((flags & RUN_RMA) && b->opt.recv != RECV_NONE && t != T_PINGPONG)
		flags |= RUN_CREDIT;
	const struct bench_method *meth = &b->opt.method;
	int reps = meth->reps;

	memset(r, 0, sizeof(*r));
	r->test = t;
	r->size = size;
	r->path = (flags & RUN_RMA) || t == T_ATOMIC ? P_RMA : P_RING;
	r->credit = flags & RUN_CREDIT;
	b->doing = test_names[t];
	set_pattern(b, size);

	/* Warm-up; its first message is the one verified first. */
	if (meth->warmup)
		batch(b, t, size, meth->warmup, flags | RUN_CHECK_FIRST);
	r->iters = meth->iters ? meth->iters
			       : calibrate(b, t, size, flags | (meth->warmup ? 0 : RUN_CHECK_FIRST));

	send_ctl(b, OP_SAMPLE, 0, 0, 0, 0, NULL, 0);
	sample(&b->before);
	for (int i = 0; i < reps; i++) {
		unsigned f = flags;

		if (i + 1 == reps)
			f |= RUN_CHECK_LAST;
		if (i == 0 && !meth->warmup && meth->iters)
			f |= RUN_CHECK_FIRST;

		double el = batch(b, t, size, r->iters, f);
		double bytes = (double)size * (double)r->iters;

		switch (t) {
		case T_PINGPONG: r->v[i] = el / (2.0 * (double)r->iters) * 1e6; break;
		case T_ATOMIC: r->v[i] = el / (double)r->iters * 1e6; break;
		case T_STREAM: r->v[i] = bytes / el / 1e6; break;
		case T_BIDIR: r->v[i] = 2 * bytes / el / 1e6; break;
		default: break;
		}
	}

	struct sys_sample after;
	struct sys_delta mine, theirs;
	struct pm_msg m;

	sample(&after);
	mine = delta(&b->before, &after);
	send_ctl(b, OP_REPORT, 0, 0, 0, 0, NULL, 0);

	const struct ctl *c = recv_ctl(b, 1u << OP_DELTAS, &m);

	if (m.len != sizeof(*c) + sizeof(theirs))
		die("protocol error: deltas of %zu bytes", m.len);
	memcpy(&theirs, c + 1, sizeof(theirs));
	release(b, &m);
	r->cpu[0] = cpu_report(&mine);
	r->cpu[1] = cpu_report(&theirs);
	bench_summarise(r->v, reps, &r->median, &r->min, &r->max);
}

/* ---- output ---- */

static void json_cpu(FILE *f, const struct cpu_report *c)
{
	fprintf(f, "{\"cpu_id\":%d,\"busy_pct\":%.1f,\"user_pct\":%.1f,\"sys_pct\":%.1f,"
		"\"proc_pct\":%.1f,\"ctxsw_per_s\":%.1f,\"node_ctxt_per_s\":%.1f,"
		"\"node_intr_per_s\":%.1f}",
		c->cpu_id, fin(c->busy_pct), fin(c->user_pct), fin(c->sys_pct),
		fin(c->proc_pct), fin(c->csw_per_s), fin(c->node_ctxt_per_s),
		fin(c->node_intr_per_s));
}

static void print_json(const struct bench *b, const char *device, const struct result *r)
{
	bool latency = r->test == T_PINGPONG || r->test == T_ATOMIC;
	const char *metric = r->test == T_ATOMIC ? "op_us" : latency ? "latency_us"
								   : "bandwidth_MBps";
	const char *fmt = latency ? "%.4f" : "%.2f";
	const struct bench_method *m = &b->opt.method;
	FILE *f = stdout;

	fprintf(f, "{\"test\":\"%s\",\"device\":", test_names[r->test]);
	json_string(f, device);
	fprintf(f, ",\"peer_device\":");
	json_string(f, pm_peer_device(b->ctx, b->peer) ? pm_peer_device(b->ctx, b->peer) : "");
	fprintf(f, ",\"size\":%zu,\"path\":\"%s\",\"max_message\":%zu,\"recv\":\"%s\","
		"\"rma_credit\":%s,\"iterations\":%" PRIu64 ",\"reps\":%d,\"warmup\":%" PRIu64
		",\"min_time_s\":%g,\"%s\":{\"median\":",
		r->size, path_names[r->path], b->max_msg, recv_names[b->opt.recv],
		r->credit ? "true" : "false", r->iters, m->reps, m->warmup, m->min_time, metric);
	fprintf(f, fmt, fin(r->median));
	fputs(",\"min\":", f);
	fprintf(f, fmt, fin(r->min));
	fputs(",\"max\":", f);
	fprintf(f, fmt, fin(r->max));
	fputs(",\"samples\":[", f);
	for (int i = 0; i < m->reps; i++) {
		if (i)
			fputc(',', f);
		fprintf(f, fmt, fin(r->v[i]));
	}
	fputs("]},\"cpu\":{\"rank0\":", f);
	json_cpu(f, &r->cpu[0]);
	fputs(",\"rank1\":", f);
	json_cpu(f, &r->cpu[1]);
	fputs("},\"verified\":true,\"pm_version\":", f);
	json_string(f, pm_version());
	fputs("}\n", f);
	fflush(f);
}

static void print_header(const struct bench *b, const char *device, enum test t)
{
	const char *peer_dev = pm_peer_device(b->ctx, b->peer);
	const struct bench_method *m = &b->opt.method;

	printf("\n# %s: device %s (rank 1 via %s), max message %zu B, min-time %g s, "
	       "%d reps, warm-up %" PRIu64 ", receiver: %s\n",
	       test_names[t], device, peer_dev ? peer_dev : "?", b->max_msg,
	       m->min_time, m->reps, m->warmup, recv_names[b->opt.recv]);
	if (t == T_ATOMIC)
		printf("# one 64-bit fetch-and-add on the partner's memory, issue to "
		       "completion, microseconds\n"
		       "%10s %4s %10s %10s %10s %10s %11s %13s\n",
		       "size", "path", "iters", "median_us", "min_us", "max_us",
		       "cpu%_r0/r1", "ctxsw/s_r0/r1");
	else if (t == T_PINGPONG)
		printf("# one-way latency = round-trip time / 2, microseconds\n"
		       "%10s %4s %10s %10s %10s %10s %11s %13s\n",
		       "size", "path", "iters", "median_us", "min_us", "max_us",
		       "cpu%_r0/r1", "ctxsw/s_r0/r1");
	else
		printf("# %s bandwidth, MB/s = 10^6 bytes/s\n"
		       "%10s %4s %10s %10s %10s %10s %11s %13s\n",
		       t == T_STREAM ? "one-way" : "aggregate (both directions)",
		       "size", "path", "iters", "median_MBps", "min_MBps", "max_MBps",
		       "cpu%_r0/r1", "ctxsw/s_r0/r1");
	fflush(stdout);
}

static void print_row(const struct result *r)
{
	char cpu[32], csw[32];

	snprintf(cpu, sizeof(cpu), "%.0f/%.0f", r->cpu[0].busy_pct, r->cpu[1].busy_pct);
	snprintf(csw, sizeof(csw), "%.0f/%.0f", r->cpu[0].csw_per_s, r->cpu[1].csw_per_s);
	if (r->test == T_PINGPONG || r->test == T_ATOMIC)
		printf("%10zu %4s %10" PRIu64 " %10.3f %10.3f %10.3f %11s %13s\n",
		       r->size, path_names[r->path], r->iters, r->median, r->min, r->max,
		       cpu, csw);
	else
		printf("%10zu %4s %10" PRIu64 " %10.1f %10.1f %10.1f %11s %13s\n",
		       r->size, path_names[r->path], r->iters, r->median, r->min, r->max,
		       cpu, csw);
	fflush(stdout);
}

/* ---- setup ---- */

static void *alloc_buf(size_t len)
{
	size_t page = 4096, n = (len + page - 1) / page * page;
	void *p = aligned_alloc(page, n ? n : page);

	if (!p)
		die("cannot allocate %zu bytes", len);
	memset(p, 0, n ? n : page);     /* fault the pages in now, not timed */
	return p;
}

/* Allocate the buffers and register the receive region when any size needs
 * remote memory.  The largest size comes from rank 0. */
static void setup_buffers(struct bench *b, size_t largest, bool need_region)
{
	b->buf_len = largest;
	b->src = alloc_buf(largest);
	b->expect = alloc_buf(largest);
	b->dst = alloc_buf(largest);     /* rank 1 follows rank 0's --recv */
	if (need_region) {
		b->region = alloc_buf(largest);

		int err = pm_mr_register(b->ctx, b->region, largest, &b->mr);

		if (err)
			die_pm("pm_mr_register", err);
	}
}

/* Rank 0 says how large messages get and gives its key; rank 1 answers with
 * its own.  Both then know which sizes go through remote memory. */
static void hello(struct bench *b)
{
	size_t mine = pm_max_message(b->ctx, b->peer);
	struct pm_msg m;

	b->doing = "start";
	if (mine == 0)
		die("pm_max_message(%d) is 0", b->peer);
	if (b->rank == 0) {
		size_t largest = b->opt.sizes[b->opt.nsizes - 1];

		/* Rank 1's max may differ (its own ring knob), so register a
		 * region whenever a size could need remote memory. */
		setup_buffers(b, largest, true);
		send_ctl(b, OP_HELLO, largest, b->mr ? pm_mr_key(b->mr) : 0, mine,
			 b->mr ? largest : 0, NULL, 0);

		const struct ctl *c = recv_ctl(b, 1u << OP_HELLO, &m);

		b->peer_key = c->b;
		b->max_msg = c->c < mine ? (size_t)c->c : mine;
		b->peer_region = (size_t)c->d;
		release(b, &m);
		if (largest > b->max_msg && (!b->mr || !b->peer_key))
			die("internal error: no region for %zu-byte messages", largest);
	} else {
		const struct ctl *c = recv_ctl(b, 1u << OP_HELLO, &m);
		size_t largest = (size_t)c->a;
		size_t theirs = (size_t)c->c;

		b->peer_key = c->b;
		b->peer_region = (size_t)c->d;
		release(b, &m);
		if (largest == 0 || largest > MAX_SIZE)
			die("protocol error: largest size %zu", largest);
		b->max_msg = theirs < mine ? theirs : mine;
		setup_buffers(b, largest, true);
		send_ctl(b, OP_HELLO, largest, b->mr ? pm_mr_key(b->mr) : 0, mine,
			 b->mr ? largest : 0, NULL, 0);
	}
}

int main(int argc, char **argv)
{
	struct bench b = { 0 };
	struct pm_open_attr attr = { 0 };
	int err;

	parse_options(argc, argv, &b.opt);
	attr.device = b.opt.device;

	err = pm_open(&b.ctx, &attr);
	if (err) {
		if (launcher_rank0() || err != -ENODEV) {
			const char *dev = b.opt.device ? b.opt.device : getenv("PM_DEVICE");

			fprintf(stderr, PROG ": cannot open PM%s%s%s: %s\n",
				dev ? " device '" : "", dev ? dev : "", dev ? "'" : "",
				pm_strerror(err));
			if (err == -ENODEV)
				fprintf(stderr, PROG ": 'pminfo' lists the devices "
					"this libpm has\n");
		}
		return 1;
	}
	b.rank = bench_rank = pm_rank(b.ctx);
	if (pm_size(b.ctx) != 2) {
		if (b.rank == 0)
			fprintf(stderr, PROG " needs 2 processes, this job has %d: "
				"mpirun -n 2 " PROG " ...\n", pm_size(b.ctx));
		pm_close(b.ctx);
		return 1;
	}
	b.peer = 1 - b.rank;

	hello(&b);
	if (b.rank == 1) {
		serve(&b);
	} else {
		const char *device = b.opt.device ? b.opt.device : getenv("PM_DEVICE");

		if (!device || !*device)
			device = "composite";
		for (int t = 0; t < T_COUNT; t++) {
			if (!b.opt.tests[t])
				continue;
			if (!b.opt.json)
				print_header(&b, device, (enum test)t);
			/* An atomic is one word whatever the sizes: measured once. */
			int nsizes = t == T_ATOMIC ? 1 : b.opt.nsizes;

			for (int i = 0; i < nsizes; i++) {
				struct result r;

				measure(&b, (enum test)t, t == T_ATOMIC ? 8 : b.opt.sizes[i], &r);
				if (b.opt.json)
					print_json(&b, device, &r);
				else
					print_row(&r);
			}
		}
		b.doing = "quitting";
		send_ctl(&b, OP_QUIT, 0, 0, 0, 0, NULL, 0);
		expect_ctl(&b, OP_BYE);
	}
	/* pm_close() does not flush: on a network device the last message may
	 * still await its acknowledgement, and quiescing waits for it.  Rank 1's
	 * BYE is the last word: once it arrived rank 0 may close before it has
	 * acknowledged it, so rank 1 does not fail when its partner is gone. */
	err = pm_quiesce(b.ctx);
	if (err && !(b.rank == 1 && (err == -ETIMEDOUT || err == -ECONNRESET ||
				     err == -EPIPE)))
		die_pm("pm_quiesce", err);
	if (b.mr)
		pm_mr_deregister(b.ctx, b.mr);
	pm_close(b.ctx);
	free(b.src);
	free(b.expect);
	free(b.dst);
	free(b.region);
	return 0;
}
