/* SPDX-License-Identifier: MIT */
/*
 * pmix_jobkey - prints what its launcher gave the job as PM's key: the
 * job-level PMIx key "pm.jobkey" (a uint64), as libpm reads it.
 *
 *   pm.jobkey rank=R key=0123456789abcdef     the launcher's key
 *   pm.jobkey rank=R key=none                 no key (PM's rank 0 draws one)
 *
 * Built by tests/scored/test_jobs.py with cc -lpmix; exits 1 when PMIx
 * cannot start.
 */
#include <inttypes.h>
#include <pmix.h>
#include <stdbool.h>
#include <stdio.h>

int main(void)
{
	pmix_proc_t me, all;
	pmix_value_t *v = NULL;
	pmix_info_t info;
	bool optional = true;

	if (PMIx_Init(&me, NULL, 0) != PMIX_SUCCESS) {
		fprintf(stderr, "pmix_jobkey: PMIx_Init failed\n");
		return 1;
	}
	PMIX_PROC_CONSTRUCT(&all);
	PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
	PMIX_INFO_CONSTRUCT(&info);
	PMIX_INFO_LOAD(&info, PMIX_OPTIONAL, &optional, PMIX_BOOL);
	if (PMIx_Get(&all, "pm.jobkey", &info, 1, &v) == PMIX_SUCCESS && v->type == PMIX_UINT64)
		printf("pm.jobkey rank=%u key=%016" PRIx64 "\n", me.rank, v->data.uint64);
	else
		printf("pm.jobkey rank=%u key=none\n", me.rank);
	if (v)
		PMIX_VALUE_RELEASE(v);
	PMIX_INFO_DESTRUCT(&info);
	PMIx_Finalize(NULL, 0);
	return 0;
}
