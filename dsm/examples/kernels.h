/* SPDX-License-Identifier: MIT */
/*
 * kernels.h - the arithmetic of the example programs, shared by the
 * sequential, DSM and MPI versions so that every element of every result
 * is computed by the same code, in the same order, whichever version and
 * however many ranks: the results are bit-identical.
 *
 * Each program also has its whole sequential computation here
 * (<program>_reference), which the parallel versions run on rank 0 under
 * --check.
 */
#ifndef DSM_EXAMPLES_KERNELS_H
#define DSM_EXAMPLES_KERNELS_H

#include "common.h"

#include <stdint.h>

/* Streams of the input generator (gen_u64). */
enum {
	STREAM_GRID = 0,
	STREAM_A = 1,
	STREAM_B = 2,
	STREAM_ITEMS = 3,
	STREAM_TASKS = 4,
};

/*
 * Jacobi and SOR: an n x n grid of doubles, row-major.  Rows 0 and n-1 and
 * columns 0 and n-1 are the fixed boundary; only the interior is updated.
 * Point (i, j) starts as gen_unit(seed, STREAM_GRID, i * n + j).
 */
void grid_init_row(double *row, uint64_t n, uint64_t seed, uint64_t i);

/* One row of a Jacobi sweep: out[j] for the interior columns j, from the
 * rows above, at and below it in the previous grid. */
void jacobi_row(double *restrict out, const double *restrict up,
                const double *restrict mid, const double *restrict down,
                uint64_t n);

/* Iterations of Jacobi on a and b (both initialised); returns the one
 * holding the result. */
double *jacobi_sweeps(double *a, double *b, uint64_t n, uint64_t iterations);

/* One colour of one row of a red-black SOR sweep, in place: the interior
 * points (i, j) of row i with (i + j) % 2 == colour (0 red, 1 black).
 * Their neighbours are all of the other colour. */
void sor_row(double *mid, const double *up, const double *down, uint64_t n,
             uint64_t i, unsigned colour, double omega);

/* Iterations of red-black SOR on g. */
void sor_sweeps(double *g, uint64_t n, uint64_t iterations, double omega);

/*
 * Matrix multiply: A[i][k] = gen_unit(seed, STREAM_A, i * n + k) - 0.5,
 * B likewise from STREAM_B.  C[i][j] is summed over k = 0, 1, ..., n-1 in
 * that order, from 0.0.
 */
void matrix_init_row(double *row, uint64_t n, uint64_t seed, uint64_t stream,
                     uint64_t i);
void matmul_row(double *restrict c, const double *restrict a,
                const double *restrict b, uint64_t n);

/*
 * Histogram: item i is the 32-bit value gen_u64(seed, STREAM_ITEMS, i) >> 32;
 * its bin is floor(bins * (x / 2^32)^2), so low bins get more items.  The
 * items are cut into tasks of irregular sizes, chunk on average: task t is
 * items [starts[t], starts[t + 1]).
 */
uint32_t item_value(uint64_t seed, uint64_t i);
static inline uint64_t bin_of(uint32_t x, uint64_t bins)
{
	return (((uint64_t)x * x) >> 32) * bins >> 32;
}
/* An upper bound of the number of tasks, for the size of starts[]. */
uint64_t histogram_max_tasks(uint64_t items, uint64_t chunk);
/* Fill starts[0..ntasks] (histogram_max_tasks + 1 entries); returns ntasks. */
uint64_t histogram_tasks(uint64_t seed, uint64_t items, uint64_t chunk,
                         uint64_t *starts);
/* Count count items into hist[bins]. */
void histogram_count(const uint32_t *items, uint64_t count, uint64_t bins,
                     uint64_t *hist);

/* The sequential computations, from the input to the checksum. */
uint64_t jacobi_reference(const struct options *o);
uint64_t sor_reference(const struct options *o);
uint64_t matmul_reference(const struct options *o);
uint64_t histogram_reference(const struct options *o);

#endif /* DSM_EXAMPLES_KERNELS_H */
