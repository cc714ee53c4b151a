/* SPDX-License-Identifier: MIT */
/*
 * cq.c - the completion queue: a ring of completions sized at open and a
 * list of error completions.  Reading it runs progress on the endpoints
 * bound to it (manual progress).  The data path never writes a completion
 * without room for it (pmfi_cq_room): progress stops taking messages
 * instead, so nothing is lost and nothing is allocated.
 */
#include "pmfi.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void pmfi_cq_write(struct pmfi_cq *cq, const struct fi_cq_tagged_entry *e, fi_addr_t src)
{
	size_t i = (cq->head + cq->count) & cq->mask;

	cq->ring[i] = *e;
	cq->src[i] = src;
	cq->count++;
}

int pmfi_cq_write_err(struct pmfi_cq *cq, const struct fi_cq_tagged_entry *e, int err,
		      int prov_errno, size_t olen)
{
	struct pmfi_cq_err *x = calloc(1, sizeof(*x));

	if (!x) {
		PMFI_WARN("no memory for an error completion (%s): lost", fi_strerror(err));
		return -FI_ENOMEM;
	}
	x->e.op_context = e->op_context;
	x->e.flags = e->flags;
	x->e.len = e->len;
	x->e.buf = e->buf;
	x->e.data = e->data;
	x->e.tag = e->tag;
	x->e.olen = olen;
	x->e.err = err;
	x->e.prov_errno = prov_errno;
	pmfi_list_add_tail(&cq->errs, &x->link);
	return 0;
}

int pmfi_cq_bind_ep(struct pmfi_cq *cq, struct pmfi_ep *ep)
{
	for (int i = 0; i < cq->neps; i++)
		if (cq->eps[i] == ep)
			return 0;
	if (cq->neps == (int)(sizeof(cq->eps) / sizeof(cq->eps[0])))
		return -FI_ENOSPC;
	cq->eps[cq->neps++] = ep;
	cq->dom->refs++;        /* the CQ outlives no endpoint bound to it */
	return 0;
}

void pmfi_cq_unbind_ep(struct pmfi_cq *cq, struct pmfi_ep *ep)
{
	for (int i = 0; i < cq->neps; i++)
		if (cq->eps[i] == ep) {
			cq->eps[i] = cq->eps[--cq->neps];
			cq->dom->refs--;
			return;
		}
}

static size_t entry_size(enum fi_cq_format f)
{
	switch (f) {
	case FI_CQ_FORMAT_CONTEXT: return sizeof(struct fi_cq_entry);
	case FI_CQ_FORMAT_MSG: return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA: return sizeof(struct fi_cq_data_entry);
	case FI_CQ_FORMAT_TAGGED: return sizeof(struct fi_cq_tagged_entry);
	default: return 0;
	}
}

static void progress_all(struct pmfi_cq *cq)
{
	for (int i = 0; i < cq->neps; i++)
		pmfi_progress(cq->eps[i]);
}

/* Copy up to count completions out; -FI_EAVAIL when an error is first. */
static ssize_t take(struct pmfi_cq *cq, void *buf, size_t count, fi_addr_t *src)
{
	size_t n = 0, sz = entry_size(cq->format);

	if (!pmfi_list_empty(&cq->errs))
		return -FI_EAVAIL;
	while (n < count && cq->count) {
		const struct fi_cq_tagged_entry *e = &cq->ring[cq->head];

		/* The formats are prefixes of the tagged entry.  The MPIs read
		 * tagged entries: a copy of constant size is inlined, where one
		 * of sz bytes calls memcpy for each completion. */
		if (sz == sizeof(*e))
			memcpy((char *)buf + n * sizeof(*e), e, sizeof(*e));
		else
			memcpy((char *)buf + n * sz, e, sz);
		if (src)
			src[n] = cq->src[cq->head];
		cq->head = (cq->head + 1) & cq->mask;
		cq->count--;
		n++;
	}
	return n ? (ssize_t)n : -FI_EAGAIN;
}

/*
 * A read of an empty CQ runs a progress pass, except the read right after
 * one that emptied it: that one returns -FI_EAGAIN at once (may_skip).
 * Open MPI's mtl ofi reads until -FI_EAGAIN after every completion it
 * takes; that last read would poll the network again on the way from a
 * message to the caller's reply (on udp an empty recvfrom(), the larger
 * part of what MPI added to PM's latency there).  The read after it polls
 * as usual, so a caller that keeps reading is delayed by one read, never
 * more.  fi_cq_sread never skips: it would sleep on a pass it did not run.
 */
static ssize_t read_cq(struct pmfi_cq *cq, void *buf, size_t count, fi_addr_t *src,
		       bool may_skip)
{
	pmfi_lock(cq->dom);

	bool skip = may_skip && cq->just_emptied;

	cq->just_emptied = false;
	if (!cq->count && pmfi_list_empty(&cq->errs) && !skip)
		progress_all(cq);
	ssize_t n = take(cq, buf, count, src);

	cq->just_emptied = n > 0 && !cq->count;
	pmfi_unlock(cq->dom);
	return n;
}

static ssize_t cq_readfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src)
{
	return read_cq(pmfi_container_of(fid, struct pmfi_cq, fid), buf, count, src, true);
}

static ssize_t cq_read(struct fid_cq *fid, void *buf, size_t count)
{
	return cq_readfrom(fid, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *fid, struct fi_cq_err_entry *buf, uint64_t flags)
{
	struct pmfi_cq *cq = pmfi_container_of(fid, struct pmfi_cq, fid);
	ssize_t ret = -FI_EAGAIN;

	(void)flags;
	pmfi_lock(cq->dom);
	free(cq->last_err);
	cq->last_err = NULL;
	if (!pmfi_list_empty(&cq->errs)) {
		struct pmfi_cq_err *x = pmfi_container_of(cq->errs.next, struct pmfi_cq_err, link);

		pmfi_list_del(&x->link);
		/* API >= 1.5: err_data points into the caller's buffer when it
		 * gives one; we have no error data, so it is left alone. */
		void *err_data = buf->err_data;
		size_t err_data_size = buf->err_data_size;

		*buf = x->e;
		buf->err_data = err_data_size ? err_data : NULL;
		buf->err_data_size = 0;
		cq->last_err = x;
		ret = 1;
	}
	pmfi_unlock(cq->dom);
	return ret;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static ssize_t cq_sreadfrom(struct fid_cq *fid, void *buf, size_t count, fi_addr_t *src,
			    const void *cond, int timeout)
{
	struct pmfi_cq *cq = pmfi_container_of(fid, struct pmfi_cq, fid);
	uint64_t deadline = timeout < 0 ? UINT64_MAX : now_ms() + (uint64_t)timeout;

	(void)cond;
	for (;;) {
		ssize_t n = read_cq(cq, buf, count, src, false);

		if (n != -FI_EAGAIN)
			return n;
		uint64_t now = now_ms();

		if (now >= deadline)
			return -FI_EAGAIN;
		/* Sleep in PM until something may have happened. */
		pmfi_lock(cq->dom);
		pm_context_t *pm = cq->neps ? cq->eps[0]->pm : NULL;

		if (pm)
			pm_wait(pm, deadline - now > 100 ? 100 : (int)(deadline - now));
		pmfi_unlock(cq->dom);
	}
}

static ssize_t cq_sread(struct fid_cq *fid, void *buf, size_t count, const void *cond,
			int timeout)
{
	return cq_sreadfrom(fid, buf, count, NULL, cond, timeout);
}

static int cq_signal(struct fid_cq *fid)
{
	(void)fid;
	return -FI_ENOSYS;
}

static const char *cq_strerror(struct fid_cq *fid, int prov_errno, const void *err_data,
			       char *buf, size_t len)
{
	(void)fid; (void)err_data;
	return pmfi_strerror(prov_errno, buf, len);
}

static int cq_close(struct fid *fid)
{
	struct pmfi_cq *cq = pmfi_container_of(fid, struct pmfi_cq, fid.fid);

	if (cq->neps)
		return -FI_EBUSY;
	while (!pmfi_list_empty(&cq->errs)) {
		struct pmfi_cq_err *x = pmfi_container_of(cq->errs.next, struct pmfi_cq_err, link);

		pmfi_list_del(&x->link);
		free(x);
	}
	free(cq->last_err);
	cq->dom->refs--;
	free(cq->ring);
	free(cq->src);
	free(cq);
	return 0;
}

static struct fi_ops cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = cq_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_cq cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = cq_read,
	.readfrom = cq_readfrom,
	.readerr = cq_readerr,
	.sread = cq_sread,
	.sreadfrom = cq_sreadfrom,
	.signal = cq_signal,
	.strerror = cq_strerror,
};

int pmfi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr, struct fid_cq **out,
		 void *context)
{
	struct pmfi_domain *d = pmfi_container_of(domain, struct pmfi_domain, fid);
	enum fi_cq_format format = attr ? attr->format : FI_CQ_FORMAT_UNSPEC;

	if (format == FI_CQ_FORMAT_UNSPEC)
		format = FI_CQ_FORMAT_CONTEXT;
	if (!entry_size(format))
		return -FI_ENOSYS;
	if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
		return -FI_ENOSYS;
	if (attr && (attr->flags & FI_AFFINITY))
		return -FI_ENOSYS;

	struct pmfi_cq *cq = calloc(1, sizeof(*cq));

	if (!cq)
		return -FI_ENOMEM;
	cq->size = attr && attr->size ? attr->size : PMFI_CQ_SIZE;
	/* Room for what can complete at once: every posted receive and send. */
	if (cq->size < PMFI_TX_SIZE + PMFI_RX_SIZE)
		cq->size = PMFI_TX_SIZE + PMFI_RX_SIZE;
	size_t slots = 1;

	if (cq->size > PMFI_CQ_SIZE_MAX) {
		free(cq);
		return -FI_EINVAL;
	}
	while (slots < cq->size)
		slots <<= 1;
	cq->mask = slots - 1;
	cq->ring = calloc(slots, sizeof(*cq->ring));
	cq->src = calloc(slots, sizeof(*cq->src));
	if (!cq->ring || !cq->src) {
		free(cq->ring);
		free(cq->src);
		free(cq);
		return -FI_ENOMEM;
	}
	cq->format = format;
	cq->dom = d;
	pmfi_list_init(&cq->errs);
	cq->fid.fid.fclass = FI_CLASS_CQ;
	cq->fid.fid.context = context;
	cq->fid.fid.ops = &cq_fi_ops;
	cq->fid.ops = &cq_ops;
	d->refs++;
	*out = &cq->fid;
	return 0;
}
