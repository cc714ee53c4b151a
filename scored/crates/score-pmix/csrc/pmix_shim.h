/* SPDX-License-Identifier: MIT */
/*
 * pmix_shim: the part of scored's PMIx server that touches libpmix's unions,
 * macros and callbacks.  The Rust crate (src/ffi.rs) sees only these plain
 * types and functions.
 *
 * Every function returns a pmix_status_t (PMIX_SUCCESS == 0, errors < 0) as
 * an int, so the Rust side can hand the code to PMIx_Error_string.
 *
 * Threads: libpmix runs its own progress thread.  The upcalls (fence,
 * abort, connect, finalize) run on it and end in the one event function
 * registered with shim_init; that function must not block.  The blocking
 * calls here (register, deregister) wait on a condition variable for
 * libpmix's completion callback, so they must never be called from the
 * event function itself.
 */
#ifndef SCORE_PMIX_SHIM_H
#define SCORE_PMIX_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum shim_event_kind {
	SHIM_EV_FENCE = 1,
	SHIM_EV_ABORT = 2,
	SHIM_EV_CONNECTED = 3,
	SHIM_EV_FINALIZED = 4,
};

/*
 * One upcall, valid only during the event function's call: it copies what
 * it keeps.  For SHIM_EV_FENCE, `fence` is a handle that the event function
 * takes over by returning 0 (then it must pass it to shim_fence_complete
 * exactly once, from any thread but not from within the event function);
 * a non-zero pmix_status_t refuses the fence and the shim frees the handle.
 */
struct shim_event {
	int kind;
	const char *nspace;
	uint32_t rank;		/* ABORT, CONNECTED, FINALIZED */
	int status;		/* ABORT */
	const char *message;	/* ABORT; never NULL */
	const char *data;	/* FENCE: the local contribution */
	size_t ndata;
	int collect;		/* FENCE: PMIX_COLLECT_DATA was requested */
	void *fence;		/* FENCE */
};

typedef int (*shim_event_fn)(const struct shim_event *ev);

/*
 * One job as this node sees it; see JobLayout in src/lib.rs.  Rank r runs
 * on node r / ppn with local rank r % ppn.  The Rust side builds the
 * strings (it has the unit tests for them).
 */
struct shim_job {
	const char *nspace;
	uint32_t uid, gid;
	const char *const *nodes;	/* nnodes host names */
	const char *const *node_peers;	/* per node: its ranks, "4,5,6,7" */
	uint32_t nnodes;
	uint32_t ppn;
	uint32_t node_index;
	const char *hosts;		/* "n0,n1,n2" for PMIx_generate_regex */
	const char *procs;		/* "0,1;2,3;4,5" for PMIx_generate_ppn */
	const char *tmpdir;
	uint64_t pm_jobkey;		/* job-level "pm.jobkey" if not 0 */
};

int shim_init(const char *tmpdir, shim_event_fn fn);
int shim_finalize(void);
int shim_register_job(const struct shim_job *job);
int shim_deregister_job(const char *nspace);

/*
 * The environment a child needs, as a NULL-terminated array of "K=V"
 * strings in *env (free it with shim_free_env).
 */
int shim_setup_fork(const char *nspace, uint32_t rank, char ***env);
void shim_free_env(char **env);

/*
 * Answer a fence: status PMIX_SUCCESS with the job's gathered data, or an
 * error (data ignored).  The data is copied; the handle is consumed.
 */
void shim_fence_complete(void *fence, int status, const char *data, size_t ndata);

const char *shim_error_string(int status);

#ifdef __cplusplus
}
#endif

#endif /* SCORE_PMIX_SHIM_H */
