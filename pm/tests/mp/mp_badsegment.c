/* SPDX-License-Identifier: MIT */
/*
 * mp_badsegment.c - pm_open() fails cleanly when a segment is not PM's.
 *
 * Before opening, rank 1 puts a file of garbage where its shm segment
 * will be (/dev/shm/pm-<jobkey>-1).  Rank 1 cannot create its segment
 * (-EEXIST) and so never publishes its address; rank 0 then cannot attach
 * to rank 1 (the bootstrap says the address is not there: -ENOENT, or
 * -ETIMEDOUT after PMIx has waited for it).  Both pm_open() calls must
 * fail (together: the bootstrap fences still match), without crashing,
 * and leave nothing behind: no segment, no statistics page.
 *
 * This also proves that the tests' idea of the segment names
 * (mp_segment_prefix) is PM's, so the leftover checks of the other tests
 * look at the right names.
 */
#include "mp.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
	const char *r = getenv("PMIX_RANK");
	int rank = r ? atoi(r) : -1;
	char prefix[64], decoy[128], mine[64];
	pm_context_t *ctx = (pm_context_t *)1;

	check_set_tag("rank %d", rank);
	CHECK_MSG(rank == 0 || rank == 1, "PMIX_RANK=%s: run with mpirun -n 2", r ? r : "");
	mp_segment_prefix(prefix, sizeof(prefix));
	snprintf(decoy, sizeof(decoy), "/dev/shm/%s1", prefix);
	if (rank == 1) {
		int fd = open(decoy, O_RDWR | O_CREAT | O_EXCL, 0600);
		static uint8_t junk[1 << 20];

		CHECK_MSG(fd >= 0, "create %s: %s", decoy, strerror(errno));
		memset(junk, 0xff, sizeof(junk));
		CHECK_EQ(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
		close(fd);
	}

	int err = pm_open(&ctx, NULL);

	CHECK_MSG(err < 0, "pm_open succeeded over a foreign segment");
	CHECK(ctx == NULL);
	if (rank == 1)
		CHECK_ERR(err, -EEXIST);        /* its name was taken */

	/* Nothing of PM's is left: rank 0 removed its own segment, neither
	 * left a statistics page. */
	snprintf(mine, sizeof(mine), "pm-stats.%d.", (int)getpid());
	CHECK_EQ(mp_count_files(mp_stats_dir(), mine), 0);
	if (rank == 0) {
		char seg0[80];

		snprintf(seg0, sizeof(seg0), "%s0", prefix);
		CHECK_EQ(mp_count_files("/dev/shm", seg0), 0);
	} else {
		/* The decoy is still ours, untouched: remove it. */
		struct stat st;

		CHECK_OK(stat(decoy, &st));
		CHECK_EQ(st.st_size, 1 << 20);
		CHECK_OK(unlink(decoy));
	}
	printf("rank %d: pm_open over a foreign segment: %s\n", rank, check_errname(err));
	return 0;
}
