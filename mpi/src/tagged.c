/* SPDX-License-Identifier: MIT */
/*
 * tagged.c - the posting calls of fi_ops_tagged and fi_ops_msg.  Untagged
 * messages are tagged ones with their own queues (PMFI_HDR_UNTAGGED), so
 * both tables share one send and one receive path.
 */
#include "pmfi.h"

#include <endian.h>
#include <string.h>

struct send_args {
	const void *buf;
	size_t len;
	fi_addr_t dest;
	uint64_t tag, data;
	bool has_data, tagged;
	void *context;
	uint64_t flags;
	bool silent;            /* fi_inject*: never a completion */
};

static ssize_t post_send(struct pmfi_ep *ep, const struct send_args *a)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;

	const struct pmfi_av_entry *e = pmfi_av_lookup(ep->av, a->dest);

	if (!e)
		return -FI_EINVAL;
	if (a->len > PMFI_MAX_MSG)
		return -FI_EMSGSIZE;

	bool inject = a->flags & FI_INJECT;

	if (inject && a->len > PMFI_INJECT_SIZE)
		return -FI_EMSGSIZE;

	struct pmfi_peer_q *q = &ep->peers[e->peer];
	bool eager = a->len <= pmfi_eager_limit(ep, e->peer) &&
		     !(a->flags & (FI_DELIVERY_COMPLETE | FI_MATCH_COMPLETE));
	struct pmfi_hdr h = {
		.op = eager ? PMFI_OP_EAGER : PMFI_OP_RTS,
		.dst_ep = htole16(e->ep),
		.src_ep = htole16((uint16_t)ep->index),
		.flags = (uint8_t)((a->has_data ? PMFI_HDR_CQ_DATA : 0) |
				   (a->tagged ? 0 : PMFI_HDR_UNTAGGED)),
		.tag = htole64(a->tag),
		.data = htole64(a->data),
		.arg = htole64(eager ? 0 : (uint64_t)a->len),
	};

	if (eager && pmfi_list_empty(&q->pending)) {
		bool comp = !a->silent &&
			    (!ep->tx_selective || (a->flags & FI_COMPLETION));

		if (comp && !pmfi_cq_room(ep->tx_cq, 1))
			return -FI_EAGAIN;

		int err = pmfi_send_eager(ep, e->peer, &h, a->buf, a->len);

		if (err == 0) {
			if (comp) {
				struct fi_cq_tagged_entry c = {
					.op_context = a->context,
					.flags = (a->tagged ? FI_TAGGED : FI_MSG) | FI_SEND,
				};

				pmfi_cq_write(ep->tx_cq, &c, FI_ADDR_NOTAVAIL);
			}
			return 0;
		}
		if (err != -EAGAIN)
			return pmfi_errno(err);
	}
	/* It must wait; the caller keeps an inject's buffer only until we return. */
	if (inject) {
		pmfi_progress(ep);
		return -FI_EAGAIN;
	}

	struct pmfi_req *r = pmfi_req_get(ep);

	if (!r) {
		pmfi_progress(ep);
		return -FI_EAGAIN;
	}
	r->kind = REQ_SEND;
	r->tagged = a->tagged;
	r->context = a->context;
	r->flags = a->flags;
	r->buf = (void *)a->buf;
	r->len = r->msg_len = a->len;
	r->peer = e->peer;
	r->hdr = h;
	r->mr = NULL;
	return pmfi_send_post(ep, r);
}

static ssize_t send_locked(struct fid_ep *fid, const struct send_args *a)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid);

	pmfi_lock(ep->dom);
	ssize_t ret = post_send(ep, a);

	pmfi_unlock(ep->dom);
	return ret;
}

struct recv_args {
	void *buf;
	size_t len;
	fi_addr_t src;
	uint64_t tag, ignore;
	bool tagged;
	void *context;
	uint64_t flags;
};

/* FI_PEEK: report the first match without taking it (FI_CLAIM keeps it
 * for a later receive with the same context, FI_DISCARD drops it). */
static ssize_t peek(struct pmfi_ep *ep, const struct pmfi_req *want, const struct recv_args *a)
{
	if (!pmfi_cq_room(ep->rx_cq, 1))
		return -FI_EAGAIN;
	pmfi_progress(ep);

	struct pmfi_unexp *u = pmfi_match_unexp(&ep->match, want, true);

	if (!u)
		return pmfi_recv_error(ep, a->context, a->tagged, NULL, a->tag, FI_ENOMSG, 0);

	struct fi_cq_tagged_entry c = {
		.op_context = a->context,
		.flags = (a->tagged ? FI_TAGGED : FI_MSG) | FI_RECV |
			 (u->has_data ? FI_REMOTE_CQ_DATA : 0),
		.len = u->len,
		.data = u->has_data ? u->data : 0,
		.tag = u->tagged ? u->tag : 0,
	};

	pmfi_cq_write(ep->rx_cq, &c, pmfi_av_source(ep->av, u->peer, u->peer_ep));
	if (a->flags & (FI_CLAIM | FI_DISCARD)) {
		pmfi_list_del(&u->link);
		if (a->flags & FI_DISCARD)
			pmfi_unexp_discard(ep, u);
		else
			((struct fi_context *)a->context)->internal[0] = u;
	}
	return 0;
}

/* FI_MULTI_RECV (untagged only): one buffer that stays posted while
 * messages fill it, each completing with its place in it; released when
 * less than FI_OPT_MIN_MULTI_RECV is left (progress.c). */
static ssize_t post_multi(struct pmfi_ep *ep, int peer, uint16_t peer_ep,
			  const struct recv_args *a)
{
	if (a->tagged || (a->flags & (FI_PEEK | FI_CLAIM | FI_DISCARD)) || !a->buf)
		return -FI_EINVAL;

	struct pmfi_req *r = pmfi_req_get(ep);

	if (!r)
		return -FI_EAGAIN;
	*r = (struct pmfi_req){
		.kind = REQ_RECV, .context = a->context, .flags = a->flags, .buf = a->buf,
		.len = a->len, .peer = peer, .peer_ep = peer_ep,
	};
	pmfi_list_init(&r->link);
	pmfi_list_add_tail(&ep->match.posted[0], &r->link);
	/* Messages that came before it, in their order. */
	pmfi_multi_drain(ep, r);
	return 0;
}

static ssize_t post_recv(struct pmfi_ep *ep, const struct recv_args *a)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;

	int peer = -1;
	uint16_t peer_ep = 0;
	bool directed = a->tagged ? ep->directed_tagged : ep->directed_msg;

	if (a->src == FI_ADDR_UNSPEC && directed && ep->exact)
		return -FI_EINVAL;      /* FI_EXACT_DIRECTED_RECV: a source, always */
	if (a->src != FI_ADDR_UNSPEC && directed) {
		const struct pmfi_av_entry *e = pmfi_av_lookup(ep->av, a->src);

		if (!e)
			return -FI_EINVAL;
		peer = e->peer;
		peer_ep = e->ep;
		if (ep->peers[peer].gone && !(a->flags & (FI_PEEK | FI_CLAIM)))
			/* Nothing will ever come from it. */
			return pmfi_recv_error(ep, a->context, a->tagged, a->buf, a->tag, FI_EIO,
					       EPIPE);
	}

	if (a->flags & FI_MULTI_RECV)
		return post_multi(ep, peer, peer_ep, a);

	if (a->flags & FI_PEEK) {
		/* Built here only: zeroing a request on every receive showed
		 * in the instructions a message costs (callgrind). */
		struct pmfi_req want = {
			.tagged = a->tagged, .peer = peer, .peer_ep = peer_ep, .tag = a->tag,
			.ignore = a->ignore,
		};

		return peek(ep, &want, a);
	}

	struct pmfi_unexp *u = NULL;

	if (a->flags & FI_CLAIM) {
		if (!a->context || !(u = ((struct fi_context *)a->context)->internal[0]))
			return -FI_EINVAL;
		((struct fi_context *)a->context)->internal[0] = NULL;
		if (a->flags & FI_DISCARD) {
			struct fi_cq_tagged_entry c = {
				.op_context = a->context,
				.flags = (a->tagged ? FI_TAGGED : FI_MSG) | FI_RECV,
				.tag = u->tag,
			};

			pmfi_unexp_discard(ep, u);
			if (!ep->rx_selective || (a->flags & FI_COMPLETION))
				pmfi_cq_write(ep->rx_cq, &c, FI_ADDR_NOTAVAIL);
			return 0;
		}
	}
	if (!pmfi_cq_room(ep->rx_cq, 1)) {
		if (u)
			((struct fi_context *)a->context)->internal[0] = u;
		return -FI_EAGAIN;
	}

	struct pmfi_req *r = pmfi_req_get(ep);

	if (!r) {
		if (u)
			((struct fi_context *)a->context)->internal[0] = u;
		return -FI_EAGAIN;
	}
	*r = (struct pmfi_req){
		.kind = REQ_RECV, .tagged = a->tagged, .context = a->context,
		.flags = a->flags, .buf = a->buf, .len = a->len,
		.tag = a->tag, .ignore = a->ignore, .peer = peer, .peer_ep = peer_ep,
	};
	pmfi_list_init(&r->link);
	if (!u)
		u = pmfi_match_unexp(&ep->match, r, false);
	if (u)
		pmfi_recv_take(ep, r, u);
	else
		pmfi_list_add_tail(&ep->match.posted[a->tagged], &r->link);
	return 0;
}

static ssize_t recv_locked(struct fid_ep *fid, const struct recv_args *a)
{
	struct pmfi_ep *ep = pmfi_container_of(fid, struct pmfi_ep, fid);

	pmfi_lock(ep->dom);
	ssize_t ret = post_recv(ep, a);

	pmfi_unlock(ep->dom);
	return ret;
}

static uint64_t tx_flags(struct fid_ep *fid)
{
	return pmfi_container_of(fid, struct pmfi_ep, fid)->tx_op_flags;
}

static uint64_t rx_flags(struct fid_ep *fid)
{
	return pmfi_container_of(fid, struct pmfi_ep, fid)->rx_op_flags;
}

/* ---- fi_ops_tagged ---- */

static ssize_t t_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
		      uint64_t tag, uint64_t ignore, void *context)
{
	(void)desc;
	return recv_locked(ep, &(struct recv_args){ buf, len, src, tag, ignore, true, context,
						    rx_flags(ep) });
}

static ssize_t t_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	(void)desc;
	if (count > 1)
		return -FI_EINVAL;
	return recv_locked(ep, &(struct recv_args){ count ? iov->iov_base : NULL,
						    count ? iov->iov_len : 0, src, tag, ignore,
						    true, context, rx_flags(ep) });
}

static ssize_t t_recvmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (msg->iov_count > 1)
		return -FI_EINVAL;
	return recv_locked(ep, &(struct recv_args){
		msg->iov_count ? msg->msg_iov->iov_base : NULL,
		msg->iov_count ? msg->msg_iov->iov_len : 0, msg->addr, msg->tag, msg->ignore,
		true, msg->context, flags });
}

static ssize_t t_send(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		      fi_addr_t dest, uint64_t tag, void *context)
{
	(void)desc;
	return send_locked(ep, &(struct send_args){ buf, len, dest, tag, 0, false, true, context,
						    tx_flags(ep), false });
}

static ssize_t t_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t dest, uint64_t tag, void *context)
{
	(void)desc;
	if (count > 1)
		return -FI_EINVAL;
	return send_locked(ep, &(struct send_args){ count ? iov->iov_base : NULL,
						    count ? iov->iov_len : 0, dest, tag, 0, false,
						    true, context, tx_flags(ep), false });
}

static ssize_t t_sendmsg(struct fid_ep *ep, const struct fi_msg_tagged *msg, uint64_t flags)
{
	if (msg->iov_count > 1)
		return -FI_EINVAL;
	return send_locked(ep, &(struct send_args){
		msg->iov_count ? msg->msg_iov->iov_base : NULL,
		msg->iov_count ? msg->msg_iov->iov_len : 0, msg->addr, msg->tag, msg->data,
		(flags & FI_REMOTE_CQ_DATA) != 0, true, msg->context, flags, false });
}

static ssize_t t_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest,
			uint64_t tag)
{
	return send_locked(ep, &(struct send_args){ buf, len, dest, tag, 0, false, true, NULL,
						    FI_INJECT, true });
}

static ssize_t t_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc,
			  uint64_t data, fi_addr_t dest, uint64_t tag, void *context)
{
	(void)desc;
	return send_locked(ep, &(struct send_args){ buf, len, dest, tag, data, true, true, context,
						    tx_flags(ep), false });
}

static ssize_t t_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
			    fi_addr_t dest, uint64_t tag)
{
	return send_locked(ep, &(struct send_args){ buf, len, dest, tag, data, true, true, NULL,
						    FI_INJECT, true });
}

struct fi_ops_tagged pmfi_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = t_recv,
	.recvv = t_recvv,
	.recvmsg = t_recvmsg,
	.send = t_send,
	.sendv = t_sendv,
	.sendmsg = t_sendmsg,
	.inject = t_inject,
	.senddata = t_senddata,
	.injectdata = t_injectdata,
};

/* ---- fi_ops_msg: the same paths without tags ---- */

static ssize_t m_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src,
		      void *context)
{
	(void)desc;
	return recv_locked(ep, &(struct recv_args){ buf, len, src, 0, 0, false, context,
						    rx_flags(ep) });
}

static ssize_t m_recvv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t src, void *context)
{
	(void)desc;
	if (count > 1)
		return -FI_EINVAL;
	return recv_locked(ep, &(struct recv_args){ count ? iov->iov_base : NULL,
						    count ? iov->iov_len : 0, src, 0, 0, false,
						    context, rx_flags(ep) });
}

static ssize_t m_recvmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	if (msg->iov_count > 1)
		return -FI_EINVAL;
	return recv_locked(ep, &(struct recv_args){
		msg->iov_count ? msg->msg_iov->iov_base : NULL,
		msg->iov_count ? msg->msg_iov->iov_len : 0, msg->addr, 0, 0, false,
		msg->context, flags });
}

static ssize_t m_send(struct fid_ep *ep, const void *buf, size_t len, void *desc,
		      fi_addr_t dest, void *context)
{
	(void)desc;
	return send_locked(ep, &(struct send_args){ buf, len, dest, 0, 0, false, false, context,
						    tx_flags(ep), false });
}

static ssize_t m_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t count,
		       fi_addr_t dest, void *context)
{
	(void)desc;
	if (count > 1)
		return -FI_EINVAL;
	return send_locked(ep, &(struct send_args){ count ? iov->iov_base : NULL,
						    count ? iov->iov_len : 0, dest, 0, 0, false,
						    false, context, tx_flags(ep), false });
}

static ssize_t m_sendmsg(struct fid_ep *ep, const struct fi_msg *msg, uint64_t flags)
{
	if (msg->iov_count > 1)
		return -FI_EINVAL;
	return send_locked(ep, &(struct send_args){
		msg->iov_count ? msg->msg_iov->iov_base : NULL,
		msg->iov_count ? msg->msg_iov->iov_len : 0, msg->addr, 0, msg->data,
		(flags & FI_REMOTE_CQ_DATA) != 0, false, msg->context, flags, false });
}

static ssize_t m_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest)
{
	return send_locked(ep, &(struct send_args){ buf, len, dest, 0, 0, false, false, NULL,
						    FI_INJECT, true });
}

static ssize_t m_senddata(struct fid_ep *ep, const void *buf, size_t len, void *desc,
			  uint64_t data, fi_addr_t dest, void *context)
{
	(void)desc;
	return send_locked(ep, &(struct send_args){ buf, len, dest, 0, data, true, false, context,
						    tx_flags(ep), false });
}

static ssize_t m_injectdata(struct fid_ep *ep, const void *buf, size_t len, uint64_t data,
			    fi_addr_t dest)
{
	return send_locked(ep, &(struct send_args){ buf, len, dest, 0, data, true, false, NULL,
						    FI_INJECT, true });
}

struct fi_ops_msg pmfi_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = m_recv,
	.recvv = m_recvv,
	.recvmsg = m_recvmsg,
	.send = m_send,
	.sendv = m_sendv,
	.sendmsg = m_sendmsg,
	.inject = m_inject,
	.senddata = m_senddata,
	.injectdata = m_injectdata,
};
