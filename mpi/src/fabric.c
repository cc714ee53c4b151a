/* SPDX-License-Identifier: MIT */
/*
 * fabric.c - fid_fabric and the event queue.  The provider has no
 * connections and its control operations are synchronous, so an EQ never
 * holds an event; consumers (fi_pingpong) still open one.
 */
#include "pmfi.h"

#include <stdlib.h>
#include <string.h>

/* ---- event queue ---- */

struct pmfi_eq {
	struct fid_eq fid;
};

static int eq_close(struct fid *fid)
{
	free(pmfi_container_of(fid, struct pmfi_eq, fid.fid));
	return 0;
}

static ssize_t eq_read(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
		       uint64_t flags)
{
	(void)eq; (void)event; (void)buf; (void)len; (void)flags;
	return -FI_EAGAIN;
}

static ssize_t eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)
{
	(void)eq; (void)buf; (void)flags;
	return -FI_EAGAIN;
}

static ssize_t eq_write(struct fid_eq *eq, uint32_t event, const void *buf, size_t len,
			uint64_t flags)
{
	(void)eq; (void)event; (void)buf; (void)len; (void)flags;
	return -FI_ENOSYS;
}

static ssize_t eq_sread(struct fid_eq *eq, uint32_t *event, void *buf, size_t len,
			int timeout, uint64_t flags)
{
	(void)eq; (void)event; (void)buf; (void)len; (void)timeout; (void)flags;
	return -FI_EAGAIN;
}

static const char *eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data,
			       char *buf, size_t len)
{
	(void)eq; (void)err_data;
	return pmfi_strerror(prov_errno, buf, len);
}

static struct fi_ops eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = eq_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_eq eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

int pmfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr, struct fid_eq **eq,
		 void *context)
{
	(void)fabric;
	if (attr && attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
		return -FI_ENOSYS;

	struct pmfi_eq *q = calloc(1, sizeof(*q));

	if (!q)
		return -FI_ENOMEM;
	q->fid.fid.fclass = FI_CLASS_EQ;
	q->fid.fid.context = context;
	q->fid.fid.ops = &eq_fi_ops;
	q->fid.ops = &eq_ops;
	*eq = &q->fid;
	return 0;
}

/* ---- fabric ---- */

static int fabric_close(struct fid *fid)
{
	free(pmfi_container_of(fid, struct pmfi_fabric, fid.fid));
	return 0;
}

static int enosys_pep(struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep,
		      void *context)
{
	(void)fabric; (void)info; (void)pep; (void)context;
	return -FI_ENOSYS;
}

static int enosys_wait(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		       struct fid_wait **waitset)
{
	(void)fabric; (void)attr; (void)waitset;
	return -FI_ENOSYS;
}

static int trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	(void)fabric; (void)fids; (void)count;
	return -FI_ENOSYS;
}

static int domain2(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **dom,
		   uint64_t flags, void *context)
{
	return flags ? -FI_EINVAL : pmfi_domain_open(fabric, info, dom, context);
}

static struct fi_ops fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = fabric_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_fabric fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = pmfi_domain_open,
	.passive_ep = enosys_pep,
	.eq_open = pmfi_eq_open,
	.wait_open = enosys_wait,
	.trywait = trywait,
	.domain2 = domain2,
};

int pmfi_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	if (!attr || !attr->name || strcmp(attr->name, PMFI_NAME) != 0)
		return -FI_EINVAL;

	struct pmfi_fabric *f = calloc(1, sizeof(*f));

	if (!f)
		return -FI_ENOMEM;
	f->fid.fid.fclass = FI_CLASS_FABRIC;
	f->fid.fid.context = context;
	f->fid.fid.ops = &fabric_fi_ops;
	f->fid.ops = &fabric_ops;
	*fabric = &f->fid;
	/* Which API's meaning the application asked for (getinfo answered in
	 * its terms): tests and users read it with FI_LOG_LEVEL=info. */
	PMFI_INFO("fabric opened for API %u.%u", FI_MAJOR(attr->api_version),
		  FI_MINOR(attr->api_version));
	return 0;
}
