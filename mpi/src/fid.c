/* SPDX-License-Identifier: MIT */
/*
 * fid.c - what an object answers to an operation of struct fi_ops it does
 * not do: -FI_ENOSYS.  Shared by the objects' tables (and linked alone into
 * the CQ's unit test, which needs nothing else of the provider's).
 */
#include "pmfi.h"

int pmfi_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	(void)fid; (void)bfid; (void)flags;
	return -FI_ENOSYS;
}

int pmfi_no_control(struct fid *fid, int command, void *arg)
{
	(void)fid; (void)command; (void)arg;
	return -FI_ENOSYS;
}

int pmfi_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops,
		     void *context)
{
	(void)fid; (void)name; (void)flags; (void)ops; (void)context;
	return -FI_ENOSYS;
}
