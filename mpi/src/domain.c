/* SPDX-License-Identifier: MIT */
/*
 * domain.c - fid_domain and memory registration.  With mr_mode 0 (no
 * FI_MR_LOCAL, no remote access offered) a registration is a local record
 * with the key asked for: descriptors are ignored by every data call.
 */
#include "pmfi.h"

#include <stdlib.h>
#include <string.h>

static int domain_close(struct fid *fid)
{
	struct pmfi_domain *d = pmfi_container_of(fid, struct pmfi_domain, fid.fid);

	if (d->refs)
		return -FI_EBUSY;
	free(d);
	return 0;
}

static int enosys_sep(struct fid_domain *domain, struct fi_info *info, struct fid_ep **sep,
		      void *context)
{
	(void)domain; (void)info; (void)sep; (void)context;
	return -FI_ENOSYS;
}

static int enosys_poll(struct fid_domain *domain, struct fi_poll_attr *attr,
		       struct fid_poll **pollset)
{
	(void)domain; (void)attr; (void)pollset;
	return -FI_ENOSYS;
}

static int enosys_stx(struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx,
		      void *context)
{
	(void)domain; (void)attr; (void)stx; (void)context;
	return -FI_ENOSYS;
}

static int enosys_srx(struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep,
		      void *context)
{
	(void)domain; (void)attr; (void)rx_ep; (void)context;
	return -FI_ENOSYS;
}

static int enosys_query_collective(struct fid_domain *domain, enum fi_collective_op coll,
				   struct fi_collective_attr *attr, uint64_t flags)
{
	(void)domain; (void)coll; (void)attr; (void)flags;
	return -FI_ENOSYS;
}

static int endpoint2(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
		     uint64_t flags, void *context)
{
	return flags ? -FI_EINVAL : pmfi_ep_open(domain, info, ep, context);
}

static struct fi_ops domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = domain_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = pmfi_av_open,
	.cq_open = pmfi_cq_open,
	.endpoint = pmfi_ep_open,
	.scalable_ep = enosys_sep,
	.cntr_open = pmfi_cntr_open,
	.poll_open = enosys_poll,
	.stx_ctx = enosys_stx,
	.srx_ctx = enosys_srx,
	.query_atomic = pmfi_query_atomic,
	.query_collective = enosys_query_collective,
	.endpoint2 = endpoint2,
};

static struct fi_ops_mr domain_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = pmfi_mr_reg,
	.regv = pmfi_mr_regv,
	.regattr = pmfi_mr_regattr,
};

int pmfi_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		     struct fid_domain **domain, void *context)
{
	if (!info || !info->domain_attr || (info->domain_attr->name &&
					    strcmp(info->domain_attr->name, PMFI_NAME) != 0))
		return -FI_EINVAL;

	struct pmfi_domain *d = calloc(1, sizeof(*d));

	if (!d)
		return -FI_ENOMEM;
	d->fabric = pmfi_container_of(fabric, struct pmfi_fabric, fid);
	d->threading = info->domain_attr->threading;
	/* FI_THREAD_DOMAIN: the caller serialises; every other level may call
	 * from several threads at once, and PM takes one thread at a time. */
	d->locking = d->threading != FI_THREAD_DOMAIN;
	d->rma = (info->caps & (FI_RMA | FI_ATOMIC)) != 0;
	d->fid.fid.fclass = FI_CLASS_DOMAIN;
	d->fid.fid.context = context;
	d->fid.fid.ops = &domain_fi_ops;
	d->fid.ops = &domain_ops;
	d->fid.mr = &domain_mr_ops;
	*domain = &d->fid;
	return 0;
}

/* ---- memory registration ---- */

struct pmfi_mr {
	struct fid_mr fid;
	struct pmfi_domain *dom;
	pm_context_t *pm;       /* remote access: a reference (pmfi_proc_get) */
	pm_mr_t *region;        /* remote access: the PM window */
};

static int mr_close(struct fid *fid)
{
	struct pmfi_mr *m = pmfi_container_of(fid, struct pmfi_mr, fid.fid);

	if (m->region) {
		pmfi_lock(m->dom);
		pm_mr_deregister(m->pm, m->region);
		pmfi_unlock(m->dom);
		pmfi_proc_put();
	}
	m->dom->refs--;
	free(m);
	return 0;
}

static struct fi_ops mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = mr_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

int pmfi_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
		uint64_t offset, uint64_t requested_key, uint64_t flags,
		struct fid_mr **mr, void *context)
{
	(void)offset; (void)flags;
	if (fid->fclass != FI_CLASS_DOMAIN)
		return -FI_EINVAL;

	struct pmfi_domain *d = pmfi_container_of(fid, struct pmfi_domain, fid.fid);
	bool remote = access & (FI_REMOTE_READ | FI_REMOTE_WRITE);

	/* Remote access: only for a domain opened with FI_RMA, whose mr_mode
	 * (VIRT_ADDR | ALLOCATED | PROV_KEY) matches PM_MR_VIRT windows. */
	if (remote && !d->rma)
		return -FI_ENOSYS;
	if (remote && (!buf || !len))
		return -FI_EINVAL;

	struct pmfi_mr *m = calloc(1, sizeof(*m));

	if (!m)
		return -FI_ENOMEM;
	if (remote) {
		/* The PM window's key is the MR's (FI_MR_PROV_KEY); peers name
		 * its bytes by virtual address (FI_MR_VIRT_ADDR). */
		int err = pmfi_proc_get(&m->pm);

		if (err) {
			free(m);
			return err;
		}
		pmfi_lock(d);
		err = pm_mr_register_flags(m->pm, (void *)buf, len, PM_MR_VIRT, &m->region);
		pmfi_unlock(d);
		if (err) {
			pmfi_proc_put();
			free(m);
			return err == -ENOSPC ? -FI_ENOSPC : pmfi_errno(err);
		}
		requested_key = pm_mr_key(m->region);
	}
	m->dom = d;
	m->fid.fid.fclass = FI_CLASS_MR;
	m->fid.fid.context = context;
	m->fid.fid.ops = &mr_fi_ops;
	m->fid.mem_desc = m;
	m->fid.key = requested_key;
	d->refs++;
	*mr = &m->fid;
	return 0;
}

int pmfi_mr_regv(struct fid *fid, const struct iovec *iov, size_t count, uint64_t access,
		 uint64_t offset, uint64_t requested_key, uint64_t flags,
		 struct fid_mr **mr, void *context)
{
	if (count > 1)
		return -FI_EINVAL;
	return pmfi_mr_reg(fid, count ? iov[0].iov_base : NULL, count ? iov[0].iov_len : 0,
			   access, offset, requested_key, flags, mr, context);
}

int pmfi_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags,
		    struct fid_mr **mr)
{
	if (!attr)
		return -FI_EINVAL;
	return pmfi_mr_regv(fid, attr->mr_iov, attr->iov_count, attr->access, attr->offset,
			    attr->requested_key, flags, mr, attr->context);
}
