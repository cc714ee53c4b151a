/* SPDX-License-Identifier: MIT */
/*
 * common.c - argument parsing, input generator, timing, checksum and the
 * result line of the example programs (common.h).
 */
#include "common.h"
#include "pmdsm.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Which options each program takes. */
enum {
	OPT_N = 1 << 0,
	OPT_ITERATIONS = 1 << 1,
	OPT_OMEGA = 1 << 2,
	OPT_ITEMS = 1 << 3,
	OPT_BINS = 1 << 4,
	OPT_CHUNK = 1 << 5,
	OPT_BARRIER = 1 << 6,   /* the MPI version only */
	OPT_NEIGHBOURS = 1 << 7,        /* the DSM version only */
};

struct program_desc {
	const char *name;
	unsigned opts;
	const char *what;
};

static const struct program_desc programs[] = {
	[PROG_JACOBI] = { "jacobi", OPT_N | OPT_ITERATIONS | OPT_BARRIER | OPT_NEIGHBOURS,
		"2-D 5-point Jacobi stencil on an N x N grid of doubles with fixed\n"
		"boundary values: every sweep computes a new grid from the old one." },
	[PROG_SOR] = { "sor", OPT_N | OPT_ITERATIONS | OPT_OMEGA,
		"Red-black successive over-relaxation on an N x N grid of doubles with\n"
		"fixed boundary values: every iteration a red sweep, then a black one." },
	[PROG_MATMUL] = { "matmul", OPT_N,
		"C = A x B for N x N matrices of doubles." },
	[PROG_HISTOGRAM] = { "histogram", OPT_ITEMS | OPT_BINS | OPT_CHUNK,
		"Histogram of M generated items into K bins of 64-bit counters; the\n"
		"items are cut into tasks of irregular size (CHUNK on average)." },
};

/* The options of program d in this version: --barrier is the MPI
 * version's, --neighbours the DSM version's. */
static unsigned options_of(const struct program_desc *d, const char *version)
{
	unsigned drop = OPT_BARRIER | OPT_NEIGHBOURS;

	if (strcmp(version, "mpi") == 0)
		drop = OPT_NEIGHBOURS;
	else if (strcmp(version, "dsm") == 0)
		drop = OPT_BARRIER;
	return d->opts & ~drop;
}

static const char *version_what(const char *version)
{
	if (strcmp(version, "dsm") == 0)
		return "This is the DSM version (libpmdsm): run it under a PMIx launcher\n"
		       "(scrun, srun --mpi=pmix, mpirun) or alone as a job of one.";
	if (strcmp(version, "mpi") == 0)
		return "This is the MPI version: run it with mpirun (or srun --mpi=pmix).";
	return "This is the sequential version, the reference of the other two.";
}

static char prog_name[64] = "example";
static void (*fail_hook)(int status);

void set_fail_hook(void (*hook)(int status))
{
	fail_hook = hook;
}

void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	if (fail_hook)
		fail_hook(1);
	exit(1);
}

void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (!p)
		fail("out of memory (%zu bytes)", size);
	return p;
}

void *xcalloc(size_t count, size_t size)
{
	void *p = calloc(count ? count : 1, size ? size : 1);

	if (!p)
		fail("out of memory (%zu x %zu bytes)", count, size);
	return p;
}

/* xarray's range: reserved (PROT_NONE, no memory), opened per array. */
#define ARRAY_RESERVE     ((size_t)256 << 30)
#define ARRAY_MAX         64

static struct {
	uint8_t *base;
	size_t used;                    /* bytes of the range handed out or skipped */
	unsigned ncoloured;             /* live arrays of PMDSM_COLOUR_MIN_PAGES or more */
	struct { void *p; size_t len; } live[ARRAY_MAX];
} arrays;

void *xarray(size_t count, size_t size)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t bytes = (count ? count : 1) * (size ? size : 1);
	size_t len = (bytes + page - 1) & ~(page - 1);

	if (size && bytes / size != (count ? count : 1))
		fail("array of %zu x %zu bytes: too large", count, size);
	if (!arrays.base) {
		void *r = mmap(NULL, ARRAY_RESERVE, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

		if (r == MAP_FAILED)
			fail("cannot reserve address space for arrays: %s", strerror(errno));
		arrays.base = r;
	}
	if (len / page >= PMDSM_COLOUR_MIN_PAGES)
		arrays.used += (size_t)pmdsm_colour_pages(arrays.ncoloured++) * page;
	if (arrays.used > ARRAY_RESERVE || len > ARRAY_RESERVE - arrays.used)
		fail("out of memory (%zu bytes): the arrays' range is used up", bytes);

	unsigned slot = 0;

	while (slot < ARRAY_MAX && arrays.live[slot].p)
		slot++;
	if (slot == ARRAY_MAX)
		fail("more than %d arrays", ARRAY_MAX);

	uint8_t *p = arrays.base + arrays.used;

	if (mprotect(p, len, PROT_READ | PROT_WRITE) < 0)
		fail("out of memory (%zu bytes): %s", bytes, strerror(errno));
	arrays.used += len;
	arrays.live[slot].p = p;
	arrays.live[slot].len = len;
	return p;
}

void xarray_free(void *p)
{
	if (!p)
		return;
	for (unsigned i = 0; i < ARRAY_MAX; i++)
		if (arrays.live[i].p == p) {
			/* Back to reserved: the memory goes, the place is not reused. */
			if (mmap(p, arrays.live[i].len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
				 MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
				fail("cannot free an array: %s", strerror(errno));
			arrays.live[i].p = NULL;
			if (arrays.live[i].len / (size_t)sysconf(_SC_PAGESIZE) >=
			    PMDSM_COLOUR_MIN_PAGES)
				arrays.ncoloured--;
			return;
		}
	fail("xarray_free(%p): not an array of xarray", p);
}

static void usage(const struct program_desc *d, const char *version, FILE *f)
{
	fprintf(f, "usage: %s_%s [options]\n\n%s\n%s\n\noptions:\n",
	        d->name, version, d->what, version_what(version));
	if (d->opts & OPT_N)
		fprintf(f, "  -n, --size N         side of the %s (default %u; %u..%u)\n",
		        d->opts & OPT_ITERATIONS ? "grid" : "matrices",
		        d->opts & OPT_ITERATIONS ? 512u : 256u,
		        d->opts & OPT_ITERATIONS ? 3u : 1u, MAX_N);
	if (d->opts & OPT_ITERATIONS)
		fprintf(f, "  -i, --iterations N   iterations (default 100; 0..%u)\n",
		        MAX_ITERATIONS);
	if (d->opts & OPT_OMEGA)
		fprintf(f, "  -w, --omega W        relaxation factor, 0 < W < 2 (default 1.5)\n");
	if (d->opts & OPT_ITEMS)
		fprintf(f, "  -m, --items M        items (default 1000000; 1..%" PRIu64 ")\n",
		        MAX_ITEMS);
	if (d->opts & OPT_BINS)
		fprintf(f, "  -k, --bins K         bins (default 256; 1..%u)\n", MAX_BINS);
	if (d->opts & OPT_CHUNK)
		fprintf(f, "  -c, --chunk C        mean items per task (default 10000; 1..M)\n");
	if (options_of(d, version) & OPT_BARRIER)
		fprintf(f, "      --barrier        every rank waits for all the others after each\n"
		        "                       sweep (MPI_Barrier), as the DSM version does in\n"
		        "                       pmdsm_barrier; by default a rank waits only for\n"
		        "                       its neighbours' rows\n");
	if (options_of(d, version) & OPT_NEIGHBOURS)
		fprintf(f, "      --neighbours     every rank meets only its two neighbours after\n"
		        "                       each sweep (pmdsm_barrier_with), as the MPI\n"
		        "                       version waits for their rows; by default all\n"
		        "                       ranks meet (pmdsm_barrier)\n"
		        "      --split          as --neighbours, in two halves: a rank notifies\n"
		        "                       its neighbours once its edge rows are computed\n"
		        "                       and waits for theirs after its interior rows\n"
		        "                       (pmdsm_barrier_with_notify, _wait)\n");
	fprintf(f,
	        "  -s, --seed S         seed of the input generator (default 1)\n"
	        "      --check          %s\n"
	        "  -h, --help           show this text\n\n"
	        "Prints one JSON line (on rank 0): program, version, the parameters,\n"
	        "ranks, seconds (the compute phase) and checksum (FNV-1a of the result).\n",
	        strcmp(version, "seq") == 0
	                ? "accepted for symmetry (this is the reference)"
	                : "compute the sequential result on rank 0 too; exit 1 if they differ");
}

/* A decimal number in [min, max], nothing else. */
static bool parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (*s < '0' || *s > '9')       /* no sign, no space */
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return false;
	*out = v;
	return true;
}

int options_parse(struct options *o, enum program p, const char *version,
                  int argc, char **argv, bool loud)
{
	const struct program_desc *d = &programs[p];
	enum { LONG_CHECK = 256, LONG_BARRIER, LONG_NEIGHBOURS, LONG_SPLIT };
	const struct option all[] = {
		{ "size", required_argument, NULL, 'n' },
		{ "iterations", required_argument, NULL, 'i' },
		{ "omega", required_argument, NULL, 'w' },
		{ "items", required_argument, NULL, 'm' },
		{ "bins", required_argument, NULL, 'k' },
		{ "chunk", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 's' },
		{ "check", no_argument, NULL, LONG_CHECK },
		{ "help", no_argument, NULL, 'h' },
		{ "barrier", no_argument, NULL, LONG_BARRIER },
		{ "neighbours", no_argument, NULL, LONG_NEIGHBOURS },
		{ "split", no_argument, NULL, LONG_SPLIT },
	};
	const unsigned need[] = { OPT_N, OPT_ITERATIONS, OPT_OMEGA, OPT_ITEMS,
	                          OPT_BINS, OPT_CHUNK, 0, 0, 0, OPT_BARRIER, OPT_NEIGHBOURS,
	                          OPT_NEIGHBOURS };
	struct option longopts[sizeof all / sizeof all[0] + 1];
	char shortopts[32] = ":";
	size_t nl = 0;
	bool chunk_given = false;
	int c;

	snprintf(prog_name, sizeof prog_name, "%s_%s", d->name, version);
	*o = (struct options){
		.program = p,
		.name = d->name,
		.version = version,
		.n = p == PROG_MATMUL ? 256 : 512,
		.iterations = 100,
		.omega = 1.5,
		.items = 1000000,
		.bins = 256,
		.chunk = 10000,
		.seed = 1,
	};

	/* Only the options of this program exist for getopt. */
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
		if (need[i] && !(options_of(d, version) & need[i]))
			continue;
		longopts[nl++] = all[i];
		if (all[i].val < 256) {
			size_t len = strlen(shortopts);
			shortopts[len++] = (char)all[i].val;
			if (all[i].has_arg == required_argument)
				shortopts[len++] = ':';
			shortopts[len] = '\0';
		}
	}
	longopts[nl] = (struct option){ 0 };

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		const char *bad = NULL;

		switch (c) {
		case 'n':
			if (!parse_u64(optarg, p == PROG_MATMUL ? 1 : 3, MAX_N, &o->n))
				bad = p == PROG_MATMUL ? "--size wants an integer in 1..46340"
				                       : "--size wants an integer in 3..46340";
			break;
		case 'i':
			if (!parse_u64(optarg, 0, MAX_ITERATIONS, &o->iterations))
				bad = "--iterations wants an integer in 0..1000000000";
			break;
		case 'w': {
			char *end;

			errno = 0;
			o->omega = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(o->omega) ||
			    !(o->omega > 0.0 && o->omega < 2.0))
				bad = "--omega wants a number with 0 < omega < 2";
			break;
		}
		case 'm':
			if (!parse_u64(optarg, 1, MAX_ITEMS, &o->items))
				bad = "--items wants an integer in 1..4294967296";
			break;
		case 'k':
			if (!parse_u64(optarg, 1, MAX_BINS, &o->bins))
				bad = "--bins wants an integer in 1..1048576";
			break;
		case 'c':
			if (!parse_u64(optarg, 1, MAX_ITEMS, &o->chunk))
				bad = "--chunk wants an integer in 1..4294967296";
			chunk_given = true;
			break;
		case 's':
			if (!parse_u64(optarg, 0, UINT64_MAX, &o->seed))
				bad = "--seed wants an unsigned 64-bit integer";
			break;
		case LONG_CHECK:
			o->check = true;
			break;
		case LONG_BARRIER:
			o->barrier = true;
			break;
		case LONG_NEIGHBOURS:
			o->neighbours = true;
			break;
		case LONG_SPLIT:
			o->neighbours = o->split = true;
			break;
		case 'h':
			if (loud)
				usage(d, version, stdout);
			return 0;
		case ':':
			if (loud)
				fprintf(stderr, "%s: %s wants a value\n", prog_name, argv[optind - 1]);
			goto bad_usage;
		default:
			if (loud) {
				if (optopt && optopt < 256)
					fprintf(stderr, "%s: unknown option -%c\n", prog_name, optopt);
				else
					fprintf(stderr, "%s: unknown option %s\n", prog_name,
					        argv[optind - 1]);
			}
			goto bad_usage;
		}
		if (bad) {
			if (loud)
				fprintf(stderr, "%s: %s, not '%s'\n", prog_name, bad, optarg);
			goto bad_usage;
		}
	}
	if (optind < argc) {
		if (loud)
			fprintf(stderr, "%s: unexpected argument '%s'\n", prog_name, argv[optind]);
		goto bad_usage;
	}
	if (p == PROG_HISTOGRAM && o->chunk > o->items) {
		if (!chunk_given) {
			o->chunk = o->items;
		} else {
			if (loud)
				fprintf(stderr, "%s: --chunk %" PRIu64 " is more than the %" PRIu64
				        " items\n", prog_name, o->chunk, o->items);
			goto bad_usage;
		}
	}
	return -1;

bad_usage:
	if (loud)
		fprintf(stderr, "Try '%s --help'.\n", prog_name);
	return 2;
}

const char *program_name(enum program p)
{
	return programs[p].name;
}

/* splitmix64's finaliser (Steele, Lea, Flood 2014). */
static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t gen_u64(uint64_t seed, uint64_t stream, uint64_t index)
{
	uint64_t z = mix64(index + UINT64_C(0x9e3779b97f4a7c15) * (stream + 1));

	return mix64(z ^ mix64(seed + UINT64_C(0x632be59bd9b4e019)));
}

double gen_unit(uint64_t seed, uint64_t stream, uint64_t index)
{
	return (double)(gen_u64(seed, stream, index) >> 11) * 0x1.0p-53;
}

void block_range(uint64_t n, int parts, int part, uint64_t *lo, uint64_t *hi)
{
	/* n < 2^33 and parts < 2^31: the products fit in 64 bits. */
	*lo = n * (uint64_t)part / (uint64_t)parts;
	*hi = n * ((uint64_t)part + 1) / (uint64_t)parts;
}

double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t fnv1a64(const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

void print_result(const struct options *o, int ranks, double seconds,
                  uint64_t checksum)
{
	printf("{\"program\": \"%s\", \"version\": \"%s\"", o->name, o->version);
	switch (o->program) {
	case PROG_JACOBI:
		printf(", \"n\": %" PRIu64 ", \"iterations\": %" PRIu64, o->n, o->iterations);
		if (o->barrier)
			printf(", \"barrier\": true");
		if (o->neighbours)
			printf(", \"neighbours\": true");
		if (o->split)
			printf(", \"split\": true");
		break;
	case PROG_SOR:
		printf(", \"n\": %" PRIu64 ", \"iterations\": %" PRIu64 ", \"omega\": %.17g",
		       o->n, o->iterations, o->omega);
		break;
	case PROG_MATMUL:
		printf(", \"n\": %" PRIu64, o->n);
		break;
	case PROG_HISTOGRAM:
		printf(", \"items\": %" PRIu64 ", \"bins\": %" PRIu64 ", \"chunk\": %" PRIu64,
		       o->items, o->bins, o->chunk);
		break;
	}
	printf(", \"seed\": %" PRIu64 ", \"ranks\": %d, \"seconds\": %.9f, "
	       "\"checksum\": \"%016" PRIx64 "\"}\n",
	       o->seed, ranks, seconds, checksum);
	fflush(stdout);
}

int check_checksum(uint64_t got, uint64_t want)
{
	if (got == want)
		return 0;
	fprintf(stderr, "%s: check failed: checksum %016" PRIx64
	        " differs from the sequential result's %016" PRIx64 "\n",
	        prog_name, got, want);
	return 1;
}

int report_result(const struct options *o, int ranks, double seconds,
                  const void *result, size_t bytes,
                  uint64_t (*reference)(const struct options *o))
{
	uint64_t sum = fnv1a64(result, bytes);

	print_result(o, ranks, seconds, sum);
	return o->check ? check_checksum(sum, reference(o)) : 0;
}
