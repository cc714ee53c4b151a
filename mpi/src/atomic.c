/* SPDX-License-Identifier: MIT */
/*
 * atomic.c - FI_ATOMIC as PM's pm_atomic() (design §8).
 *
 * One integer of 64 or 32 bits per operation (count 1; FI_INT64, FI_UINT64,
 * FI_INT32, FI_UINT32): what PM does, and what Open MPI's btl ofi asks for
 * (osc rdma's locks and accumulates: FI_SUM, FI_ATOMIC_WRITE, FI_CSWAP,
 * fetching or not, 32-bit ones for MPI_INT).  The operand is read at post,
 * so fi_inject_atomic needs no copy.  Each goes
 * the way of an RMA (rma.c, pmfi_remote_post): its completion is a
 * delivery completion in the transmit CQ, FI_ATOMIC | FI_WRITE for
 * fi_atomic, FI_ATOMIC | FI_READ for the fetching ones, and counts on the
 * counter bound for that event.
 */
#include "pmfi.h"

#include <string.h>

enum kind { WRITE, FETCH, COMPARE };

/* PM's operation for op in an atomic of this kind; 0 when there is none. */
static enum pm_atomic_op pm_op_of(enum kind kind, enum fi_op op)
{
	if (kind == COMPARE)
		return op == FI_CSWAP ? PM_ATOMIC_CSWAP : 0;
	switch (op) {
	case FI_SUM:
		return PM_ATOMIC_ADD;
	case FI_BOR:
		return PM_ATOMIC_OR;
	case FI_BAND:
		return PM_ATOMIC_AND;
	case FI_BXOR:
		return PM_ATOMIC_XOR;
	case FI_ATOMIC_WRITE:
		return PM_ATOMIC_SWAP;
	case FI_ATOMIC_READ:
		return kind == FETCH ? PM_ATOMIC_READ : 0;
	default:
		return 0;
	}
}

/* PM's width flag for datatype, or -1 when PM has no such word. */
static int width_of(enum fi_datatype datatype)
{
	switch (datatype) {
	case FI_INT64:
	case FI_UINT64:
		return 0;
	case FI_INT32:
	case FI_UINT32:
		return PM_ATOMIC_32;
	default:
		return -1;
	}
}

static bool datatype_ok(enum fi_datatype datatype)
{
	return width_of(datatype) >= 0;
}

static size_t size_of(enum fi_datatype datatype)
{
	return width_of(datatype) == PM_ATOMIC_32 ? sizeof(uint32_t) : sizeof(uint64_t);
}

static uint64_t load(const void *p, size_t size)
{
	if (size == sizeof(uint32_t)) {
		uint32_t v;

		memcpy(&v, p, sizeof(v));
		return v;
	}

	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* The valid functions and fi_query_atomic: one element. */
static int valid(enum kind kind, enum fi_datatype datatype, enum fi_op op, size_t *count)
{
	if (!datatype_ok(datatype) || !pm_op_of(kind, op))
		return -FI_EOPNOTSUPP;
	if (count)
		*count = 1;
	return 0;
}

/* One atomic: buf holds the operand (not read for FI_ATOMIC_READ), compare
 * the value CSWAP compares with, result where the old value goes. */
static ssize_t post(struct fid_ep *fid, enum kind kind, const void *buf, size_t count,
		    const void *compare, void *result, fi_addr_t dest, uint64_t addr, uint64_t key,
		    enum fi_datatype datatype, enum fi_op op, void *context, uint64_t flags)
{
	enum pm_atomic_op aop = pm_op_of(kind, op);

	if (!datatype_ok(datatype) || !aop) {
		PMFI_INFO("atomic: op %d on datatype %d (%s) is not supported: 64- and 32-bit integers, "
			  "sum, bitwise, write, read and compare-and-swap only", (int)op,
			  (int)datatype, kind == WRITE ? "no fetch" : kind == FETCH ? "fetching" :
			  "compare");
		return -FI_EOPNOTSUPP;
	}
	if (count != 1 || (aop != PM_ATOMIC_READ && !buf) || (kind == COMPARE && !compare) ||
	    (kind != WRITE && !result))
		return -FI_EINVAL;

	size_t size = size_of(datatype);
	struct pmfi_remote o = {
		.what = FI_ATOMIC | (kind == WRITE ? FI_WRITE : FI_READ),
		.buf = result, .len = size, .dest = dest, .addr = addr, .key = key,
		.context = context, .flags = flags, .aop = aop | (unsigned)width_of(datatype),
		.result = kind == WRITE ? NULL : result,
	};

	/* The operands in the host's order, widened: PM takes the low bits. */
	if (aop != PM_ATOMIC_READ)
		o.operand = load(buf, size);
	if (kind == COMPARE)
		o.compare = load(compare, size);
	return pmfi_remote_post(pmfi_container_of(fid, struct pmfi_ep, fid), &o);
}

static struct pmfi_ep *ep_of(struct fid_ep *fid)
{
	return pmfi_container_of(fid, struct pmfi_ep, fid);
}

/* The one element of an ioc array of count 1 (more: -FI_EINVAL at post). */
static const void *ioc_addr(const struct fi_ioc *ioc, size_t count)
{
	return count == 1 ? ioc[0].addr : NULL;
}

static size_t ioc_count(const struct fi_ioc *ioc, size_t count)
{
	return count == 1 ? ioc[0].count : 0;
}

static ssize_t atomic_write(struct fid_ep *fid, const void *buf, size_t count, void *desc,
			    fi_addr_t dest, uint64_t addr, uint64_t key,
			    enum fi_datatype datatype, enum fi_op op, void *context)
{
	(void)desc;
	return post(fid, WRITE, buf, count, NULL, NULL, dest, addr, key, datatype, op, context,
		    ep_of(fid)->tx_op_flags);
}

static ssize_t atomic_writev(struct fid_ep *fid, const struct fi_ioc *iov, void **desc,
			     size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
			     enum fi_datatype datatype, enum fi_op op, void *context)
{
	(void)desc;
	return post(fid, WRITE, ioc_addr(iov, count), ioc_count(iov, count), NULL, NULL, dest,
		    addr, key, datatype, op, context, ep_of(fid)->tx_op_flags);
}

/* A msg form: one ioc, one remote ioc of one element. */
static bool msg_ok(const struct fi_msg_atomic *msg, uint64_t flags)
{
	return msg && msg->iov_count == 1 && msg->rma_iov_count == 1 && msg->rma_iov &&
	       msg->rma_iov[0].count == 1 && !(flags & FI_REMOTE_CQ_DATA);
}

static ssize_t atomic_writemsg(struct fid_ep *fid, const struct fi_msg_atomic *msg,
			       uint64_t flags)
{
	if (!msg_ok(msg, flags))
		return -FI_EINVAL;
	return post(fid, WRITE, msg->msg_iov[0].addr, msg->msg_iov[0].count, NULL, NULL,
		    msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key, msg->datatype, msg->op,
		    msg->context, flags);
}

static ssize_t atomic_inject(struct fid_ep *fid, const void *buf, size_t count,
			     fi_addr_t dest, uint64_t addr, uint64_t key,
			     enum fi_datatype datatype, enum fi_op op)
{
	return post(fid, WRITE, buf, count, NULL, NULL, dest, addr, key, datatype, op, NULL,
		    FI_INJECT);
}

static ssize_t atomic_readwrite(struct fid_ep *fid, const void *buf, size_t count,
				void *desc, void *result, void *result_desc, fi_addr_t dest,
				uint64_t addr, uint64_t key, enum fi_datatype datatype,
				enum fi_op op, void *context)
{
	(void)desc; (void)result_desc;
	return post(fid, FETCH, buf, count, NULL, result, dest, addr, key, datatype, op, context,
		    ep_of(fid)->tx_op_flags);
}

static ssize_t atomic_readwritev(struct fid_ep *fid, const struct fi_ioc *iov, void **desc,
				 size_t count, struct fi_ioc *resultv, void **result_desc,
				 size_t result_count, fi_addr_t dest, uint64_t addr, uint64_t key,
				 enum fi_datatype datatype, enum fi_op op, void *context)
{
	(void)desc; (void)result_desc;
	if (result_count != 1 || resultv[0].count != ioc_count(iov, count))
		return -FI_EINVAL;
	return post(fid, FETCH, ioc_addr(iov, count), ioc_count(iov, count), NULL,
		    resultv[0].addr, dest, addr, key, datatype, op, context,
		    ep_of(fid)->tx_op_flags);
}

static ssize_t atomic_readwritemsg(struct fid_ep *fid, const struct fi_msg_atomic *msg,
				   struct fi_ioc *resultv, void **result_desc,
				   size_t result_count, uint64_t flags)
{
	(void)result_desc;
	if (!msg_ok(msg, flags) || result_count != 1 || resultv[0].count != 1)
		return -FI_EINVAL;
	return post(fid, FETCH, msg->msg_iov[0].addr, msg->msg_iov[0].count, NULL,
		    resultv[0].addr, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key,
		    msg->datatype, msg->op, msg->context, flags);
}

static ssize_t atomic_compwrite(struct fid_ep *fid, const void *buf, size_t count,
				void *desc, const void *compare, void *compare_desc,
				void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
				uint64_t key, enum fi_datatype datatype, enum fi_op op,
				void *context)
{
	(void)desc; (void)compare_desc; (void)result_desc;
	return post(fid, COMPARE, buf, count, compare, result, dest, addr, key, datatype, op,
		    context, ep_of(fid)->tx_op_flags);
}

static ssize_t atomic_compwritev(struct fid_ep *fid, const struct fi_ioc *iov, void **desc,
				 size_t count, const struct fi_ioc *comparev,
				 void **compare_desc, size_t compare_count,
				 struct fi_ioc *resultv, void **result_desc, size_t result_count,
				 fi_addr_t dest, uint64_t addr, uint64_t key,
				 enum fi_datatype datatype, enum fi_op op, void *context)
{
	(void)desc; (void)compare_desc; (void)result_desc;
	if (compare_count != 1 || result_count != 1 || comparev[0].count != 1 ||
	    resultv[0].count != 1)
		return -FI_EINVAL;
	return post(fid, COMPARE, ioc_addr(iov, count), ioc_count(iov, count), comparev[0].addr,
		    resultv[0].addr, dest, addr, key, datatype, op, context,
		    ep_of(fid)->tx_op_flags);
}

static ssize_t atomic_compwritemsg(struct fid_ep *fid, const struct fi_msg_atomic *msg,
				   const struct fi_ioc *comparev, void **compare_desc,
				   size_t compare_count, struct fi_ioc *resultv,
				   void **result_desc, size_t result_count, uint64_t flags)
{
	(void)compare_desc; (void)result_desc;
	if (!msg_ok(msg, flags) || compare_count != 1 || result_count != 1 ||
	    comparev[0].count != 1 || resultv[0].count != 1)
		return -FI_EINVAL;
	return post(fid, COMPARE, msg->msg_iov[0].addr, msg->msg_iov[0].count, comparev[0].addr,
		    resultv[0].addr, msg->addr, msg->rma_iov[0].addr, msg->rma_iov[0].key,
		    msg->datatype, msg->op, msg->context, flags);
}

static int atomic_writevalid(struct fid_ep *fid, enum fi_datatype datatype, enum fi_op op,
			     size_t *count)
{
	(void)fid;
	return valid(WRITE, datatype, op, count);
}

static int atomic_readwritevalid(struct fid_ep *fid, enum fi_datatype datatype,
				 enum fi_op op, size_t *count)
{
	(void)fid;
	return valid(FETCH, datatype, op, count);
}

static int atomic_compwritevalid(struct fid_ep *fid, enum fi_datatype datatype,
				 enum fi_op op, size_t *count)
{
	(void)fid;
	return valid(COMPARE, datatype, op, count);
}

int pmfi_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
		      struct fi_atomic_attr *attr, uint64_t flags)
{
	(void)domain;
	if ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC))
		return -FI_EINVAL;

	size_t count;
	int err = valid(flags & FI_COMPARE_ATOMIC ? COMPARE :
			flags & FI_FETCH_ATOMIC ? FETCH : WRITE, datatype, op, &count);

	if (err)
		return err;
	if (attr) {
		attr->count = count;
		attr->size = size_of(datatype);
	}
	return 0;
}

struct fi_ops_atomic pmfi_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = atomic_write,
	.writev = atomic_writev,
	.writemsg = atomic_writemsg,
	.inject = atomic_inject,
	.readwrite = atomic_readwrite,
	.readwritev = atomic_readwritev,
	.readwritemsg = atomic_readwritemsg,
	.compwrite = atomic_compwrite,
	.compwritev = atomic_compwritev,
	.compwritemsg = atomic_compwritemsg,
	.writevalid = atomic_writevalid,
	.readwritevalid = atomic_readwritevalid,
	.compwritevalid = atomic_compwritevalid,
};
