/* SPDX-License-Identifier: MIT */
/*
 * mp.h - what the multi-process PM tests share.  Each test is one program
 * started by Open MPI's mpirun (PMIx bootstrap); it uses only the public API.
 *
 * Every wait is bounded: a test has a time budget (mp_open) and each helper
 * fails the test, with the rank and the call that hung, when the budget is
 * spent.  An alarm a few seconds later is the backstop for a hang inside a
 * call that does not return.
 */
#ifndef PM_TESTS_MP_H
#define PM_TESTS_MP_H

#include "check.h"
#include "pm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mp {
	pm_context_t *ctx;
	int rank, size;
	uint64_t deadline_ns;           /* the test fails after this */
	uint64_t barriers;              /* epochs of mp_barrier() done */
	/* Messages taken by mp_barrier() that were not its own, kept
	 * unreleased and in arrival order for mp_recv(). */
	struct pm_msg *stash;
	size_t nstash, capstash;
	/* Barrier messages that came early (while the test was receiving),
	 * kept for mp_barrier(); tests never see them. */
	struct pm_msg *bstash;
	size_t nbstash, capbstash;
	uint64_t barrier_msgs_recv;     /* in the msgs_recv counter too */
};

/*
 * Open the context (collective), tag failures with the rank and start the
 * time budget.  expect_size > 0 checks the job size.  attr may be NULL.
 */
void mp_open(struct mp *m, const struct pm_open_attr *attr, int expect_size,
	     int budget_s);

/* true until the budget is spent. */
bool mp_time_left(const struct mp *m);

/* pm_wait() for at most 100 ms and never past the deadline; fails the test
 * on -ECONNRESET (a peer died) or on an unexpected error. */
void mp_progress(struct mp *m, const char *what);

/* Send len bytes (copied from data, or the check pattern of seed when data
 * is NULL), waiting for space while the receiver catches up. */
void mp_send(struct mp *m, int peer, const void *data, size_t len);
void mp_send_pattern(struct mp *m, int peer, size_t len, uint64_t seed);

/* Take the next message (stashed ones first), waiting up to the deadline.
 * The caller releases it with mp_release(). */
void mp_recv(struct mp *m, struct pm_msg *msg);
/* Like mp_recv() but returns false instead of waiting when none is there. */
bool mp_try_recv(struct mp *m, struct pm_msg *msg);
void mp_release(struct mp *m, const struct pm_msg *msg);

/* All ranks meet (messages through rank 0).  Messages that are not the
 * barrier's are kept for mp_recv(), and barrier messages that arrive
 * while a test receives are kept for mp_barrier(), so traffic may overlap
 * a barrier either way. */
void mp_barrier(struct mp *m);

/*
 * The end of a test: barrier, check that no shared-memory segment of this
 * job is left in /dev/shm (they are unlinked once everyone has attached),
 * close, and check that this process's statistics page is gone.
 */
void mp_close(struct mp *m);

/* Tell the helpers that the test closed the context itself (and check
 * that the context's statistics page went with it). */
void mp_closed(struct mp *m);

/* Files in dir whose names start with prefix (for leftover checks). */
int mp_count_files(const char *dir, const char *prefix);

/* Remove them; returns how many there were. */
int mp_remove_files(const char *dir, const char *prefix);

/* The directory statistics pages go to (PM_STATS_DIR or /dev/shm). */
const char *mp_stats_dir(void);

/* The name prefix "pm-<jobkey>-" of this job's shm segments (docs/pm/shm.md),
 * read off this process's own mapping while the context is open; false when
 * no segment is mapped (no shm device: no local peer). */
bool mp_segment_prefix(char *buf, size_t len);

/* The prefix an attacker who knows the job's name could once compute (the
 * key was the FNV-1a hash of the PMIx namespace): mp_decoy plants there. */
void mp_hashed_segment_prefix(char *buf, size_t len);

#endif /* PM_TESTS_MP_H */
