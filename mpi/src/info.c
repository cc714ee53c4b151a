/* SPDX-License-Identifier: MIT */
/*
 * info.c - fi_getinfo: what the provider offers, narrowed by the hints
 * (design §10).  getinfo never touches PM: fi_info must not block on a
 * launcher's collective open.
 */
#include "pmfi.h"

#include <stdlib.h>
#include <string.h>

/* Why a hint was refused, for FI_LOG_LEVEL=info. */
static int refuse(const char *why)
{
	PMFI_INFO("getinfo: %s", why);
	return -FI_ENODATA;
}

static bool bits_within(uint64_t asked, uint64_t offered)
{
	return (asked & ~offered) == 0;
}

static int check_name(const char *name, const char *what)
{
	if (name && strcmp(name, PMFI_NAME) != 0) {
		PMFI_INFO("getinfo: %s %s is not ours", what, name);
		return -FI_ENODATA;
	}
	return 0;
}

/* FI_RMA and FI_ATOMIC are for callers whose memory registration matches
 * PM's windows:
 * keys from the provider, remote places by virtual address (PM_MR_VIRT),
 * registered memory allocated (FI_MR_BASIC says all three before 1.5's
 * bits). */
static bool rma_mr_mode_fits(const struct fi_info *h)
{
	int mode = h->domain_attr ? h->domain_attr->mr_mode : 0;

	return mode == FI_MR_BASIC ||
	       (mode & PMFI_RMA_MR_MODE) == PMFI_RMA_MR_MODE;
}

_Static_assert(offsetof(struct pmfi_domain_attr_v2, max_ep_auth_key) == 192 &&
	       offsetof(struct pmfi_domain_attr_v2, max_group_id) == 200 &&
	       offsetof(struct pmfi_domain_attr_v2, max_cntr_value) == 208 &&
	       offsetof(struct pmfi_domain_attr_v2, max_err_cntr_value) == 216,
	       "the 2.x fields of fi_domain_attr where libfabric v2.5.1 has them");

/* The capabilities a request of this version may ask (2.x names tagged-only
 * and exact directed receives, which our matching serves as it serves
 * FI_DIRECTED_RECV). */
static uint64_t caps_for(uint32_t version)
{
	return PMFI_CAPS | (version >= PMFI_V2 ?
			    PMFI_TAGGED_DIRECTED_RECV | PMFI_EXACT_DIRECTED_RECV : 0);
}

/* What 2.x added to the hints: peer groups and authorization keys we do not
 * have; counters count the full 64 bits, whatever range is asked. */
static int check_hints_v2(const struct fi_info *h)
{
	const struct fi_ep_attr *e = h->ep_attr;

	if (e && e->mem_tag_format < PMFI_TAG_MAX_FORMAT && e->mem_tag_format > PMFI_TAG_CCL)
		return refuse("a tag format this API does not define");
	if (h->domain_attr) {
		const struct pmfi_domain_attr_v2 *d = (const void *)h->domain_attr;

		if (d->max_ep_auth_key)
			return refuse("authorization keys per endpoint");
		if (d->max_group_id)
			return refuse("peer groups");
	}
	return 0;
}

/* Everything of the hints we cannot honour; 0 when they fit. */
static int check_hints(const struct fi_info *h, uint32_t version)
{
	uint64_t caps = caps_for(version);

	if (h->ep_attr && h->ep_attr->type != FI_EP_UNSPEC && h->ep_attr->type != FI_EP_RDM)
		return refuse("endpoint type is not RDM");
	if (h->caps & PMFI_RMA_CAPS) {
		if (!rma_mr_mode_fits(h))
			return refuse("FI_RMA or FI_ATOMIC without mr_mode VIRT_ADDR|ALLOCATED|PROV_KEY");
		caps |= PMFI_RMA_CAPS;
	}
	if (!bits_within(h->caps, caps))
		return refuse("capabilities beyond TAGGED|MSG|DIRECTED_RECV|SOURCE|RMA|ATOMIC"
			      " (and, from API 2.0, TAGGED_ or EXACT_DIRECTED_RECV)");
	if (h->addr_format != FI_FORMAT_UNSPEC && h->addr_format != PMFI_ADDR_FORMAT)
		return refuse("foreign address format");
	/* An address in the hints is one of our names (fi_pingpong's client
	 * passes the server's as dest_addr): anything else cannot be ours. */
	if ((h->src_addr && !pmfi_name_valid(h->src_addr, h->src_addrlen)) ||
	    (h->dest_addr && !pmfi_name_valid(h->dest_addr, h->dest_addrlen)))
		return refuse("an address in the hints that is not a name of ours");
	if (h->fabric_attr) {
		if (check_name(h->fabric_attr->name, "fabric") ||
		    check_name(h->fabric_attr->prov_name, "provider"))
			return -FI_ENODATA;
	}
	if (h->domain_attr) {
		const struct fi_domain_attr *d = h->domain_attr;

		if (check_name(d->name, "domain"))
			return -FI_ENODATA;
		if (d->data_progress == FI_PROGRESS_AUTO)
			return refuse("automatic data progress");
		if (d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_MAP &&
		    d->av_type != FI_AV_TABLE)
			return refuse("AV type");
		if (d->cq_data_size > 8)
			return refuse("CQ data above 8 bytes");
		if (d->mr_key_size > PMFI_MR_KEY_SIZE)
			return refuse("MR key above 8 bytes");
		if (!bits_within(d->caps, FI_LOCAL_COMM | FI_REMOTE_COMM))
			return refuse("domain capabilities");
		if (d->auth_key_size || d->auth_key)
			return refuse("an authorization key");
	}
	if (h->tx_attr) {
		const struct fi_tx_attr *t = h->tx_attr;

		if (!bits_within(t->caps, caps) || !bits_within(t->op_flags, PMFI_TX_OP_FLAGS))
			return refuse("transmit capabilities or flags");
		if (!bits_within(t->msg_order, FI_ORDER_SAS))
			return refuse("message order beyond SAS");
		if (t->inject_size > PMFI_INJECT_SIZE || t->size > PMFI_TX_SIZE ||
		    t->iov_limit > 1)
			return refuse("transmit sizes");
	}
	if (h->rx_attr) {
		const struct fi_rx_attr *r = h->rx_attr;

		if (!bits_within(r->caps, caps) || !bits_within(r->op_flags, PMFI_RX_OP_FLAGS))
			return refuse("receive capabilities or flags");
		if (!bits_within(r->msg_order, FI_ORDER_SAS))
			return refuse("message order beyond SAS");
		if (r->size > PMFI_RX_SIZE || r->iov_limit > 1)
			return refuse("receive sizes");
	}
	if (h->ep_attr) {
		if (h->ep_attr->max_msg_size > PMFI_MAX_MSG)
			return refuse("message size");
		if (h->ep_attr->tx_ctx_cnt > 1 || h->ep_attr->rx_ctx_cnt > 1)
			return refuse("several contexts per endpoint");
		if (h->ep_attr->auth_key_size || h->ep_attr->auth_key)
			return refuse("an authorization key");
	}
	return version >= PMFI_V2 ? check_hints_v2(h) : 0;
}

/* A copy of a name of the hints into the answer (fi_freeinfo frees it). */
static int copy_addr(void **dst, size_t *dstlen, const void *src, size_t len)
{
	if (!src)
		return 0;
	*dst = malloc(len);
	if (!*dst)
		return -FI_ENOMEM;
	memcpy(*dst, src, len);
	*dstlen = len;
	return 0;
}

static int set_name(char **dst, const char *name)
{
	free(*dst);
	*dst = strdup(name);
	return *dst ? 0 : -FI_ENOMEM;
}

/* Our answer for these hints (h may be NULL), in the terms of version. */
static int fill(struct fi_info *fi, const struct fi_info *h, uint32_t version)
{
	uint64_t caps = PMFI_CAPS;

	if (h && h->caps)
		/* What was asked, plus the secondary capabilities that cost nothing. */
		caps = h->caps | FI_LOCAL_COMM | FI_REMOTE_COMM |
		       ((h->caps & (FI_MSG | FI_TAGGED)) ? 0 : (FI_MSG | FI_TAGGED));
	if (caps & (FI_MSG | FI_TAGGED) && !(caps & (FI_SEND | FI_RECV)))
		caps |= FI_SEND | FI_RECV;
	/* FI_RMA or FI_ATOMIC alone means every direction of it. */
	if ((caps & (FI_RMA | FI_ATOMIC)) &&
	    !(caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)))
		caps |= FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
	fi->caps = caps;
	fi->mode = 0;
	fi->addr_format = PMFI_ADDR_FORMAT;
	if (h && (copy_addr(&fi->src_addr, &fi->src_addrlen, h->src_addr, h->src_addrlen) ||
		  copy_addr(&fi->dest_addr, &fi->dest_addrlen, h->dest_addr, h->dest_addrlen)))
		return -FI_ENOMEM;

	struct fi_tx_attr *t = fi->tx_attr;

	t->caps = caps;
	t->mode = 0;
	t->op_flags = h && h->tx_attr ? h->tx_attr->op_flags : 0;
	t->msg_order = FI_ORDER_SAS;
	t->comp_order = FI_ORDER_NONE;
	t->inject_size = PMFI_INJECT_SIZE;
	t->size = PMFI_TX_SIZE;
	t->iov_limit = 1;
	t->rma_iov_limit = caps & (FI_RMA | FI_ATOMIC) ? 1 : 0;

	struct fi_rx_attr *r = fi->rx_attr;

	r->caps = caps;
	r->mode = 0;
	r->op_flags = h && h->rx_attr ? h->rx_attr->op_flags : 0;
	r->msg_order = FI_ORDER_SAS;
	r->comp_order = FI_ORDER_NONE;
	r->total_buffered_recv = 0;
	r->size = PMFI_RX_SIZE;
	r->iov_limit = 1;

	struct fi_ep_attr *e = fi->ep_attr;

	e->type = FI_EP_RDM;
	e->protocol = FI_PROTO_UNSPEC;
	e->protocol_version = 1;
	e->max_msg_size = PMFI_MAX_MSG;
	e->msg_prefix_size = 0;
	e->max_order_raw_size = e->max_order_war_size = e->max_order_waw_size = 0;
	e->mem_tag_format = h && h->ep_attr && h->ep_attr->mem_tag_format ?
			    h->ep_attr->mem_tag_format : ~(uint64_t)0;
	e->tx_ctx_cnt = 1;
	e->rx_ctx_cnt = 1;

	struct fi_domain_attr *d = fi->domain_attr;
	const struct fi_domain_attr *hd = h ? h->domain_attr : NULL;

	/* MPICH compares the threading level for equality: echo what was asked. */
	d->threading = hd && hd->threading != FI_THREAD_UNSPEC ? hd->threading : FI_THREAD_SAFE;
	d->control_progress = hd && hd->control_progress != FI_PROGRESS_UNSPEC ?
			      hd->control_progress : FI_PROGRESS_MANUAL;
	d->data_progress = FI_PROGRESS_MANUAL;
	d->resource_mgmt = FI_RM_ENABLED;
	d->av_type = hd && hd->av_type != FI_AV_UNSPEC ? hd->av_type : FI_AV_TABLE;
	/* FI_RMA, FI_ATOMIC: the caller's hints had these (check_hints); else none. */
	d->mr_mode = caps & (FI_RMA | FI_ATOMIC) ? (hd && hd->mr_mode == FI_MR_BASIC ? FI_MR_BASIC :
				      PMFI_RMA_MR_MODE) : 0;
	d->mr_key_size = PMFI_MR_KEY_SIZE;
	d->cq_data_size = 8;
	d->cq_cnt = 64;
	d->ep_cnt = PMFI_MAX_EPS;
	d->tx_ctx_cnt = 1;
	d->rx_ctx_cnt = 1;
	d->max_ep_tx_ctx = 1;
	d->max_ep_rx_ctx = 1;
	d->max_ep_stx_ctx = 0;
	d->max_ep_srx_ctx = 0;
	d->cntr_cnt = 64;
	d->mr_iov_limit = 1;
	d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
	d->mode = 0;
	d->mr_cnt = 256;
	if (version >= FI_VERSION(2, 5)) {
		/* Counters are plain 64-bit sums (cntr.c). */
		struct pmfi_domain_attr_v2 *d2 = (void *)d;

		d2->max_cntr_value = UINT64_MAX;
		d2->max_err_cntr_value = UINT64_MAX;
	}
	int err = set_name(&d->name, PMFI_NAME);

	if (err)
		return err;
	fi->fabric_attr->prov_version = PMFI_PROV_VERSION;
	/* prov_name stays NULL: the core fills it (and would append to ours). */
	return set_name(&fi->fabric_attr->name, PMFI_NAME);
}

int pmfi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		 const struct fi_info *hints, struct fi_info **info)
{
	(void)flags;
	*info = NULL;
	if (version < PMFI_API_MIN)
		return refuse("API older than 1.5");
	if (node || service)
		return refuse("node or service to resolve");
	if (hints) {
		int err = check_hints(hints, version);

		if (err)
			return err;
	}

	struct fi_info *fi = fi_allocinfo();

	if (!fi)
		return -FI_ENOMEM;
	int err = fill(fi, hints, version);

	if (err) {
		fi_freeinfo(fi);
		return err;
	}
	*info = fi;
	return 0;
}
