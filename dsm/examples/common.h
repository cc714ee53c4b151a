/* SPDX-License-Identifier: MIT */
/*
 * common.h - what the sequential, DSM and MPI versions of the example
 * programs share: argument parsing, the deterministic input generator,
 * block partitions, timing, the checksum and the result line.
 *
 * The arithmetic of each program lives in kernels.h, also shared, so that
 * every version computes every element with the same code.
 */
#ifndef DSM_EXAMPLES_COMMON_H
#define DSM_EXAMPLES_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum program {
	PROG_JACOBI,
	PROG_SOR,
	PROG_MATMUL,
	PROG_HISTOGRAM,
};

/* Limits of the arguments (README.md).  MAX_N keeps n * n below 2^31, the
 * element counts of the MPI versions' collectives. */
#define MAX_N 46340u
#define MAX_ITERATIONS 1000000000u
#define MAX_ITEMS (UINT64_C(1) << 32)
#define MAX_BINS (1u << 20)

struct options {
	enum program program;
	const char *name;          /* "jacobi", ... */
	const char *version;       /* "seq", "dsm" or "mpi" */
	uint64_t n;                /* jacobi, sor, matmul: side of the grid/matrices */
	uint64_t iterations;       /* jacobi, sor */
	double omega;              /* sor: the relaxation factor */
	uint64_t items;            /* histogram: number of items */
	uint64_t bins;             /* histogram: number of bins */
	uint64_t chunk;            /* histogram: mean items per task */
	uint64_t seed;             /* input generator's seed */
	bool check;                /* compare with the sequential result */
	bool barrier;              /* jacobi_mpi: MPI_Barrier after every sweep */
	bool neighbours;           /* jacobi_dsm: pmdsm_barrier_with the two
	                              neighbours after every sweep, not
	                              pmdsm_barrier */
	bool split;                /* jacobi_dsm: and in two halves, the
	                              interior rows computed between them
	                              (implies neighbours) */
};

/*
 * Parse the command line of program p in version v ("seq", "dsm", "mpi").
 * Returns -1 when the program should go on, else the status to exit with:
 * 0 after --help, 2 after a bad argument.  Prints (usage on stdout, errors
 * on stderr) only if loud: the parallel versions parse on every rank and
 * let rank 0 speak.
 */
int options_parse(struct options *o, enum program p, const char *version,
                  int argc, char **argv, bool loud);

/* The program's name ("jacobi", ...), for messages before options_parse. */
const char *program_name(enum program p);

/*
 * Fatal errors: print "<name>_<version>: message" on stderr and end the
 * process through the hook (exit(1) unless set: the MPI versions set
 * MPI_Abort so that the other ranks end too).
 */
void set_fail_hook(void (*hook)(int status));
_Noreturn void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);

/*
 * The large arrays of the sequential and MPI versions, zero-filled and
 * laid out as pmdsm_alloc lays out the DSM version's (dsm/src/heap.c,
 * colour_gap): end to end, page-aligned, one of 1 MiB or more made while k
 * such arrays are live (17 k mod 64) pages after the end of the one
 * before (freed ones are not used again).  The versions then
 * differ in how they share their arrays, not in where the arrays sit: two
 * grids malloc()ed apart land at a distance of glibc's and the kernel's
 * choosing, and a stencil's speed depends on it.  Freed with xarray_free.
 */
void *xarray(size_t count, size_t size);
void xarray_free(void *p);

/*
 * Deterministic input: a 64-bit value for (seed, stream, index), a hash of
 * the three (splitmix64's finaliser), so that any rank generates any
 * element without generating the ones before it.
 */
uint64_t gen_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1), with 53 random bits. */
double gen_unit(uint64_t seed, uint64_t stream, uint64_t index);

/* Part `part` of `parts` of 0..n-1 in contiguous blocks: [*lo, *hi),
 * with lo = n * part / parts (sizes differ by at most one). */
void block_range(uint64_t n, int parts, int part, uint64_t *lo, uint64_t *hi);

/* CLOCK_MONOTONIC in seconds. */
double now_seconds(void);

/* 64-bit FNV-1a over len bytes. */
uint64_t fnv1a64(const void *data, size_t len);

/*
 * Print the result line on stdout (rank 0 only), e.g.
 * {"program": "jacobi", "version": "dsm", "n": 512, "iterations": 100,
 *  "seed": 1, "ranks": 4, "seconds": 0.123456, "checksum": "..."}
 */
void print_result(const struct options *o, int ranks, double seconds,
                  uint64_t checksum);

/* --check: 0 if got == want, else a message on stderr and 1. */
int check_checksum(uint64_t got, uint64_t want);

/*
 * Rank 0's end of a parallel version: print the result line with the
 * checksum of the result's bytes and, under --check, compare it with
 * reference(o), the sequential computation (kernels.h).  Returns 0, or 1
 * when the check failed.
 */
int report_result(const struct options *o, int ranks, double seconds,
                  const void *result, size_t bytes,
                  uint64_t (*reference)(const struct options *o));

#endif /* DSM_EXAMPLES_COMMON_H */
