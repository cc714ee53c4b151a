/* SPDX-License-Identifier: MIT */
/*
 * mpi_common.h - what the MPI versions of the example programs share: the
 * start (MPI_Init, fail() through MPI_Abort, the arguments), the block of
 * rows with halo rows of jacobi and sor and its exchange, and the
 * gathering of a matrix's blocks of rows on rank 0.
 */
#ifndef DSM_EXAMPLES_MPI_COMMON_H
#define DSM_EXAMPLES_MPI_COMMON_H

#include "common.h"

#include <mpi.h>

#include <stdbool.h>
#include <stdint.h>

/*
 * MPI_Init, this rank and the number of ranks, fail() ending every rank
 * (MPI_Abort), and options_parse on every rank (rank 0 prints).
 * row_per_rank: every rank needs a row of the grid, so a --size less than
 * the number of ranks is a bad argument.  Returns -1 when the program goes
 * on; else MPI is finalised and the status to exit with is returned.
 */
int mpi_start(struct options *o, enum program p, bool row_per_rank,
              int *argc, char ***argv, int *rank, int *size);

/*
 * A rank's block of rows of an n x n grid (block_range) with a halo row
 * above and below it: local row r (1..rows) is global row lo + r - 1, local
 * rows 0 and rows + 1 are the halos.
 */
struct halo_block {
	uint64_t n, lo, hi, rows;
	uint64_t first, last;   /* the local rows to update: not the grid's boundary rows */
	int up, down;           /* the neighbours, MPI_PROC_NULL at the grid's edges */
};

void halo_block_init(struct halo_block *b, uint64_t n, int rank, int size);

/* The block's part of the grid (xarray, zero-filled; xarray_free): its rows as grid_init_row makes
 * them (kernels.h), the halos zero until the first exchange. */
double *halo_grid(const struct halo_block *b, uint64_t seed);

/* Send the block's edge rows of g to the neighbours, receive their edge
 * rows into the halos (MPI_Sendrecv). */
void halo_exchange(double *g, const struct halo_block *b);

/* Every rank's block of rows of an n x n matrix, in elements, for the
 * collectives: n * n < 2^31 (MAX_N), so the counts fit an int.  Two
 * arrays of size entries (xmalloc). */
void row_counts(uint64_t n, int size, int **counts, int **displs);

/* Gather every rank's block of rows (rows x n doubles at mine) into an
 * n x n matrix on rank 0 (MPI_Gatherv): returns it (xmalloc) on rank 0,
 * NULL on the others. */
double *gather_rows(const double *mine, uint64_t rows, uint64_t n,
                    int rank, int size);

#endif /* DSM_EXAMPLES_MPI_COMMON_H */
