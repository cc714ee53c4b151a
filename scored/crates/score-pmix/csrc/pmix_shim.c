/* SPDX-License-Identifier: MIT */
/*
 * pmix_shim: scored's PMIx server, the C half.  See pmix_shim.h for the
 * contract and ../README.md for the model.
 */
#include "pmix_shim.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pmix.h>
#include <pmix_server.h>

/* ---- waiting for libpmix's completion callbacks ---- */

/*
 * libpmix completes register/deregister on its progress thread; the
 * callers here want a plain blocking call, so they park on one of these.
 */
struct shim_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	pmix_status_t status;
};

static void wait_init(struct shim_wait *w)
{
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->done = false;
	w->status = PMIX_SUCCESS;
}

static void wait_fini(struct shim_wait *w)
{
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

static void wait_op_cb(pmix_status_t status, void *cbdata)
{
	struct shim_wait *w = cbdata;

	pthread_mutex_lock(&w->lock);
	w->status = status;
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

static pmix_status_t wait_for(struct shim_wait *w)
{
	pthread_mutex_lock(&w->lock);
	while (!w->done)
		pthread_cond_wait(&w->cond, &w->lock);
	pthread_mutex_unlock(&w->lock);
	return w->status;
}

/*
 * The usual libpmix non-blocking call: PMIX_SUCCESS means "the callback
 * will come", PMIX_OPERATION_SUCCEEDED "done already, no callback", any
 * other value "failed, no callback".
 */
static pmix_status_t wait_result(struct shim_wait *w, pmix_status_t rc)
{
	if (rc == PMIX_SUCCESS)
		return wait_for(w);
	if (rc == PMIX_OPERATION_SUCCEEDED)
		return PMIX_SUCCESS;
	return rc;
}

/* ---- upcalls from libpmix's progress thread ---- */

static shim_event_fn event_fn;

struct shim_fence {
	pmix_modex_cbfunc_t cbfunc;
	void *cbdata;
};

/* The buffer handed back with a fence result lives until libpmix frees it. */
struct shim_blob {
	size_t len;
	char bytes[];
};

static void blob_release(void *cbdata)
{
	free(cbdata);
}

static int emit(const struct shim_event *ev)
{
	return event_fn ? event_fn(ev) : PMIX_ERR_INIT;
}

static pmix_status_t up_fence(const pmix_proc_t procs[], size_t nprocs,
			      const pmix_info_t info[], size_t ninfo, char *data, size_t ndata,
			      pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
	struct shim_event ev = { .kind = SHIM_EV_FENCE, .message = "" };
	struct shim_fence *f;
	int rc;

	/*
	 * scored fences whole jobs only: a fence over a subset of ranks or
	 * over several namespaces (after PMIx_Connect) would need the master
	 * to know the participants, which it does not.
	 */
	if (nprocs != 1 || procs[0].rank != PMIX_RANK_WILDCARD)
		return PMIX_ERR_NOT_SUPPORTED;
	if (!event_fn)
		return PMIX_ERR_INIT;
	f = malloc(sizeof(*f));
	if (!f)
		return PMIX_ERR_NOMEM;
	f->cbfunc = cbfunc;
	f->cbdata = cbdata;
	for (size_t i = 0; i < ninfo; i++)
		if (PMIX_CHECK_KEY(&info[i], PMIX_COLLECT_DATA))
			ev.collect = PMIX_INFO_TRUE(&info[i]);
	ev.nspace = procs[0].nspace;
	ev.rank = PMIX_RANK_WILDCARD;
	ev.data = data;
	ev.ndata = ndata;
	ev.fence = f;
	/* Accepted: the event function owns f.  Refused: no callback will come. */
	rc = emit(&ev);
	if (rc != PMIX_SUCCESS)
		free(f);
	return rc;
}

static pmix_status_t up_direct_modex(const pmix_proc_t *proc, const pmix_info_t info[],
				     size_t ninfo, pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
	(void)proc, (void)info, (void)ninfo, (void)cbfunc, (void)cbdata;
	/* Every fence collects all data, so there is nothing to fetch later. */
	return PMIX_ERR_NOT_SUPPORTED;
}

static pmix_status_t up_abort(const pmix_proc_t *proc, void *server_object, int status,
			      const char msg[], pmix_proc_t procs[], size_t nprocs,
			      pmix_op_cbfunc_t cbfunc, void *cbdata)
{
	struct shim_event ev = {
		.kind = SHIM_EV_ABORT,
		.nspace = proc->nspace,
		.rank = proc->rank,
		.status = status,
		.message = msg ? msg : "",
	};

	(void)server_object, (void)procs, (void)nprocs;
	(void)emit(&ev);
	/*
	 * The agent kills the job; the caller only waits for this reply.
	 * Answering inline is safe: libpmix touches nothing of cbdata after
	 * we return PMIX_SUCCESS.
	 */
	if (cbfunc)
		cbfunc(PMIX_SUCCESS, cbdata);
	return PMIX_SUCCESS;
}

static pmix_status_t up_connected(const pmix_proc_t *proc, void *server_object,
				  pmix_info_t info[], size_t ninfo, pmix_op_cbfunc_t cbfunc,
				  void *cbdata)
{
	struct shim_event ev = {
		.kind = SHIM_EV_CONNECTED, .nspace = proc->nspace, .rank = proc->rank,
		.message = "",
	};

	(void)server_object, (void)info, (void)ninfo, (void)cbfunc, (void)cbdata;
	(void)emit(&ev);
	/*
	 * "Done, no callback": libpmix 4.2 passes a NULL cbfunc here and
	 * accepts this answer, later versions accept it too.
	 */
	return PMIX_OPERATION_SUCCEEDED;
}

static pmix_status_t up_finalized(const pmix_proc_t *proc, void *server_object,
				  pmix_op_cbfunc_t cbfunc, void *cbdata)
{
	struct shim_event ev = {
		.kind = SHIM_EV_FINALIZED, .nspace = proc->nspace, .rank = proc->rank,
		.message = "",
	};

	(void)server_object, (void)cbfunc, (void)cbdata;
	(void)emit(&ev);
	/*
	 * Not an inline cbfunc call: on a lost connection libpmix still
	 * touches the peer after a PMIX_SUCCESS return, and the callback may
	 * release it.
	 */
	return PMIX_OPERATION_SUCCEEDED;
}

static pmix_server_module_t shim_module = {
	.client_connected2 = up_connected,
	.client_finalized = up_finalized,
	.abort = up_abort,
	.fence_nb = up_fence,
	.direct_modex = up_direct_modex,
};

/* ---- server life ---- */

int shim_init(const char *tmpdir, shim_event_fn fn)
{
	bool no = false;
	pmix_info_t info[4];
	pmix_status_t rc;

	/*
	 * The given directory takes the rendezvous files and the client
	 * connection files.  No system server: several agents share this
	 * host's file system, and a system-level rendezvous file would be
	 * found by the wrong agent's clients.
	 */
	PMIX_INFO_LOAD(&info[0], PMIX_SERVER_TMPDIR, tmpdir, PMIX_STRING);
	PMIX_INFO_LOAD(&info[1], PMIX_SYSTEM_TMPDIR, tmpdir, PMIX_STRING);
	PMIX_INFO_LOAD(&info[2], PMIX_SERVER_SYSTEM_SUPPORT, &no, PMIX_BOOL);
	PMIX_INFO_LOAD(&info[3], PMIX_SERVER_TOOL_SUPPORT, &no, PMIX_BOOL);
	/*
	 * Job data in the hash store, served over the socket, not in the
	 * shared-memory stores (ds12/ds21): their segments and lock files live
	 * in our tmpdir, which is the agent's (root's), and a job running as
	 * another user cannot open them (libpmix then prints errors in every
	 * rank and falls back to hash anyway).  libpmix passes the choice on
	 * to the clients (PMIX_GDS_MODULE).  Forced: a value inherited from
	 * a launcher above the agent must not decide it.
	 */
	if (setenv("PMIX_MCA_gds", "hash", 1) != 0)
		return PMIX_ERR_NOMEM;
	event_fn = fn;
	rc = PMIx_server_init(&shim_module, info, 4);
	for (size_t i = 0; i < 4; i++)
		PMIX_INFO_DESTRUCT(&info[i]);
	if (rc != PMIX_SUCCESS)
		event_fn = NULL;
	return rc;
}

int shim_finalize(void)
{
	pmix_status_t rc = PMIx_server_finalize();

	/* The progress thread is gone: no upcall can race with this. */
	event_fn = NULL;
	return rc;
}

/* ---- job registration ---- */

/* Builders: a failed add is remembered and reported once, at the end. */
struct ilist {
	void *list;
	pmix_status_t rc;
};

static void ilist_start(struct ilist *l)
{
	l->list = PMIx_Info_list_start();
	l->rc = l->list ? PMIX_SUCCESS : PMIX_ERR_NOMEM;
}

static void add(struct ilist *l, const char *key, const void *val, pmix_data_type_t type)
{
	if (l->rc == PMIX_SUCCESS)
		l->rc = PMIx_Info_list_add(l->list, key, val, type);
}

static void add_u32(struct ilist *l, const char *key, uint32_t v)
{
	add(l, key, &v, PMIX_UINT32);
}

static void add_u16(struct ilist *l, const char *key, uint16_t v)
{
	add(l, key, &v, PMIX_UINT16);
}

static void add_rank(struct ilist *l, const char *key, pmix_rank_t v)
{
	add(l, key, &v, PMIX_PROC_RANK);
}

/* Close list `sub` into an array of pmix_info_t and add it to `l` under key. */
static void add_array(struct ilist *l, const char *key, struct ilist *sub)
{
	pmix_data_array_t da;

	if (sub->rc == PMIX_SUCCESS) {
		memset(&da, 0, sizeof(da));
		sub->rc = PMIx_Info_list_convert(sub->list, &da);
		if (sub->rc == PMIX_SUCCESS)
			add(l, key, &da, PMIX_DATA_ARRAY);	/* copies da */
		PMIX_DATA_ARRAY_DESTRUCT(&da);
	}
	if (l->rc == PMIX_SUCCESS)
		l->rc = sub->rc;
	if (sub->list)
		PMIx_Info_list_release(sub->list);
	sub->list = NULL;
}

/* The key/values of node `nid`, whether ours or not. */
static void add_node_keys(struct ilist *l, const struct shim_job *job, uint32_t nid)
{
	add(l, PMIX_HOSTNAME, job->nodes[nid], PMIX_STRING);
	add_u32(l, PMIX_NODEID, nid);
	add_u32(l, PMIX_LOCAL_SIZE, job->ppn);
	add_u32(l, PMIX_NODE_SIZE, job->ppn);
	add_rank(l, PMIX_LOCALLDR, nid * job->ppn);
	/* A string, as PMIx defines it and as libpm and Open MPI read it. */
	add(l, PMIX_LOCAL_PEERS, job->node_peers[nid], PMIX_STRING);
}

/* Everything the job's processes may ask their server about the job. */
static pmix_status_t job_info(const struct shim_job *job, pmix_data_array_t *out)
{
	uint32_t size = job->nnodes * job->ppn, appnum = 0, napps = 1;
	char *regex = NULL, *ppn = NULL;
	struct ilist l, sub;
	pmix_status_t rc;

	rc = PMIx_generate_regex(job->hosts, &regex);
	if (rc == PMIX_SUCCESS)
		rc = PMIx_generate_ppn(job->procs, &ppn);
	if (rc != PMIX_SUCCESS)
		goto out;

	ilist_start(&l);
	/* Job level. */
	add(&l, PMIX_JOBID, job->nspace, PMIX_STRING);
	add_u32(&l, PMIX_UNIV_SIZE, size);
	add_u32(&l, PMIX_JOB_SIZE, size);
	add_u32(&l, PMIX_MAX_PROCS, size);
	add_u32(&l, PMIX_JOB_NUM_APPS, napps);
	add_u32(&l, PMIX_APPNUM, appnum);
	add_u32(&l, PMIX_NUM_NODES, job->nnodes);
	/* PMIX_REGEX: libpmix 4 may give a binary (compressed) map. */
	add(&l, PMIX_NODE_MAP, regex, PMIX_REGEX);
	add(&l, PMIX_PROC_MAP, ppn, PMIX_REGEX);
	add(&l, PMIX_TMPDIR, job->tmpdir, PMIX_STRING);
	add(&l, PMIX_NSDIR, job->tmpdir, PMIX_STRING);
	/* PM's secret job key (pm/src/core/boot_pmix.c reads it). */
	if (job->pm_jobkey)
		add(&l, "pm.jobkey", &job->pm_jobkey, PMIX_UINT64);

	/* This node, at top level as well: what clients Get without naming a node. */
	add_node_keys(&l, job, job->node_index);

	/* The one application. */
	ilist_start(&sub);
	add_u32(&sub, PMIX_APPNUM, appnum);
	add_u32(&sub, PMIX_APP_SIZE, size);
	add_rank(&sub, PMIX_APPLDR, 0);
	add_array(&l, PMIX_APP_INFO_ARRAY, &sub);

	/* Every node, so that a rank can learn a remote node's host name. */
	for (uint32_t n = 0; n < job->nnodes; n++) {
		ilist_start(&sub);
		add_node_keys(&sub, job, n);
		add_array(&l, PMIX_NODE_INFO_ARRAY, &sub);
	}

	/* Every rank of the job: PMIX_RANK must come first. */
	for (uint32_t r = 0; r < size; r++) {
		uint32_t nid = r / job->ppn;
		uint16_t lr = (uint16_t)(r % job->ppn);

		ilist_start(&sub);
		add_rank(&sub, PMIX_RANK, r);
		add_u32(&sub, PMIX_GLOBAL_RANK, r);
		add_u32(&sub, PMIX_APP_RANK, r);
		add_u32(&sub, PMIX_APPNUM, appnum);
		add_u16(&sub, PMIX_LOCAL_RANK, lr);
		add_u16(&sub, PMIX_NODE_RANK, lr);
		add_u32(&sub, PMIX_NODEID, nid);
		add(&sub, PMIX_HOSTNAME, job->nodes[nid], PMIX_STRING);
		add_array(&l, PMIX_PROC_DATA, &sub);
	}

	rc = l.rc;
	if (rc == PMIX_SUCCESS) {
		memset(out, 0, sizeof(*out));
		rc = PMIx_Info_list_convert(l.list, out);
	}
	if (l.list)
		PMIx_Info_list_release(l.list);
out:
	free(regex);
	free(ppn);
	return rc;
}

int shim_register_job(const struct shim_job *job)
{
	pmix_data_array_t info;
	struct shim_wait w;
	pmix_status_t rc;
	pmix_proc_t proc;

	if (!job->nnodes || !job->ppn || job->node_index >= job->nnodes)
		return PMIX_ERR_BAD_PARAM;
	rc = job_info(job, &info);
	if (rc != PMIX_SUCCESS)
		return rc;

	wait_init(&w);
	rc = PMIx_server_register_nspace(job->nspace, (int)job->ppn, info.array, info.size,
					 wait_op_cb, &w);
	rc = wait_result(&w, rc);
	wait_fini(&w);
	/* libpmix copied what it keeps once the callback came. */
	PMIX_DATA_ARRAY_DESTRUCT(&info);
	if (rc != PMIX_SUCCESS)
		return rc;

	/* The local ranks; their uid/gid is what the connection must prove. */
	for (uint32_t lr = 0; lr < job->ppn; lr++) {
		PMIX_LOAD_PROCID(&proc, job->nspace, job->node_index * job->ppn + lr);
		wait_init(&w);
		rc = PMIx_server_register_client(&proc, job->uid, job->gid, NULL, wait_op_cb, &w);
		rc = wait_result(&w, rc);
		wait_fini(&w);
		if (rc != PMIX_SUCCESS) {
			shim_deregister_job(job->nspace);
			return rc;
		}
	}
	return PMIX_SUCCESS;
}

int shim_deregister_job(const char *nspace)
{
	struct shim_wait w;
	pmix_status_t rc;

	/*
	 * The namespace only, not its clients: libpmix 4.2's deregister_client
	 * closes a client's socket without removing the socket's read event
	 * when it has not yet seen the connection drop (the process has exited
	 * but its hang-up is still in flight), and the next client that gets
	 * that descriptor number goes unheard and hangs in PMIx_Init.  Left
	 * alone, each client's connection ends through libpmix's own hang-up
	 * path, which removes the event first; the client records hold a
	 * reference on the namespace and are freed with their connection.
	 */
	wait_init(&w);
	PMIx_server_deregister_nspace(nspace, wait_op_cb, &w);
	rc = wait_for(&w);
	wait_fini(&w);
	return rc;
}

/* ---- children ---- */

int shim_setup_fork(const char *nspace, uint32_t rank, char ***env)
{
	pmix_proc_t proc;
	char **e = NULL;
	pmix_status_t rc;

	PMIX_LOAD_PROCID(&proc, nspace, rank);
	rc = PMIx_server_setup_fork(&proc, &e);
	if (rc != PMIX_SUCCESS) {
		shim_free_env(e);
		e = NULL;
	}
	*env = e;
	return rc;
}

/* libpmix grows the array with malloc/realloc and strdup. */
void shim_free_env(char **env)
{
	if (!env)
		return;
	for (char **p = env; *p; p++)
		free(*p);
	free(env);
}

/* ---- fence results ---- */

void shim_fence_complete(void *fence, int status, const char *data, size_t ndata)
{
	struct shim_fence *f = fence;
	struct shim_blob *b = NULL;

	if (!f)
		return;
	if (status == PMIX_SUCCESS) {
		b = malloc(sizeof(*b) + ndata + 1);
		if (!b)
			status = PMIX_ERR_NOMEM;
	}
	if (status != PMIX_SUCCESS) {
		f->cbfunc(status, NULL, 0, f->cbdata, NULL, NULL);
	} else {
		/* libpmix reads the bytes later, on its thread, then calls blob_release. */
		b->len = ndata;
		if (ndata)
			memcpy(b->bytes, data, ndata);
		f->cbfunc(PMIX_SUCCESS, b->bytes, ndata, f->cbdata, blob_release, b);
	}
	free(f);
}

const char *shim_error_string(int status)
{
	return PMIx_Error_string(status);
}
