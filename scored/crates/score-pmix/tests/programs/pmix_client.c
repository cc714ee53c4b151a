/* SPDX-License-Identifier: MIT */
/*
 * pmix_client: a PMIx client that reports what its server told it, for
 * score-pmix's tests.  One line "key=value ..." on stdout, then:
 *
 *   pmix_client            put, fence (collect), read local peers' values,
 *                          fence again (no collect), finalize
 *   pmix_client abort N    the lowest local rank calls PMIx_Abort(N), the
 *                          others fence (and are killed by the launcher)
 *
 * Exit status: 0 when every call succeeded, 2 when a fence failed, 1 else.
 */
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pmix_proc_t me, all;

static int get_u32(const char *key, uint32_t *out)
{
	pmix_value_t *v = NULL;

	if (PMIx_Get(&all, key, NULL, 0, &v) != PMIX_SUCCESS)
		return -1;
	*out = v->type == PMIX_UINT32 ? v->data.uint32 : 0xdead;
	PMIX_VALUE_RELEASE(v);
	return 0;
}

static int get_str(const pmix_proc_t *p, const char *key, char *buf, size_t len)
{
	pmix_value_t *v = NULL;

	if (PMIx_Get(p, key, NULL, 0, &v) != PMIX_SUCCESS)
		return -1;
	snprintf(buf, len, "%s", v->type == PMIX_STRING ? v->data.string : "?");
	PMIX_VALUE_RELEASE(v);
	return 0;
}

static int fence(int collect)
{
	pmix_info_t info;
	bool c = collect;
	pmix_status_t rc;

	PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &c, PMIX_BOOL);
	rc = PMIx_Fence(&all, 1, &info, 1);
	PMIX_INFO_DESTRUCT(&info);
	if (rc != PMIX_SUCCESS)
		fprintf(stderr, "pmix_client[%u]: fence: %s\n", me.rank, PMIx_Error_string(rc));
	return rc;
}

int main(int argc, char **argv)
{
	uint32_t size = 0, univ = 0, nnodes = 0, lsize = 0, nodeid = 0, val;
	char peers[1024] = "", host[256] = "", myhost[256] = "";
	pmix_value_t *v = NULL, pv;
	uint16_t lrank = 0;
	pmix_status_t rc;
	char *save, *tok;

	rc = PMIx_Init(&me, NULL, 0);
	if (rc != PMIX_SUCCESS) {
		fprintf(stderr, "pmix_client: PMIx_Init: %s\n", PMIx_Error_string(rc));
		return 1;
	}
	PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
	if (get_u32(PMIX_JOB_SIZE, &size) || get_u32(PMIX_UNIV_SIZE, &univ) ||
	    get_u32(PMIX_NUM_NODES, &nnodes) || get_u32(PMIX_LOCAL_SIZE, &lsize) ||
	    get_str(&all, PMIX_LOCAL_PEERS, peers, sizeof(peers)) ||
	    get_str(&me, PMIX_HOSTNAME, myhost, sizeof(myhost))) {
		fprintf(stderr, "pmix_client[%u]: a job key is missing\n", me.rank);
		return 1;
	}
	if (PMIx_Get(&me, PMIX_LOCAL_RANK, NULL, 0, &v) == PMIX_SUCCESS) {
		lrank = v->data.uint16;
		PMIX_VALUE_RELEASE(v);
	}
	if (PMIx_Get(&me, PMIX_NODEID, NULL, 0, &v) == PMIX_SUCCESS) {
		nodeid = v->data.uint32;
		PMIX_VALUE_RELEASE(v);
	}
	/* Rank 0's host name, whichever node it is on. */
	{
		pmix_proc_t r0;

		PMIX_LOAD_PROCID(&r0, me.nspace, 0);
		get_str(&r0, PMIX_HOSTNAME, host, sizeof(host));
	}
	printf("nspace=%s rank=%u size=%u univ=%u nodes=%u local_size=%u local_peers=%s "
	       "local_rank=%u nodeid=%u host=%s rank0_host=%s uid=%u gid=%u\n",
	       me.nspace, me.rank, size, univ, nnodes, lsize, peers, lrank, nodeid, myhost, host,
	       (unsigned)getuid(), (unsigned)getgid());
	fflush(stdout);

	if (argc > 2 && strcmp(argv[1], "abort") == 0 && lrank == 0) {
		rc = PMIx_Abort(atoi(argv[2]), "pmix_client was told to abort", NULL, 0);
		fprintf(stderr, "pmix_client[%u]: PMIx_Abort returned %s\n", me.rank,
			PMIx_Error_string(rc));
		return 1;
	}

	val = me.rank * 10 + 7;
	PMIX_VALUE_LOAD(&pv, &val, PMIX_UINT32);
	if (PMIx_Put(PMIX_GLOBAL, "score.test", &pv) != PMIX_SUCCESS || PMIx_Commit() != PMIX_SUCCESS)
		return 1;
	PMIX_VALUE_DESTRUCT(&pv);
	if (fence(1))
		return 2;
	/* Everyone on this node put its value before the fence. */
	for (tok = strtok_r(peers, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		pmix_proc_t p;

		PMIX_LOAD_PROCID(&p, me.nspace, (pmix_rank_t)atoi(tok));
		if (PMIx_Get(&p, "score.test", NULL, 0, &v) != PMIX_SUCCESS) {
			fprintf(stderr, "pmix_client[%u]: no value from rank %s\n", me.rank, tok);
			return 1;
		}
		if (v->data.uint32 != p.rank * 10 + 7) {
			fprintf(stderr, "pmix_client[%u]: wrong value from rank %s\n", me.rank, tok);
			return 1;
		}
		PMIX_VALUE_RELEASE(v);
	}
	if (fence(0))
		return 2;
	rc = PMIx_Finalize(NULL, 0);
	if (rc != PMIX_SUCCESS)
		return 1;
	printf("rank=%u done\n", me.rank);
	return 0;
}
