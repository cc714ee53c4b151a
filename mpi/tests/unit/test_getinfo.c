/* SPDX-License-Identifier: MIT */
/*
 * test_getinfo.c - the provider "pm" as its consumers meet it first:
 * through the real fi_getinfo of the system's libfabric, which loads
 * libpm-fi.so from FI_PROVIDER_PATH (design §9, §10).
 *
 * Usage: test_getinfo DIR [--api2], DIR holding the freshly built
 * libpm-fi.so.  FI_PROVIDER=pm (set by meson, else here) keeps every other
 * provider out.  --api2: the requests of API 2.x, which need a libfabric
 * core of 2.5 or later in the process (LD_LIBRARY_PATH: the MPICH wheel's,
 * tests/mpi/test_mpich.py); this program is built with the system's 1.17
 * headers, so it reaches the 2.x structures through the core's newest
 * symbols (dlvsym) and the provider's own view of them (pmfi.h).
 *
 * Only objects that never open PM are opened: fabric, domain, EQ, CQs and
 * MRs.  Endpoints and AVs open the process's PM context and belong to the
 * multi-process tests.
 */
#include "check.h"
#include "pmfi.h"

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A fresh hints structure (fi_allocinfo fills every sub-attribute). */
static struct fi_info *hints_new(void)
{
	struct fi_info *h = fi_allocinfo();

	CHECK(h);
	CHECK(h->ep_attr && h->domain_attr && h->tx_attr && h->rx_attr && h->fabric_attr);
	return h;
}

/* Hints in the state a plain RDM consumer would ask with. */
static struct fi_info *hints_rdm(void)
{
	struct fi_info *h = hints_new();

	h->ep_attr->type = FI_EP_RDM;
	return h;
}

/* What Open MPI 4.1's mtl ofi asks (ompi_mtl_ofi_component_init), at 1.5. */
static struct fi_info *hints_ompi(void)
{
	struct fi_info *h = hints_new();

	h->mode = FI_CONTEXT;
	h->ep_attr->type = FI_EP_RDM;
	h->caps = FI_TAGGED;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->tx_attr->op_flags = FI_COMPLETION;
	h->rx_attr->op_flags = FI_COMPLETION;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->av_type = FI_AV_MAP;
	h->domain_attr->resource_mgmt = FI_RM_ENABLED;
	return h;
}

/* fi_getinfo(version, no node, no service, no flags, hints) must refuse. */
static void check_refused(uint32_t version, struct fi_info *h, int line)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(version, NULL, NULL, 0, h, &info);

	if (ret != -FI_ENODATA || info)
		check_fail(__FILE__, line, "fi_getinfo returned %d (%s), info %p; expected %d",
			   ret, fi_strerror(-ret), (void *)info, -FI_ENODATA);
	fi_freeinfo(h);
}

#define CHECK_REFUSED(version, hints) check_refused((version), (hints), __LINE__)

/* fi_getinfo must answer with exactly one info of ours. */
static struct fi_info *answered(uint32_t version, const struct fi_info *h, int line)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(version, NULL, NULL, 0, h, &info);

	if (ret != 0 || !info)
		check_fail(__FILE__, line, "fi_getinfo returned %d (%s), info %p", ret,
			   fi_strerror(-ret), (void *)info);
	if (info->next)
		check_fail(__FILE__, line, "more than one info (second: %s)",
			   info->next->fabric_attr ? info->next->fabric_attr->prov_name : "?");
	if (!info->fabric_attr || !info->fabric_attr->prov_name ||
	    strcmp(info->fabric_attr->prov_name, "pm") != 0)
		check_fail(__FILE__, line, "prov_name %s, expected pm",
			   info->fabric_attr ? info->fabric_attr->prov_name : "(no fabric_attr)");
	return info;
}

#define ANSWERED(version, hints) answered((version), (hints), __LINE__)

static void test_null_hints(void)
{
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), NULL);

	CHECK(info->fabric_attr->name && strcmp(info->fabric_attr->name, "pm") == 0);
	CHECK(info->domain_attr->name && strcmp(info->domain_attr->name, "pm") == 0);
	CHECK_EQ(info->ep_attr->type, FI_EP_RDM);
	uint64_t caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE;

	CHECK_MSG((info->caps & caps) == caps, "caps %#llx lack %#llx",
		  (unsigned long long)info->caps, (unsigned long long)(caps & ~info->caps));
	CHECK_EQ(info->domain_attr->data_progress, FI_PROGRESS_MANUAL);
	CHECK_EQ(info->domain_attr->mr_mode, 0);
	CHECK_U64(info->domain_attr->cq_data_size, >=, 4);
	CHECK_U64(info->ep_attr->mem_tag_format, ==, ~(uint64_t)0);
	CHECK_U64(info->tx_attr->inject_size, ==, 4096);
	CHECK_U64(info->domain_attr->max_ep_tx_ctx, ==, 1);
	fi_freeinfo(info);
}

static void test_ompi_hints(void)
{
	struct fi_info *h = hints_ompi();
	struct fi_info *info = ANSWERED(FI_VERSION(1, 5), h);

	CHECK_EQ(info->ep_attr->type, FI_EP_RDM);
	CHECK(info->caps & FI_TAGGED);
	/* The answer may drop mode bits asked for, never add any. */
	CHECK_U64(info->mode & ~h->mode, ==, 0);
	CHECK_EQ(info->domain_attr->threading, FI_THREAD_DOMAIN);
	CHECK_EQ(info->domain_attr->av_type, FI_AV_MAP);
	CHECK_U64(info->tx_attr->op_flags, ==, FI_COMPLETION);
	CHECK_U64(info->tx_attr->msg_order & FI_ORDER_SAS, ==, FI_ORDER_SAS);
	CHECK_EQ(info->domain_attr->resource_mgmt, FI_RM_ENABLED);
	fi_freeinfo(info);

	/* Open MPI's second query, once it knows the provider. */
	h->caps |= FI_DIRECTED_RECV;
	h->domain_attr->cq_data_size = 4;
	info = ANSWERED(FI_VERSION(1, 5), h);
	CHECK(info->caps & FI_DIRECTED_RECV);
	CHECK_U64(info->domain_attr->cq_data_size, >=, 4);
	CHECK_EQ(info->domain_attr->threading, FI_THREAD_DOMAIN);
	fi_freeinfo(info);

	/* MPI_THREAD_MULTIPLE. */
	h->domain_attr->threading = FI_THREAD_SAFE;
	info = ANSWERED(FI_VERSION(1, 5), h);
	CHECK_EQ(info->domain_attr->threading, FI_THREAD_SAFE);
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* ofi_rxm and ofi_rxd look for a core provider of MSG or DGRAM endpoints. */
static void test_rxm_probes(void)
{
	struct fi_info *h = hints_new();

	h->ep_attr->type = FI_EP_MSG;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
	h = hints_new();
	h->ep_attr->type = FI_EP_DGRAM;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

/* MPICH 5.0's ch4 ofi netmod (init_provider.c, init_settings.c at v5.0.1),
 * run with MPIR_CVAR_CH4_OFI_{MAJOR,MINOR}_VERSION=1,18 and RMA/atomics
 * off: NULL hints first, then its own with the caps of our first answer;
 * it takes FI_MSG|FI_MULTI_RECV for its active messages and checks that
 * the threading level is exactly FI_THREAD_DOMAIN.  (Asked at 1.17 here:
 * the system's libfabric core refuses anything newer.) */
static void test_mpich_hints(void)
{
	struct fi_info *first = ANSWERED(FI_VERSION(1, 17), NULL);
	struct fi_info *h = hints_new();

	CHECK((first->caps & (FI_MSG | FI_MULTI_RECV)) == (FI_MSG | FI_MULTI_RECV));
	h->caps = first->caps;
	h->mode = FI_CONTEXT | FI_ASYNC_IOV | FI_RX_CQ_DATA | FI_CONTEXT2;
	h->addr_format = FI_FORMAT_UNSPEC;
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	h->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	h->domain_attr->resource_mgmt = FI_RM_ENABLED;
	h->domain_attr->av_type = FI_AV_TABLE;
	h->domain_attr->cq_data_size = 4;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  FI_MR_ENDPOINT;
	h->tx_attr->op_flags = FI_COMPLETION;
	h->tx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->msg_order = FI_ORDER_SAS;
	h->rx_attr->op_flags = FI_COMPLETION;
	h->ep_attr->type = FI_EP_RDM;
	h->ep_attr->mem_tag_format = 0x7fffffffffffffffULL;
	h->fabric_attr->prov_name = strdup("pm");

	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), h);

	CHECK_EQ(info->domain_attr->threading, FI_THREAD_DOMAIN);
	CHECK_EQ(info->domain_attr->av_type, FI_AV_TABLE);
	CHECK_EQ(info->domain_attr->mr_mode, 0);
	CHECK_U64(info->mode & ~h->mode, ==, 0);
	CHECK(info->caps & FI_MULTI_RECV && info->caps & FI_SOURCE);
	CHECK_U64(info->domain_attr->cntr_cnt, >, 0);
	fi_freeinfo(info);
	fi_freeinfo(h);
	fi_freeinfo(first);
}

static void test_caps_beyond(void)
{
	struct fi_info *h = hints_rdm();

	h->caps = FI_TAGGED | FI_ATOMIC;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
	h = hints_rdm();
	h->caps = FI_TAGGED | FI_RMA_EVENT;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
	/* FI_RMA needs memory registration that matches PM's windows. */
	h = hints_rdm();
	h->caps = FI_TAGGED | FI_RMA;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
	h = hints_rdm();
	h->caps = FI_RMA;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_PROV_KEY;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

/* FI_RMA as Open MPI's btl ofi asks it: mr_mode VIRT_ADDR | ALLOCATED |
 * PROV_KEY (and FI_MR_BASIC, the same before 1.5's bits); a domain of such
 * an info registers memory for remote access, one of an info without FI_RMA
 * does not. */
static void test_rma_caps(void)
{
	struct fi_info *h = hints_rdm();

	h->caps = FI_RMA | FI_MSG;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
				  FI_MR_LOCAL | FI_MR_ENDPOINT;
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), h);

	CHECK(info->caps & FI_RMA);
	CHECK((info->caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) ==
	      (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE));
	CHECK_EQ(info->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
	CHECK_U64(info->tx_attr->rma_iov_limit, ==, 1);
	CHECK(!(info->caps & FI_ATOMIC));       /* not asked for */
	fi_freeinfo(info);
	h->domain_attr->mr_mode = FI_MR_BASIC;
	info = ANSWERED(FI_VERSION(1, 17), h);
	CHECK_EQ(info->domain_attr->mr_mode, FI_MR_BASIC);
	fi_freeinfo(info);
	fi_freeinfo(h);
	/* Without hints: no FI_RMA (MPICH takes what the first answer offers). */
	info = ANSWERED(FI_VERSION(1, 17), NULL);
	CHECK(!(info->caps & FI_RMA));
	fi_freeinfo(info);
}

/* FI_MSG (untagged messages) is offered alone and beside FI_TAGGED, with
 * FI_MULTI_RECV (MPICH's active messages); FI_MULTI_RECV as an op flag of
 * every receive is not. */
static void test_msg_caps(void)
{
	struct fi_info *h = hints_rdm();

	h->caps = FI_MSG;
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), h);

	CHECK(info->caps & FI_MSG);
	CHECK(info->caps & FI_SEND && info->caps & FI_RECV);
	CHECK(info->tx_attr->caps & FI_MSG && info->rx_attr->caps & FI_MSG);
	fi_freeinfo(info);
	h->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV;
	info = ANSWERED(FI_VERSION(1, 17), h);
	CHECK((info->caps & (FI_MSG | FI_TAGGED)) == (FI_MSG | FI_TAGGED));
	fi_freeinfo(info);
	fi_freeinfo(h);
	h = hints_rdm();
	h->caps = FI_MSG | FI_MULTI_RECV;
	info = ANSWERED(FI_VERSION(1, 17), h);
	CHECK(info->caps & FI_MULTI_RECV && info->rx_attr->caps & FI_MULTI_RECV);
	fi_freeinfo(info);
	h->rx_attr->op_flags = FI_MULTI_RECV;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

/* A name as fi_getname gives it: 64 bytes, "PMFI", version 1, endpoint 0,
 * then PM's address (here a detached context's, kind 2, made up). */
static void *pm_name(void)
{
	unsigned char *n = calloc(1, 64);

	CHECK(n);
	memcpy(n, "PMFI", 4);
	n[4] = 1;
	n[16] = 2;
	return n;
}

/* What fi_pingpong -p pm -e rdm asks (libfabric-bin 1.17, util/pingpong.c):
 * FI_MSG, modes it can serve, FI_MR_LOCAL allowed; its client passes the
 * server's name, received over its own socket, as dest_addr with the
 * server's address format. */
static void test_pingpong_hints(void)
{
	struct fi_info *h = hints_rdm();

	h->caps = FI_MSG;
	h->mode = FI_CONTEXT | FI_CONTEXT2 | FI_MSG_PREFIX;
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY;
	h->fabric_attr->prov_name = strdup("pm");

	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), h);
	uint32_t format = info->addr_format;

	CHECK_U64(info->mode & ~h->mode, ==, 0);
	CHECK_EQ(info->domain_attr->mr_mode, 0);
	CHECK(info->domain_attr->caps & FI_LOCAL_COMM);        /* it inserts its own name */
	CHECK(!info->dest_addr);
	fi_freeinfo(info);

	h->addr_format = format;
	h->dest_addr = pm_name();
	h->dest_addrlen = 64;
	info = ANSWERED(FI_VERSION(1, 17), h);
	CHECK_EQ(info->dest_addrlen, 64);
	CHECK(info->dest_addr && memcmp(info->dest_addr, h->dest_addr, 64) == 0);
	CHECK_EQ(info->addr_format, format);
	fi_freeinfo(info);

	/* Not a name of ours: a sockaddr, a short one, a wrong magic. */
	struct fi_info *bad = fi_dupinfo(h);

	CHECK(bad);
	bad->dest_addrlen = 16;
	CHECK_REFUSED(FI_VERSION(1, 17), bad);
	bad = fi_dupinfo(h);
	CHECK(bad);
	((unsigned char *)bad->dest_addr)[0] = 'X';
	CHECK_REFUSED(FI_VERSION(1, 17), bad);
	bad = fi_dupinfo(h);
	CHECK(bad);
	bad->addr_format = FI_SOCKADDR_IN;
	CHECK_REFUSED(FI_VERSION(1, 17), bad);
	fi_freeinfo(h);
}

static void test_old_api(void)
{
	CHECK_REFUSED(FI_VERSION(1, 4), NULL);
}

/* No authorization keys: a request for one is refused, at any API. */
static void test_auth_key(void)
{
	/* fi_freeinfo frees the key with the hints. */
	struct fi_info *h = hints_rdm();

	h->domain_attr->auth_key = calloc(1, 8);
	h->domain_attr->auth_key_size = 8;
	CHECK(h->domain_attr->auth_key);
	CHECK_REFUSED(FI_VERSION(1, 17), h);
	h = hints_rdm();
	h->ep_attr->auth_key = calloc(1, 8);
	h->ep_attr->auth_key_size = 8;
	CHECK(h->ep_attr->auth_key);
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

static void test_auto_progress(void)
{
	struct fi_info *h = hints_rdm();

	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

static void test_msg_order(void)
{
	struct fi_info *h = hints_rdm();

	h->tx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RAW;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
	h = hints_rdm();
	h->rx_attr->msg_order = FI_ORDER_SAS | FI_ORDER_RAW;
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

static void test_foreign_fabric(void)
{
	struct fi_info *h = hints_rdm();

	h->fabric_attr->name = strdup("tcp");
	CHECK(h->fabric_attr->name);
	CHECK_REFUSED(FI_VERSION(1, 17), h);
}

static void test_node_service(void)
{
	struct fi_info *info = NULL;
	int ret = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "9228", 0, NULL, &info);

	CHECK_MSG(ret == -FI_ENODATA && !info, "fi_getinfo returned %d (%s), info %p", ret,
		  fi_strerror(-ret), (void *)info);
}

/* Fabric, domain, EQ, a CQ of each format and an MR: none opens PM. */
static void test_objects(void)
{
	static const enum fi_cq_format formats[] = {
		FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED,
	};
	enum { NCQ = sizeof(formats) / sizeof(formats[0]) };
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), NULL);
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_eq *eq = NULL;
	struct fid_cq *cq[NCQ] = { NULL };
	struct fid_mr *mr = NULL, *rmr = NULL;
	static char buf[4096];

	CHECK_OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK_OK(fi_domain(fabric, info, &domain, NULL));

	struct fi_eq_attr eq_attr = { .size = 16, .wait_obj = FI_WAIT_NONE };

	CHECK_OK(fi_eq_open(fabric, &eq_attr, &eq, NULL));
	for (int i = 0; i < NCQ; i++) {
		struct fi_cq_attr cq_attr = { .format = formats[i], .wait_obj = FI_WAIT_NONE };

		CHECK_OK(fi_cq_open(domain, &cq_attr, &cq[i], NULL));
	}
	CHECK_OK(fi_mr_reg(domain, buf, sizeof(buf), FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
	CHECK_ERR(fi_mr_reg(domain, buf, sizeof(buf), FI_REMOTE_READ, 0, 0, 0, &rmr, NULL),
		  -FI_ENOSYS);

	/* Nothing bound, nothing to progress: empty, not blocked, not failed. */
	for (int i = 0; i < NCQ; i++) {
		struct fi_cq_tagged_entry e[4];

		CHECK_ERR(fi_cq_read(cq[i], e, 4), -FI_EAGAIN);
	}

	uint32_t event = 0;
	char ebuf[64];

	CHECK_ERR(fi_eq_read(eq, &event, ebuf, sizeof(ebuf), 0), -FI_EAGAIN);

	CHECK_OK(fi_close(&mr->fid));
	for (int i = NCQ - 1; i >= 0; i--)
		CHECK_OK(fi_close(&cq[i]->fid));
	CHECK_OK(fi_close(&eq->fid));
	CHECK_OK(fi_close(&domain->fid));
	CHECK_OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
}

/* A counter, as MPICH opens one for its RMA completions (nothing moves it
 * but add/set until FI_RMA comes); a domain outlives it. */
static void test_counter(void)
{
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), NULL);
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_cntr *cntr = NULL, *bad = NULL;
	struct fi_cntr_attr attr = { .events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_NONE };

	CHECK_OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK_OK(fi_domain(fabric, info, &domain, NULL));
	CHECK_OK(fi_cntr_open(domain, &attr, &cntr, NULL));
	CHECK_U64(fi_cntr_read(cntr), ==, 0);
	CHECK_OK(fi_cntr_add(cntr, 5));
	CHECK_OK(fi_cntr_set(cntr, 7));
	CHECK_U64(fi_cntr_read(cntr), ==, 7);
	CHECK_OK(fi_cntr_wait(cntr, 7, 0));
	CHECK_ERR(fi_cntr_wait(cntr, 8, 0), -FI_ETIMEDOUT);
	CHECK_OK(fi_cntr_adderr(cntr, 2));
	CHECK_U64(fi_cntr_readerr(cntr), ==, 2);
	attr.wait_obj = FI_WAIT_FD;
	CHECK_ERR(fi_cntr_open(domain, &attr, &bad, NULL), -FI_ENOSYS);
	CHECK_ERR(fi_close(&domain->fid), -FI_EBUSY);
	CHECK_OK(fi_close(&cntr->fid));
	CHECK_OK(fi_close(&domain->fid));
	CHECK_OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
}

/* FI_ATOMIC as Open MPI's btl ofi asks it (with FI_RMA, its mr_mode);
 * fi_query_atomic answers one element for the operations PM does on 64-
 * and 32-bit integers, and nothing else. */
static void test_atomic_caps(void)
{
	struct fi_info *h = hints_rdm();

	h->caps = FI_RMA | FI_ATOMIC;
	h->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), h);
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fi_atomic_attr attr;

	CHECK(info->caps & FI_ATOMIC && info->caps & FI_RMA);
	CHECK_EQ(info->domain_attr->mr_mode, FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY);
	CHECK_OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK_OK(fi_domain(fabric, info, &domain, NULL));
	static const struct { enum fi_op op; uint64_t flags; } ok[] = {
		{ FI_SUM, 0 }, { FI_SUM, FI_FETCH_ATOMIC }, { FI_ATOMIC_WRITE, 0 },
		{ FI_ATOMIC_WRITE, FI_FETCH_ATOMIC }, { FI_ATOMIC_READ, FI_FETCH_ATOMIC },
		{ FI_BOR, 0 }, { FI_BAND, FI_FETCH_ATOMIC }, { FI_BXOR, 0 },
		{ FI_CSWAP, FI_COMPARE_ATOMIC },
	};
	static const struct { enum fi_datatype type; size_t size; } types[] = {
		{ FI_UINT64, 8 }, { FI_INT64, 8 }, { FI_UINT32, 4 }, { FI_INT32, 4 },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
			memset(&attr, 0, sizeof(attr));
			CHECK_OK(fi_query_atomic(domain, types[t].type, ok[i].op, &attr,
						 ok[i].flags));
			CHECK_U64(attr.count, ==, 1);
			CHECK_U64(attr.size, ==, types[t].size);
		}
	}
	static const struct { enum fi_datatype type; enum fi_op op; uint64_t flags; } no[] = {
		{ FI_UINT16, FI_SUM, 0 }, { FI_DOUBLE, FI_SUM, 0 }, { FI_UINT64, FI_MIN, 0 },
		{ FI_UINT64, FI_PROD, 0 }, { FI_UINT64, FI_LOR, 0 },
		{ FI_UINT64, FI_ATOMIC_READ, 0 }, { FI_UINT64, FI_CSWAP, 0 },
		{ FI_UINT64, FI_SUM, FI_COMPARE_ATOMIC }, { FI_UINT64, FI_MSWAP, FI_COMPARE_ATOMIC },
	};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		CHECK_ERR(fi_query_atomic(domain, no[i].type, no[i].op, &attr, no[i].flags),
			  -FI_EOPNOTSUPP);
	CHECK_ERR(fi_query_atomic(domain, FI_UINT64, FI_SUM, &attr,
				  FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC), -FI_EINVAL);
	CHECK_OK(fi_close(&domain->fid));
	CHECK_OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(h);
}

/* A domain outlives what was opened from it. */
static void test_domain_busy(void)
{
	struct fi_info *info = ANSWERED(FI_VERSION(1, 17), NULL);
	struct fid_fabric *fabric = NULL;
	struct fid_domain *domain = NULL;
	struct fid_cq *cq = NULL;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };

	CHECK_OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK_OK(fi_domain(fabric, info, &domain, NULL));
	CHECK_OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK_ERR(fi_close(&domain->fid), -FI_EBUSY);
	CHECK_OK(fi_close(&cq->fid));
	CHECK_OK(fi_close(&domain->fid));
	CHECK_OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
}

/* ---- API 2.x (--api2) ---- */

/* The core's newest getinfo, dupinfo and freeinfo (ABI FABRIC_1.9, libfabric
 * 2.5): they take and give the whole 2.x structures, where the symbols this
 * program was linked with (FABRIC_1.3) copy the 1.3 layout and drop what
 * came after it. */
static int (*getinfo2)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
		       struct fi_info **);
static struct fi_info *(*dupinfo2)(const struct fi_info *);
static void (*freeinfo2)(struct fi_info *);

static void *newest(const char *name)
{
	void *f = dlvsym(RTLD_DEFAULT, name, "FABRIC_1.9");

	CHECK_MSG(f, "%s@FABRIC_1.9 not in the libfabric loaded (libfabric %u.%u): --api2 "
		  "needs 2.5 or later", name, FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
	return f;
}

static struct fi_info *hints2(uint64_t caps)
{
	struct fi_info *h = dupinfo2(NULL);

	CHECK(h && h->ep_attr && h->domain_attr);
	h->ep_attr->type = FI_EP_RDM;
	h->caps = caps;
	return h;
}

static struct pmfi_domain_attr_v2 *dom2(struct fi_info *fi)
{
	return (struct pmfi_domain_attr_v2 *)(void *)fi->domain_attr;
}

/* getinfo2(version, hints): the answer (NULL when refused, which must be
 * -FI_ENODATA); hints freed. */
static struct fi_info *ask2(uint32_t version, struct fi_info *h, int line)
{
	struct fi_info *info = NULL;
	int ret = getinfo2(version, NULL, NULL, 0, h, &info);

	freeinfo2(h);
	if (ret == -FI_ENODATA && !info)
		return NULL;
	if (ret != 0 || !info || info->next)
		check_fail(__FILE__, line, "fi_getinfo returned %d (%s), info %p", ret,
			   fi_strerror(-ret), (void *)info);
	return info;
}

#define ASK2(version, hints) ask2((version), (hints), __LINE__)

static void test_api2(void)
{
	getinfo2 = newest("fi_getinfo");
	dupinfo2 = newest("fi_dupinfo");
	freeinfo2 = newest("fi_freeinfo");

	/* MPICH's first request: NULL hints at its library's API. */
	struct fi_info *info = ASK2(FI_VERSION(2, 5), NULL);

	CHECK(info && (info->caps & (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV)) ==
		      (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV));
	CHECK(dom2(info)->max_cntr_value == UINT64_MAX &&
	      dom2(info)->max_err_cntr_value == UINT64_MAX);
	CHECK(dom2(info)->max_group_id == 0 && dom2(info)->max_ep_auth_key == 0);
	freeinfo2(info);

	/* 2.0's tagged-only and exact directed receives: served as directed
	 * receives are; at 1.x the same bits meant other things. */
	info = ASK2(FI_VERSION(2, 5), hints2(FI_TAGGED | PMFI_TAGGED_DIRECTED_RECV |
					      PMFI_EXACT_DIRECTED_RECV));
	CHECK(info && (info->caps & (PMFI_TAGGED_DIRECTED_RECV | PMFI_EXACT_DIRECTED_RECV)) ==
		      (PMFI_TAGGED_DIRECTED_RECV | PMFI_EXACT_DIRECTED_RECV));
	freeinfo2(info);
	CHECK(!ASK2(FI_VERSION(1, 18), hints2(FI_TAGGED | PMFI_TAGGED_DIRECTED_RECV)));
	/* Tagged multi-receive buffers (2.0, bit 46): not ours. */
	CHECK(!ASK2(FI_VERSION(2, 5), hints2(FI_TAGGED | (1ULL << 46))));

	/* Tag formats: FI_TAG_MPI is bits with fields, which matching on bits
	 * serves; an undefined format is refused; at 1.x a small value is a
	 * plain bit layout. */
	struct fi_info *h = hints2(FI_TAGGED);

	h->ep_attr->mem_tag_format = PMFI_TAG_MPI;
	info = ASK2(FI_VERSION(2, 5), h);
	CHECK(info && info->ep_attr->mem_tag_format == PMFI_TAG_MPI);
	freeinfo2(info);
	h = hints2(FI_TAGGED);
	h->ep_attr->mem_tag_format = PMFI_TAG_CCL + 1;
	CHECK(!ASK2(FI_VERSION(2, 5), h));
	h = hints2(FI_TAGGED);
	h->ep_attr->mem_tag_format = PMFI_TAG_CCL + 1;
	info = ASK2(FI_VERSION(1, 18), h);
	CHECK(info);
	freeinfo2(info);

	/* Peer groups and authorization keys per endpoint: none. */
	h = hints2(FI_TAGGED);
	dom2(h)->max_group_id = 1;
	CHECK(!ASK2(FI_VERSION(2, 5), h));
	h = hints2(FI_TAGGED);
	dom2(h)->max_ep_auth_key = 1;
	CHECK(!ASK2(FI_VERSION(2, 5), h));
	/* Any counter range: they are 64-bit sums. */
	h = hints2(FI_TAGGED);
	dom2(h)->max_cntr_value = UINT64_MAX;
	info = ASK2(FI_VERSION(2, 5), h);
	CHECK(info);
	freeinfo2(info);
}

int main(int argc, char **argv)
{
	bool api2 = argc == 3 && strcmp(argv[2], "--api2") == 0;

	if (argc != 2 && !api2) {
		fprintf(stderr, "usage: %s DIR [--api2] (DIR: the directory of libpm-fi.so)\n",
			argv[0]);
		return 2;
	}
	/* Read by libfabric at its first call, so set before any. */
	CHECK_OK(setenv("FI_PROVIDER_PATH", argv[1], 1));
	CHECK_OK(setenv("FI_PROVIDER", "pm", 0));
	if (api2) {
		test_api2();
		printf("getinfo API 2.x tests passed (libfabric %u.%u)\n", FI_MAJOR(fi_version()),
		       FI_MINOR(fi_version()));
		return 0;
	}

	test_null_hints();
	test_ompi_hints();
	test_rxm_probes();
	test_caps_beyond();
	test_rma_caps();
	test_atomic_caps();
	test_mpich_hints();
	test_msg_caps();
	test_pingpong_hints();
	test_old_api();
	test_auto_progress();
	test_auth_key();
	test_msg_order();
	test_foreign_fabric();
	test_node_service();
	test_objects();
	test_domain_busy();
	test_counter();
	printf("getinfo tests passed\n");
	return 0;
}
