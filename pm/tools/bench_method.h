/* SPDX-License-Identifier: MIT */
/*
 * bench_method.h - what pmbench (pm/tools) and pmdsm-bench (dsm/tools) do
 * alike: the method of measuring and the plumbing around it.
 *
 *   the method     --reps, --min-time, --warmup and --iters (struct
 *                  bench_method); the iteration count calibrated by
 *                  doubling from 1 until a repetition lasts a quarter of
 *                  --min-time, then scaled to it (bench_calibrate()); the
 *                  repetitions reported as median, min and max
 *                  (bench_summarise()).  Each tool runs its own warm-up and
 *                  repetitions: what it times and how differ.
 *   the plumbing   bench_getopt() (getopt_long() with the method's options,
 *                  --help and the errors of the command line done),
 *                  bench_parse_tests() (--test LIST),
 *                  die(), bad_usage() (exit status 1 and 2), parse_u64(),
 *                  now_s(), and for the JSON output json_string() and fin().
 *
 * Header-only (static inline), private to the two tools.  Before including
 * it a tool defines PROG, its name as a string literal, and short_usage[],
 * its synopsis, which bad_usage() prints; and it defines usage_full(), its
 * --help, anywhere.
 */
#ifndef BENCH_METHOD_H
#define BENCH_METHOD_H

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
#include <time.h>

#ifndef PROG
#error "define PROG (the tool's name) before including bench_method.h"
#endif

#define BENCH_MAX_REPS  1000            /* largest --reps */

/* ---- errors ---- */

/* The rank in the job once it is known, for die()'s messages. */
static int bench_rank = -1;

__attribute__((noreturn, format(printf, 1, 2)))
static inline void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	if (bench_rank >= 0)
		fprintf(stderr, PROG ": rank %d: ", bench_rank);
	else
		fprintf(stderr, PROG ": ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* Before the library is open the rank is known only from the launcher's
 * environment; only rank 0 (or a lone process) talks about the command
 * line. */
static inline bool launcher_rank0(void)
{
	const char *r = getenv("PMIX_RANK");

	if (!r)
		r = getenv("OMPI_COMM_WORLD_RANK");
	return !r || strcmp(r, "0") == 0;
}

__attribute__((noreturn, format(printf, 1, 2)))
static inline void bad_usage(const char *fmt, ...)
{
	va_list ap;

	if (launcher_rank0()) {
		fprintf(stderr, PROG ": ");
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fprintf(stderr, "\n%sTry '" PROG " --help' for more.\n", short_usage);
	}
	exit(2);
}

/* ---- time ---- */

static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the command line ---- */

/* A decimal count from 0 to max: no sign, no leading space. */
static inline bool parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
		return false;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);

	if (errno || *end || v > max)
		return false;
	*out = v;
	return true;
}

struct bench_method {
	int reps;                       /* timed repetitions */
	double min_time;                /* seconds one repetition should last */
	uint64_t warmup;                /* iterations before calibrating */
	uint64_t iters;                 /* per repetition; 0: calibrated */
};

/* The tool's --help. */
static void usage_full(void);

/* The options every tool has, in its getopt_long() table; their codes are
 * above the tools' own. */
enum { BENCH_O_REPS = 512, BENCH_O_MIN_TIME, BENCH_O_WARMUP, BENCH_O_ITERS, BENCH_O_HELP };

#define BENCH_LONGOPTS \
	{ "reps", required_argument, NULL, BENCH_O_REPS }, \
	{ "min-time", required_argument, NULL, BENCH_O_MIN_TIME }, \
	{ "warmup", required_argument, NULL, BENCH_O_WARMUP }, \
	{ "iters", required_argument, NULL, BENCH_O_ITERS }, \
	{ "help", no_argument, NULL, BENCH_O_HELP }

/* One of the method's options into m. */
static inline void bench_method_option(struct bench_method *m, int c, uint64_t max_iters)
{
	uint64_t v;

	switch (c) {
	case BENCH_O_REPS:
		if (!parse_u64(optarg, BENCH_MAX_REPS, &v) || v == 0)
			bad_usage("--reps: '%s' is not a count from 1 to %d", optarg,
				  BENCH_MAX_REPS);
		m->reps = (int)v;
		break;
	case BENCH_O_MIN_TIME: {
		char *end;

		errno = 0;
		m->min_time = strtod(optarg, &end);
		if (errno || end == optarg || *end || !(m->min_time > 0) ||
		    m->min_time > 3600)
			bad_usage("--min-time: '%s' is not a number of seconds "
				  "(0 < SEC <= 3600)", optarg);
		break;
	}
	case BENCH_O_WARMUP:
		if (!parse_u64(optarg, max_iters, &m->warmup))
			bad_usage("--warmup: '%s' is not a count from 0 to %" PRIu64, optarg,
				  max_iters);
		break;
	case BENCH_O_ITERS:
		if (!parse_u64(optarg, max_iters, &m->iters) || m->iters == 0)
			bad_usage("--iters: '%s' is not a count from 1 to %" PRIu64, optarg,
				  max_iters);
		break;
	}
}

/* --test: a comma list of names[0 .. count) and "all", marked in tests[];
 * false when the list has no name at all (",", ""). */
static inline bool bench_parse_tests(const char *arg, const char *const *names, int count,
				     bool *tests)
{
	char *copy = strdup(arg), *save = NULL;
	bool any = false;

	if (!copy)
		die("out of memory");
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int t;

		any = true;
		if (strcmp(tok, "all") == 0) {
			for (t = 0; t < count; t++)
				tests[t] = true;
			continue;
		}
		for (t = 0; t < count && strcmp(tok, names[t]) != 0; t++)
			;
		if (t == count) {
			char known[512];
			size_t len = 0;

			for (int i = 0; i < count && len < sizeof(known); i++)
				len += (size_t)snprintf(known + len, sizeof(known) - len, "%s, ",
							names[i]);
			bad_usage("--test: unknown test '%s' (%sall)", tok, known);
		}
		tests[t] = true;
	}
	free(copy);
	return any;
}

/* getopt_long() over longopts (BENCH_LONGOPTS and the tool's own), with
 * the options every tool has done here: returns the next of the tool's own
 * options, -1 at the end.  --help prints usage_full() and exits 0; an
 * unknown option, a missing value or an argument that is no option exits
 * through bad_usage(). */
static inline int bench_getopt(int argc, char **argv, const struct option *longopts,
			       struct bench_method *m, uint64_t max_iters)
{
	int c;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (c) {
		case BENCH_O_REPS:
		case BENCH_O_MIN_TIME:
		case BENCH_O_WARMUP:
		case BENCH_O_ITERS:
			bench_method_option(m, c, max_iters);
			break;
		case BENCH_O_HELP:
			if (launcher_rank0())
				usage_full();
			exit(0);
		case ':':
			bad_usage("option '%s' needs a value", argv[optind - 1]);
		case '?':
			bad_usage("unknown option '%s'", argv[optind - 1]);
		default:
			return c;
		}
	}
	if (optind < argc)
		bad_usage("unexpected argument '%s'", argv[optind]);
	return -1;
}

/* ---- measuring ---- */

/* The iteration count for one repetition of m->min_time seconds: timed(arg,
 * n) runs n iterations and returns the seconds they took; n doubles from 1
 * until they last a quarter of min_time (or reach max_iters / 2), and is
 * then scaled to min_time, rounded up, from 1 to max_iters. */
static inline uint64_t bench_calibrate(const struct bench_method *m, uint64_t max_iters,
				       double (*timed)(void *arg, uint64_t iters), void *arg)
{
	double target = m->min_time;
	uint64_t iters = 1;

	for (;;) {
		double el = timed(arg, iters);

		if (el >= target / 4 || iters >= max_iters / 2) {
			double n = (double)iters * target / (el > 0 ? el : 1e-9);
			uint64_t whole;

			if (!(n >= 1))
				return 1;
			if (n >= (double)max_iters)
				return max_iters;
			whole = (uint64_t)n;            /* ceil() without libm */
			return (double)whole < n ? whole + 1 : whole;
		}
		iters *= 2;
	}
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median, min and max of v[0 .. reps), 1 <= reps <= BENCH_MAX_REPS. */
static inline void bench_summarise(const double *v, int reps, double *median, double *min,
				   double *max)
{
	double s[BENCH_MAX_REPS];

	memcpy(s, v, sizeof(double) * (size_t)reps);
	qsort(s, (size_t)reps, sizeof(double), bench_cmp_double);
	*min = s[0];
	*max = s[reps - 1];
	*median = reps % 2 ? s[reps / 2] : (s[reps / 2 - 1] + s[reps / 2]) / 2;
}

/* ---- JSON ---- */

static inline void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* Finite numbers only: JSON has no NaN. */
static inline double fin(double v)
{
	return isfinite(v) ? v : 0.0;
}

#endif /* BENCH_METHOD_H */
