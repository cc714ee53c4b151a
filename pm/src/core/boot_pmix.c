/* SPDX-License-Identifier: MIT */
/*
 * boot_pmix.c - bootstrap through a PMIx server (scored's agent, slurmd with
 * --mpi=pmix, Open MPI's mpirun/prted).  Rank, size and the local peers come
 * from the job's data; addresses go through PMIx_Put, a collecting fence and
 * PMIx_Get.  The job key is a secret of the job (docs/pm/wire.md): the
 * launcher's, if it gives one, else drawn by rank 0 and shared the same way.
 */
#include "pm_internal.h"
#include "util/random.h"

#include <errno.h>
#include <pmix.h>
#include <stdlib.h>
#include <string.h>

struct pmix_boot {
	pmix_proc_t me;
	pmix_proc_t all;
};

static int pmix_err(pmix_status_t rc)
{
	switch (rc) {
	case PMIX_SUCCESS: return 0;
	case PMIX_ERR_NOT_FOUND: return -ENOENT;
	case PMIX_ERR_TIMEOUT: return -ETIMEDOUT;
	case PMIX_ERR_NOMEM: return -ENOMEM;
	case PMIX_ERR_BAD_PARAM: return -EINVAL;
	default: return -EPROTO;
	}
}

static int pmix_put(struct pm_boot *b, const char *key, const void *val, size_t len)
{
	pmix_value_t v;

	(void)b;
	PMIX_VALUE_CONSTRUCT(&v);
	v.type = PMIX_BYTE_OBJECT;
	v.data.bo.bytes = (char *)val;
	v.data.bo.size = len;
	/* PMIx_Put copies the value; v only borrows val. */
	int err = pmix_err(PMIx_Put(PMIX_GLOBAL, key, &v));

	v.data.bo.bytes = NULL;
	v.data.bo.size = 0;
	return err;
}

static int pmix_fence(struct pm_boot *b)
{
	struct pmix_boot *p = b->priv;
	pmix_info_t info;
	bool collect = true;
	int err = pmix_err(PMIx_Commit());

	if (err)
		return err;
	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
	err = pmix_err(PMIx_Fence(&p->all, 1, &info, 1));
	PMIX_INFO_DESTRUCT(&info);
	return err;
}

static int pmix_get(struct pm_boot *b, int rank, const char *key, void *val, size_t *len)
{
	struct pmix_boot *p = b->priv;
	pmix_proc_t peer;
	pmix_value_t *v = NULL;

	PMIX_LOAD_PROCID(&peer, p->me.nspace, (pmix_rank_t)rank);
	int err = pmix_err(PMIx_Get(&peer, key, NULL, 0, &v));

	if (err)
		return err;
	if (v->type != PMIX_BYTE_OBJECT) {
		PMIX_VALUE_RELEASE(v);
		return -EPROTO;
	}
	memcpy(val, v->data.bo.bytes, v->data.bo.size < *len ? v->data.bo.size : *len);
	*len = v->data.bo.size;
	PMIX_VALUE_RELEASE(v);
	return 0;
}

static void pmix_fini(struct pm_boot *b)
{
	PMIx_Finalize(NULL, 0);
	free(b->priv);
	b->priv = NULL;
}

static const struct pm_boot_ops pmix_ops = {
	.name = "pmix",
	.put = pmix_put,
	.fence = pmix_fence,
	.get = pmix_get,
	.fini = pmix_fini,
};

/* The key a launcher may give every rank of a job (job-level, a uint64). */
#define PM_JOBKEY_INFO "pm.jobkey"
/* Where rank 0 publishes the key it drew when the launcher gave none. */
#define PM_JOBKEY_PUT "pm.jobkey.rank0"

/*
 * The job's secret key: it tags every packet and names the job's shared
 * segments, so it must not be derivable from anything public (the job's
 * name is not secret).  Every rank takes the same path (the launcher's key
 * is job-level data), so the fence below matches up.
 */
static int job_key(struct pm_boot *b)
{
	struct pmix_boot *p = b->priv;
	pmix_value_t *v = NULL;
	pmix_info_t info;
	bool optional = true;

	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
	pmix_status_t rc = PMIx_Get(&p->all, PM_JOBKEY_INFO, &info, 1, &v);

	PMIX_INFO_DESTRUCT(&info);
	if (rc == PMIX_SUCCESS) {
		int err = v->type == PMIX_UINT64 && v->data.uint64 ? 0 : -EPROTO;

		if (!err)
			b->jobkey = v->data.uint64;
		PMIX_VALUE_RELEASE(v);
		return err;
	}

	uint64_t key = 0;
	size_t len = sizeof(key);
	int err = 0;

	if (b->rank == 0) {
		err = pm_random_u64(&key);
		if (!err)
			err = pmix_put(b, PM_JOBKEY_PUT, &key, sizeof(key));
	}
	/* Fence even when the draw failed: the others wait for us here. */
	int ferr = pmix_fence(b);

	if (err || ferr)
		return err ? err : ferr;
	err = pmix_get(b, 0, PM_JOBKEY_PUT, &key, &len);
	if (!err && (len != sizeof(key) || key == 0))
		err = -EPROTO;
	b->jobkey = key;
	return err;
}

static int cmp_int(const void *a, const void *b)
{
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* PMIX_LOCAL_PEERS is a comma-separated list of ranks, e.g. "0,1,4". */
static int parse_local_peers(struct pm_boot *b, const char *list)
{
	int n = 1;

	for (const char *c = list; *c; c++)
		n += *c == ',';
	b->local_ranks = calloc((size_t)n, sizeof(int));
	if (!b->local_ranks)
		return -ENOMEM;
	b->nlocal = 0;
	for (const char *c = list; *c;) {
		char *end;
		long r = strtol(c, &end, 10);

		if (end == c || r < 0 || r >= b->size || b->nlocal == n)
			return -EPROTO;
		b->local_ranks[b->nlocal++] = (int)r;
		c = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -EPROTO;
	}
	qsort(b->local_ranks, (size_t)b->nlocal, sizeof(int), cmp_int);
	return 0;
}

int pm_boot_open_pmix(struct pm_boot *b)
{
	struct pmix_boot *p = calloc(1, sizeof(*p));
	pmix_value_t *v = NULL;
	int err;

	if (!p)
		return -ENOMEM;
	err = pmix_err(PMIx_Init(&p->me, NULL, 0));
	if (err) {
		free(p);
		return err;
	}
	b->priv = p;
	b->ops = &pmix_ops;
	PMIX_LOAD_PROCID(&p->all, p->me.nspace, PMIX_RANK_WILDCARD);
	b->rank = (int)p->me.rank;
	snprintf(b->job, sizeof(b->job), "%s", p->me.nspace);

	err = pmix_err(PMIx_Get(&p->all, PMIX_JOB_SIZE, NULL, 0, &v));
	if (err)
		goto fail;
	b->size = (int)v->data.uint32;
	PMIX_VALUE_RELEASE(v);
	if (b->size < 1 || b->rank >= b->size) {
		err = -EPROTO;
		goto fail;
	}

	err = pmix_err(PMIx_Get(&p->all, PMIX_LOCAL_PEERS, NULL, 0, &v));
	if (err)
		goto fail;
	err = v->type == PMIX_STRING ? parse_local_peers(b, v->data.string) : -EPROTO;
	PMIX_VALUE_RELEASE(v);
	if (err)
		goto fail;
	err = job_key(b);
	if (err)
		goto fail;
	return 0;

fail:
	pmix_fini(b);
	free(b->local_ranks);
	b->local_ranks = NULL;
	b->ops = NULL;
	return err;
}
