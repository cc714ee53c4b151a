/* SPDX-License-Identifier: MIT */
/*
 * cntr.c - completion counters.  MPICH opens one per domain and binds it to
 * its endpoint for FI_READ | FI_WRITE whatever the provider offers (its RMA
 * completion counter), so the object exists before the operations that
 * count on it: the endpoint accepts a counter for RMA events only (FI_READ,
 * FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE); FI_RMA reads and writes move
 * it (rma.c; remote events are never counted: no FI_RMA_EVENT).  Reading
 * it progresses the endpoint last bound.  A counter for sends or receives
 * is refused at bind (-FI_ENOSYS) rather than left still.
 */
#include "pmfi.h"

#include <stdlib.h>
#include <time.h>

static uint64_t cntr_read(struct fid_cntr *fid)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid);

	pmfi_lock(c->dom);
	/* Manual progress: reading a counter moves the endpoint it counts. */
	if (c->ep)
		pmfi_progress(c->ep);
	uint64_t v = c->value;

	pmfi_unlock(c->dom);
	return v;
}

static uint64_t cntr_readerr(struct fid_cntr *fid)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid);

	pmfi_lock(c->dom);
	if (c->ep)
		pmfi_progress(c->ep);
	uint64_t v = c->err;

	pmfi_unlock(c->dom);
	return v;
}

static int cntr_add(struct fid_cntr *fid, uint64_t value)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid);

	pmfi_lock(c->dom);
	c->value += value;
	pmfi_unlock(c->dom);
	return 0;
}

static int cntr_set(struct fid_cntr *fid, uint64_t value)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid);

	pmfi_lock(c->dom);
	c->value = value;
	pmfi_unlock(c->dom);
	return 0;
}

static int cntr_adderr(struct fid_cntr *fid, uint64_t value)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid);

	pmfi_lock(c->dom);
	c->err += value;
	pmfi_unlock(c->dom);
	return 0;
}

static int cntr_seterr(struct fid_cntr *fid, uint64_t value)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid);

	pmfi_lock(c->dom);
	c->err = value;
	pmfi_unlock(c->dom);
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Reads progress the bound endpoint (RMA completions) and see what other
 * threads add: check every millisecond. */
static int cntr_wait(struct fid_cntr *fid, uint64_t threshold, int timeout)
{
	uint64_t deadline = timeout < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout;
	uint64_t err0 = cntr_readerr(fid);

	for (;;) {
		if (cntr_read(fid) >= threshold)
			return 0;
		if (cntr_readerr(fid) != err0)
			return -FI_EAVAIL;
		if (now_ms() >= deadline)
			return -FI_ETIMEDOUT;
		nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
	}
}

static int cntr_close(struct fid *fid)
{
	struct pmfi_cntr *c = pmfi_container_of(fid, struct pmfi_cntr, fid.fid);

	if (c->refs)
		return -FI_EBUSY;
	c->dom->refs--;
	free(c);
	return 0;
}

static struct fi_ops cntr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cntr_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_cntr cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = cntr_read,
	.readerr = cntr_readerr,
	.add = cntr_add,
	.set = cntr_set,
	.wait = cntr_wait,
	.adderr = cntr_adderr,
	.seterr = cntr_seterr,
};

int pmfi_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		   struct fid_cntr **out, void *context)
{
	struct pmfi_domain *d = pmfi_container_of(domain, struct pmfi_domain, fid);

	if (attr) {
		if (attr->events != FI_CNTR_EVENTS_COMP)
			return -FI_ENOSYS;
		if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
			return -FI_ENOSYS;
		if (attr->flags)
			return -FI_EINVAL;
	}

	struct pmfi_cntr *c = calloc(1, sizeof(*c));

	if (!c)
		return -FI_ENOMEM;
	c->dom = d;
	c->fid.fid.fclass = FI_CLASS_CNTR;
	c->fid.fid.context = context;
	c->fid.fid.ops = &cntr_fi_ops;
	c->fid.ops = &cntr_ops;
	d->refs++;
	*out = &c->fid;
	return 0;
}
