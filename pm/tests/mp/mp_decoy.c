/* SPDX-License-Identifier: MIT */
/*
 * mp_decoy.c - the job's names cannot be guessed from its public name.
 *
 * Before opening, each rank plants a file of garbage where its shm segment
 * would be if the job key were derived from the job's name, as it once was
 * (/dev/shm/pm-<FNV-1a of PMIX_NAMESPACE>-<rank>): someone who knows the
 * name could then block the job's start or race its segments.  The key is
 * a secret drawn for the job now (docs/pm/wire.md), so pm_open() succeeds,
 * the decoys are left untouched, and the job's real segments have another
 * name.  The two ranks agree on the key (they exchange a message), and
 * nothing of PM's is left when they close.
 */
#include "mp.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DECOY_BYTES (1 << 20)

int main(void)
{
	const char *r = getenv("PMIX_RANK");
	int rank = r ? atoi(r) : -1;
	char hashed[64], decoy[128], real[64];
	static uint8_t junk[DECOY_BYTES];

	check_set_tag("rank %d", rank);
	CHECK_MSG(rank == 0 || rank == 1, "PMIX_RANK=%s: run with mpirun -n 2", r ? r : "");
	mp_hashed_segment_prefix(hashed, sizeof(hashed));
	snprintf(decoy, sizeof(decoy), "/dev/shm/%s%d", hashed, rank);

	int fd = open(decoy, O_RDWR | O_CREAT | O_EXCL, 0600);

	CHECK_MSG(fd >= 0, "create %s: %s", decoy, strerror(errno));
	memset(junk, 0xff, sizeof(junk));
	CHECK_EQ(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);

	struct mp m;

	mp_open(&m, NULL, 2, 30);
	CHECK_MSG(mp_segment_prefix(real, sizeof(real)), "no shm segment mapped");
	CHECK_MSG(strcmp(real, hashed) != 0, "the job key is still the hash of the job's name");

	/* Both ranks hold the same key: rank 0 sends its prefix, rank 1 compares. */
	if (rank == 0) {
		mp_send(&m, 1, real, strlen(real) + 1);
	} else {
		struct pm_msg msg;

		mp_recv(&m, &msg);
		CHECK_MSG(strcmp((const char *)msg.data, real) == 0,
			  "the ranks disagree on the job key: %s against %s",
			  (const char *)msg.data, real);
		mp_release(&m, &msg);
	}
	mp_close(&m);

	/* The decoy is ours, untouched: remove it. */
	struct stat st;

	CHECK_OK(stat(decoy, &st));
	CHECK_EQ(st.st_size, DECOY_BYTES);
	CHECK_OK(unlink(decoy));
	printf("rank %d: segments %s*, not %s*\n", rank, real, hashed);
	return 0;
}
