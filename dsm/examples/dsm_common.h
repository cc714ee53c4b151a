/* SPDX-License-Identifier: MIT */
/*
 * dsm_common.h - what the DSM versions of the example programs share: the
 * start (pmdsm_init, the arguments), the end (pmdsm_finalize), and
 * libpmdsm's calls that end the program with a message when they fail.
 */
#ifndef DSM_EXAMPLES_DSM_COMMON_H
#define DSM_EXAMPLES_DSM_COMMON_H

#include "common.h"

#include <pmdsm.h>

#include <stdint.h>

/*
 * pmdsm_init, this rank and the number of ranks, and options_parse on
 * every rank (rank 0 prints).  Returns -1 when the program goes on; else
 * the status to exit with (1 when pmdsm_init failed, after a message; the
 * status of options_parse, after pmdsm_finalize).
 */
int dsm_start(struct options *o, enum program p, int argc, char **argv,
              int *rank, int *size);

/* pmdsm_finalize (fail() when it fails); returns status. */
int dsm_finish(int status);

/* pmdsm_barrier, or fail(). */
void dsm_barrier(void);

/* pmdsm_barrier_with, pmdsm_barrier_with_notify, _wait, or fail(). */
void dsm_barrier_with(const int *peers, unsigned n);
void dsm_barrier_with_notify(const int *peers, unsigned n);
void dsm_barrier_with_wait(void);

/* pmdsm_malloc of bytes for what ("grid", ...), or fail(). */
void *dsm_shared(uint64_t bytes, const char *what);

/* pmdsm_free, or fail(). */
void dsm_free(void *p);

#endif /* DSM_EXAMPLES_DSM_COMMON_H */
