/* SPDX-License-Identifier: MIT */
/*
 * rma.c - fi_read and fi_write as PM's pm_read and pm_write, and the path
 * every remote operation shares, atomics included (design §8).
 *
 * The remote address is a virtual address (FI_MR_VIRT_ADDR) and the key
 * PM's (FI_MR_PROV_KEY): the target's window was registered PM_MR_VIRT, so
 * both go to PM unchanged.  PM completes a write when the target has it
 * (shm: at once; udp: on its acknowledgement of the whole write), so every
 * completion is a delivery completion.  Completions go to the transmit CQ
 * and to the counter bound for FI_READ or FI_WRITE.
 */
#include "pmfi.h"

#include <string.h>

static bool wants_completion(const struct pmfi_ep *ep, uint64_t flags)
{
	return !(flags & FI_INJECT) && (!ep->tx_selective || (flags & FI_COMPLETION));
}

static void rma_complete(struct pmfi_ep *ep, struct pmfi_req *r, int status)
{
	uint64_t what = r->flags & (FI_READ | FI_WRITE);
	struct fi_cq_tagged_entry e = {
		.op_context = r->context,
		.flags = (r->flags & FI_ATOMIC ? FI_ATOMIC : FI_RMA) | what,
	};

	if (status) {
		pmfi_cq_write_err(ep->tx_cq, &e, status == -ERANGE || status == -ENOENT ?
				  FI_EINVAL : FI_EIO, -status, 0);
		if (ep->rma_cntr && (ep->cntr_events & what))
			ep->rma_cntr->err++;
	} else {
		if (wants_completion(ep, r->flags))
			pmfi_cq_write(ep->tx_cq, &e, FI_ADDR_NOTAVAIL);
		if (ep->rma_cntr && (ep->cntr_events & what))
			ep->rma_cntr->value++;
	}
	pmfi_req_put(ep, r);
}

void pmfi_rma_poll(struct pmfi_ep *ep)
{
	for (struct pmfi_list *l = ep->rma.next, *n; l != &ep->rma; l = n) {
		struct pmfi_req *r = pmfi_container_of(l, struct pmfi_req, link);

		n = l->next;
		/* A completion needs room in the CQ: the rest wait for a read. */
		if (!pmfi_cq_room(ep->tx_cq, 1))
			return;
		if (pm_test(ep->pm, &r->op)) {
			pmfi_list_del(l);
			rma_complete(ep, r, r->op.status);
		}
	}
}

/* PM's start of o into r's op. */
static int remote_start(struct pmfi_ep *ep, int peer, const struct pmfi_remote *o,
			struct pmfi_req *r)
{
	if (o->what & FI_ATOMIC)
		return pm_atomic(ep->pm, peer, o->aop, o->operand, o->compare, o->result, o->key,
				 o->addr, &r->op);
	return o->what & FI_READ ? pm_read(ep->pm, peer, o->buf, o->len, o->key, o->addr, &r->op)
				 : pm_write(ep->pm, peer, o->buf, o->len, o->key, o->addr, &r->op);
}

/* The caller holds the lock. */
static ssize_t remote_post(struct pmfi_ep *ep, const struct pmfi_remote *o)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;

	const struct pmfi_av_entry *e = pmfi_av_lookup(ep->av, o->dest);

	if (!e)
		return -FI_EINVAL;
	if (o->len > PMFI_MAX_MSG)
		return -FI_EMSGSIZE;
	/* Room for the completion, an error one included, before PM starts. */
	if (!pmfi_cq_room(ep->tx_cq, 1)) {
		pmfi_progress(ep);
		return -FI_EAGAIN;
	}

	struct pmfi_req *r = pmfi_req_get(ep);

	if (!r) {
		pmfi_progress(ep);
		return -FI_EAGAIN;
	}
	r->kind = REQ_RMA;
	r->context = o->context;
	r->flags = (o->flags & ~(uint64_t)(FI_READ | FI_WRITE | FI_ATOMIC)) | o->what;
	r->buf = o->buf;
	r->len = o->len;
	r->peer = e->peer;
	pmfi_list_init(&r->link);

	int err = remote_start(ep, e->peer, o, r);

	if (err == -EAGAIN) {
		/* Quiesced, or PM's operation slots are taken: try again. */
		pmfi_req_put(ep, r);
		pmfi_progress(ep);
		return -FI_EAGAIN;
	}
	if (err) {
		/* Refused at start (shm sees a bad key or range): an error
		 * completion, as udp reports the same later. */
		rma_complete(ep, r, err);
		return 0;
	}
	if (r->op.status != 1)
		rma_complete(ep, r, r->op.status);      /* shm: done already */
	else
		pmfi_list_add_tail(&ep->rma, &r->link);
	return 0;
}

ssize_t pmfi_remote_post(struct pmfi_ep *ep, const struct pmfi_remote *o)
{
	pmfi_lock(ep->dom);
	ssize_t ret = remote_post(ep, o);

	pmfi_unlock(ep->dom);
	return ret;
}

static ssize_t rma_locked(struct fid_ep *fid, uint64_t what, void *buf, size_t len,
			  fi_addr_t dest, uint64_t addr, uint64_t key, void *context,
			  uint64_t flags)
{
	struct pmfi_remote o = {
		.what = what, .buf = buf, .len = len, .dest = dest, .addr = addr, .key = key,
		.context = context, .flags = flags,
	};

	return pmfi_remote_post(pmfi_container_of(fid, struct pmfi_ep, fid), &o);
}

static ssize_t rma_read(struct fid_ep *fid, void *buf, size_t len, void *desc,
			fi_addr_t src_addr, uint64_t addr, uint64_t key, void *context)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid);

	(void)desc;
	return rma_locked(fid, FI_READ, buf, len, src_addr, addr, key, context,
			  ep->tx_op_flags);
}

static ssize_t rma_write(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			 fi_addr_t dest_addr, uint64_t addr, uint64_t key, void *context)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid);

	(void)desc;
	return rma_locked(fid, FI_WRITE, (void *)buf, len, dest_addr, addr, key, context,
			  ep->tx_op_flags);
}

/* One local and one remote piece: iov_limit and rma_iov_limit are 1. */
static ssize_t rma_msg(struct fid_ep *fid, uint64_t what, const struct fi_msg_rma *msg,
		       uint64_t flags)
{
	if (!msg || msg->iov_count > 1 || msg->rma_iov_count != 1 || !msg->rma_iov)
		return -FI_EINVAL;
	/* Remote CQ data and remote events need FI_RMA_EVENT: not offered. */
	if (flags & (FI_REMOTE_CQ_DATA | FI_INJECT))
		return -FI_EINVAL;

	size_t len = msg->iov_count ? msg->msg_iov[0].iov_len : 0;

	if (len > msg->rma_iov[0].len)
		return -FI_EINVAL;
	return rma_locked(fid, what, msg->iov_count ? msg->msg_iov[0].iov_base : NULL, len,
			  msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->context,
			  flags);
}

static ssize_t rma_readmsg(struct fid_ep *fid, const struct fi_msg_rma *msg, uint64_t flags)
{
	return rma_msg(fid, FI_READ, msg, flags);
}

static ssize_t rma_writemsg(struct fid_ep *fid, const struct fi_msg_rma *msg, uint64_t flags)
{
	return rma_msg(fid, FI_WRITE, msg, flags);
}

static ssize_t rma_readv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			 size_t count, fi_addr_t src_addr, uint64_t addr, uint64_t key,
			 void *context)
{
	(void)desc;
	if (count > 1)
		return -FI_EINVAL;
	return rma_read(fid, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, NULL,
			src_addr, addr, key, context);
}

static ssize_t rma_writev(struct fid_ep *fid, const struct iovec *iov, void **desc,
			  size_t count, fi_addr_t dest_addr, uint64_t addr, uint64_t key,
			  void *context)
{
	(void)desc;
	if (count > 1)
		return -FI_EINVAL;
	return rma_write(fid, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0, NULL,
			 dest_addr, addr, key, context);
}

/* fi_inject_write needs its buffer copied until PM completes, and remote
 * CQ data needs FI_RMA_EVENT: neither is offered (design §9). */
static ssize_t enosys_inject(struct fid_ep *fid, const void *buf, size_t len,
			     fi_addr_t dest_addr, uint64_t addr, uint64_t key)
{
	(void)fid; (void)buf; (void)len; (void)dest_addr; (void)addr; (void)key;
	return -FI_ENOSYS;
}

static ssize_t enosys_writedata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
				uint64_t data, fi_addr_t dest_addr, uint64_t addr,
				uint64_t key, void *context)
{
	(void)fid; (void)buf; (void)len; (void)desc; (void)data; (void)dest_addr;
	(void)addr; (void)key; (void)context;
	return -FI_ENOSYS;
}

static ssize_t enosys_injectdata(struct fid_ep *fid, const void *buf, size_t len,
				 uint64_t data, fi_addr_t dest_addr, uint64_t addr,
				 uint64_t key)
{
	(void)fid; (void)buf; (void)len; (void)data; (void)dest_addr; (void)addr; (void)key;
	return -FI_ENOSYS;
}

struct fi_ops_rma pmfi_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = rma_read,
	.readv = rma_readv,
	.readmsg = rma_readmsg,
	.write = rma_write,
	.writev = rma_writev,
	.writemsg = rma_writemsg,
	.inject = enosys_inject,
	.writedata = enosys_writedata,
	.injectdata = enosys_injectdata,
};
