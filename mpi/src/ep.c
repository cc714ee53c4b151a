/* SPDX-License-Identifier: MIT */
/*
 * ep.c - the RDM endpoint: binding, enabling, its name, cancel, options,
 * and the fixed pool of requests the data path draws from.
 */
#include "pmfi.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

/* Requests beyond the transmit and receive queue sizes: FIN messages that
 * meet a full PM ring wait in one. */
#define PMFI_CTRL_REQS 256

struct pmfi_req *pmfi_req_get(struct pmfi_ep *ep)
{
	if (pmfi_list_empty(&ep->free_reqs))
		return NULL;

	struct pmfi_req *r = pmfi_container_of(ep->free_reqs.next, struct pmfi_req, link);

	pmfi_list_del(&r->link);
	return r;
}

void pmfi_req_put(struct pmfi_ep *ep, struct pmfi_req *r)
{
	r->kind = REQ_FREE;
	r->mr = NULL;
	pmfi_list_add_tail(&ep->free_reqs, &r->link);
}

static void free_unexpected(struct pmfi_ep *ep)
{
	for (int t = 0; t < 2; t++)
		while (!pmfi_list_empty(&ep->match.unexp[t])) {
			struct pmfi_list *l = ep->match.unexp[t].next;

			pmfi_list_del(l);
			free(pmfi_container_of(l, struct pmfi_unexp, link));
		}
}

static int ep_close(struct fid *fid)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);

	if (ep->pm) {
		/* The context may serve other endpoints on: a message this
		 * one took must not hold its ring. */
		pmfi_release_held(ep);
		/* PM holds the pm_op of an RMA still in flight: wait (bounded)
		 * for it before the pool that holds it goes. */
		for (int i = 0; i < 5000 && !pmfi_list_empty(&ep->rma); i++) {
			pmfi_rma_poll(ep);
			if (!pmfi_list_empty(&ep->rma))
				pm_wait(ep->pm, 1);
		}
		if (!pmfi_list_empty(&ep->rma))
			PMFI_WARN("endpoint closed with RMA operations in flight");
		/* Rendezvous sends still exposed: hide their buffers. */
		for (size_t i = 0; i < ep->pool_size; i++)
			if (ep->pool[i].mr)
				pm_mr_deregister(ep->pm, ep->pool[i].mr);
	}
	if (ep->match.unexp_count)
		PMFI_INFO("endpoint closed: %llu unexpected messages (%llu bytes) over its life",
			  (unsigned long long)ep->match.unexp_count,
			  (unsigned long long)ep->match.unexp_bytes);
	if (ep->multi_msgs)
		PMFI_INFO("endpoint closed: %llu messages into multi-receive buffers, "
			  "%llu buffers used up",
			  (unsigned long long)ep->multi_msgs,
			  (unsigned long long)ep->multi_used_up);
	if (ep->dropped)
		PMFI_WARN("endpoint closed: %llu malformed messages were dropped",
			  (unsigned long long)ep->dropped);
	free_unexpected(ep);
	while (!pmfi_list_empty(&ep->inbox)) {
		struct pmfi_list *l = ep->inbox.next;

		pmfi_list_del(l);
		free(pmfi_container_of(l, struct pmfi_inbox, link));
	}
	if (ep->tx_cq)
		pmfi_cq_unbind_ep(ep->tx_cq, ep);
	if (ep->rx_cq && ep->rx_cq != ep->tx_cq)
		pmfi_cq_unbind_ep(ep->rx_cq, ep);
	if (ep->av)
		ep->av->refs--;
	if (ep->rma_cntr) {
		ep->rma_cntr->refs--;
		if (ep->rma_cntr->ep == ep)
			ep->rma_cntr->ep = NULL;
	}
	free(ep->pool);
	free(ep->peers);
	ep->dom->refs--;
	pmfi_proc_ep_release(ep->index);
	free(ep);
	pmfi_proc_put();
	return 0;
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);
	int err = 0;

	if (ep->enabled)
		return -FI_EOPBADSTATE;
	switch (bfid->fclass) {
	case FI_CLASS_AV: {
		struct pmfi_av *av = pmfi_container_of(bfid, struct pmfi_av, fid.fid);

		if (ep->av)
			return -FI_EINVAL;
		ep->av = av;
		av->refs++;
		return 0;
	}
	case FI_CLASS_CQ: {
		struct pmfi_cq *cq = pmfi_container_of(bfid, struct pmfi_cq, fid.fid);

		if (!(flags & (FI_TRANSMIT | FI_RECV)) ||
		    (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)))
			return -FI_EINVAL;
		if (((flags & FI_TRANSMIT) && ep->tx_cq) || ((flags & FI_RECV) && ep->rx_cq))
			return -FI_EINVAL;
		err = pmfi_cq_bind_ep(cq, ep);
		if (err)
			return err;
		if (flags & FI_TRANSMIT) {
			ep->tx_cq = cq;
			ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
		}
		if (flags & FI_RECV) {
			ep->rx_cq = cq;
			ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
		}
		return 0;
	}
	case FI_CLASS_EQ:
		return 0;       /* nothing ever goes to it */
	case FI_CLASS_CNTR: {
		struct pmfi_cntr *c = pmfi_container_of(bfid, struct pmfi_cntr, fid.fid);

		/* Sends and receives are not counted: refused, not left still. */
		if (!flags || (flags & ~PMFI_CNTR_EVENTS))
			return -FI_ENOSYS;
		if (ep->rma_cntr)
			return -FI_EINVAL;
		ep->rma_cntr = c;
		ep->cntr_events = flags;
		c->ep = ep;
		c->refs++;
		return 0;
	}
	default:
		return -FI_EINVAL;
	}
}

static int ep_enable(struct pmfi_ep *ep)
{
	if (ep->enabled)
		return 0;
	if (!ep->av || !ep->tx_cq || !ep->rx_cq)
		return -FI_ENOCQ;
	ep->npeers = pmfi_proc_max_peers(ep->pm);
	ep->peers = calloc((size_t)ep->npeers, sizeof(*ep->peers));
	ep->pool_size = PMFI_TX_SIZE + PMFI_RX_SIZE + PMFI_CTRL_REQS;
	ep->pool = calloc(ep->pool_size, sizeof(*ep->pool));
	if (!ep->peers || !ep->pool) {
		free(ep->peers);
		free(ep->pool);
		ep->peers = NULL;
		ep->pool = NULL;
		return -FI_ENOMEM;
	}
	for (size_t i = 0; i < ep->pool_size; i++)
		pmfi_list_add_tail(&ep->free_reqs, &ep->pool[i].link);
	for (int p = 0; p < ep->npeers; p++) {
		struct pmfi_peer_q *q = &ep->peers[p];

		pmfi_list_init(&q->pending);
		pmfi_list_init(&q->active);
	}
	ep->enabled = true;
	return 0;
}

size_t pmfi_eager_limit(struct pmfi_ep *ep, int peer)
{
	struct pmfi_peer_q *q = &ep->peers[peer];

	if (__builtin_expect(q->eager_limit == 0, 0)) {
		size_t room = pm_max_message(ep->pm, peer);
		size_t want = pmfi_params.eager_max ? pmfi_params.eager_max :
			      pmfi_eager_default(pm_peer_device(ep->pm, peer));

		room = room > sizeof(struct pmfi_hdr) ? room - sizeof(struct pmfi_hdr) : 0;
		q->eager_limit = want < room ? want : room;
	}
	return q->eager_limit;
}

static int ep_control(struct fid *fid, int command, void *arg)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);
	int err = 0;

	pmfi_lock(ep->dom);
	switch (command) {
	case FI_ENABLE:
		err = ep_enable(ep);
		break;
	case FI_GETOPSFLAG: {
		uint64_t *f = arg;

		if (*f & FI_TRANSMIT)
			*f = ep->tx_op_flags;
		else if (*f & FI_RECV)
			*f = ep->rx_op_flags;
		else
			err = -FI_EINVAL;
		break;
	}
	case FI_SETOPSFLAG: {
		uint64_t f = *(uint64_t *)arg;

		if (f & FI_TRANSMIT)
			ep->tx_op_flags = f & PMFI_TX_OP_FLAGS;
		else if (f & FI_RECV)
			ep->rx_op_flags = f & PMFI_RX_OP_FLAGS;
		else
			err = -FI_EINVAL;
		break;
	}
	default:
		err = -FI_ENOSYS;
	}
	pmfi_unlock(ep->dom);
	return err;
}

static ssize_t ep_cancel(fid_t fid, void *context)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);
	ssize_t ret = -FI_ENOENT;

	pmfi_lock(ep->dom);
	struct pmfi_req *r = pmfi_match_cancel(&ep->match, context);

	if (r) {
		pmfi_recv_error(ep, r->context, r->tagged, r->buf, r->tag, FI_ECANCELED, 0);
		pmfi_req_put(ep, r);
		ret = 0;
	}
	pmfi_unlock(ep->dom);
	return ret;
}

static int ep_getopt(fid_t fid, int level, int optname, void *optval, size_t *optlen)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);

	if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!optval || !optlen || *optlen < sizeof(size_t))
		return -FI_EINVAL;
	pmfi_lock(ep->dom);
	*(size_t *)optval = ep->min_multi_recv;
	pmfi_unlock(ep->dom);
	*optlen = sizeof(size_t);
	return 0;
}

static int ep_setopt(fid_t fid, int level, int optname, const void *optval, size_t optlen)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);

	/* FI_OPT_CUDA_API_PERMITTED and the rest: we claim no FI_HMEM. */
	if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!optval || optlen != sizeof(size_t))
		return -FI_EINVAL;
	pmfi_lock(ep->dom);
	ep->min_multi_recv = *(const size_t *)optval;
	pmfi_unlock(ep->dom);
	return 0;
}

static int enosys_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
		      struct fid_ep **tx_ep, void *context)
{
	(void)sep; (void)index; (void)attr; (void)tx_ep; (void)context;
	return -FI_ENOSYS;
}

static int enosys_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
			 struct fid_ep **rx_ep, void *context)
{
	(void)sep; (void)index; (void)attr; (void)rx_ep; (void)context;
	return -FI_ENOSYS;
}

static ssize_t rx_size_left(struct fid_ep *fid)
{
	(void)fid;
	return PMFI_RX_SIZE;
}

static ssize_t tx_size_left(struct fid_ep *fid)
{
	(void)fid;
	return PMFI_TX_SIZE;
}

static int ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid.fid);
	struct pmfi_name n = {
		.magic = htole32(PMFI_NAME_MAGIC),
		.version = PMFI_NAME_VERSION,
		.ep = htole16((uint16_t)ep->index),
	};
	size_t len = sizeof(n.pm);
	int err = pm_address(ep->pm, n.pm, &len);

	if (err)
		return pmfi_errno(err);
	if (*addrlen < sizeof(n)) {
		*addrlen = sizeof(n);
		return -FI_ETOOSMALL;
	}
	memcpy(addr, &n, sizeof(n));
	*addrlen = sizeof(n);
	return 0;
}

static int enosys_setname(fid_t fid, void *addr, size_t addrlen)
{
	(void)fid; (void)addr; (void)addrlen;
	return -FI_ENOSYS;
}

static int enosys_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen)
{
	(void)ep; (void)addr; (void)addrlen;
	return -FI_ENOSYS;
}

static int enosys_connect(struct fid_ep *ep, const void *addr, const void *param,
			  size_t paramlen)
{
	(void)ep; (void)addr; (void)param; (void)paramlen;
	return -FI_ENOSYS;
}

static int enosys_listen(struct fid_pep *pep)
{
	(void)pep;
	return -FI_ENOSYS;
}

static int enosys_accept(struct fid_ep *ep, const void *param, size_t paramlen)
{
	(void)ep; (void)param; (void)paramlen;
	return -FI_ENOSYS;
}

static int enosys_reject(struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)
{
	(void)pep; (void)handle; (void)param; (void)paramlen;
	return -FI_ENOSYS;
}

static int enosys_shutdown(struct fid_ep *ep, uint64_t flags)
{
	(void)ep; (void)flags;
	return -FI_ENOSYS;
}

static int enosys_join(struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc,
		       void *context)
{
	(void)ep; (void)addr; (void)flags; (void)mc; (void)context;
	return -FI_ENOSYS;
}

static struct fi_ops ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ep_close,
	.bind = ep_bind,
	.control = ep_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = enosys_ctx,
	.rx_ctx = enosys_rx_ctx,
	.rx_size_left = rx_size_left,
	.tx_size_left = tx_size_left,
};

static struct fi_ops_cm ep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = enosys_setname,
	.getname = ep_getname,
	.getpeer = enosys_getpeer,
	.connect = enosys_connect,
	.listen = enosys_listen,
	.accept = enosys_accept,
	.reject = enosys_reject,
	.shutdown = enosys_shutdown,
	.join = enosys_join,
};

int pmfi_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
		 void *context)
{
	struct pmfi_domain *d = pmfi_container_of(domain, struct pmfi_domain, fid);

	if (!info || (info->ep_attr && info->ep_attr->type != FI_EP_RDM &&
		      info->ep_attr->type != FI_EP_UNSPEC))
		return -FI_EINVAL;

	struct pmfi_ep *ep = calloc(1, sizeof(*ep));

	if (!ep)
		return -FI_ENOMEM;
	pmfi_list_init(&ep->inbox);
	ep->index = pmfi_proc_ep_claim(ep);
	if (ep->index < 0) {
		int err = ep->index;

		free(ep);
		return err;
	}

	int err = pmfi_proc_get(&ep->pm);

	if (err) {
		pmfi_proc_ep_release(ep->index);
		free(ep);
		return err;
	}
	ep->dom = d;
	ep->self = pm_rank(ep->pm);
	/* Without a directed-receive capability a receive's src_addr is
	 * ignored (the spec; fi_pingpong posts its first receive from fi_addr
	 * 0 before its AV holds anything, and asks no such capability).  The
	 * 2.x bits mean something else to a 1.x caller (info.c). */
	uint64_t rx_caps = info->caps & (info->rx_attr && info->rx_attr->caps ?
					 info->rx_attr->caps : ~(uint64_t)0);
	bool v2 = d->fabric->fid.api_version >= PMFI_V2;

	ep->exact = v2 && (rx_caps & PMFI_EXACT_DIRECTED_RECV);
	ep->directed_msg = (rx_caps & FI_DIRECTED_RECV) || ep->exact;
	ep->directed_tagged = ep->directed_msg || (v2 && (rx_caps & PMFI_TAGGED_DIRECTED_RECV));
	ep->min_multi_recv = PMFI_MIN_MULTI_RECV;
	ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags & PMFI_TX_OP_FLAGS : 0;
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags & PMFI_RX_OP_FLAGS : 0;
	pmfi_list_init(&ep->active);
	pmfi_list_init(&ep->rndv);
	pmfi_list_init(&ep->reads);
	pmfi_list_init(&ep->read_wait);
	pmfi_list_init(&ep->rma);
	pmfi_list_init(&ep->free_reqs);
	pmfi_match_init(&ep->match);
	ep->fid.fid.fclass = FI_CLASS_EP;
	ep->fid.fid.context = context;
	ep->fid.fid.ops = &ep_fi_ops;
	ep->fid.ops = &ep_ops;
	ep->fid.cm = &ep_cm_ops;
	ep->fid.msg = &pmfi_msg_ops;
	ep->fid.tagged = &pmfi_tagged_ops;
	if (info->caps & FI_RMA)
		ep->fid.rma = &pmfi_rma_ops;
	if (info->caps & FI_ATOMIC)
		ep->fid.atomic = &pmfi_atomic_ops;
	d->refs++;
	*out = &ep->fid;
	return 0;
}
