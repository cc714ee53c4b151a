/* SPDX-License-Identifier: MIT */
/*
 * pmfi.h - the libfabric provider "pm": its objects, the name and message
 * header layouts, and what the files of mpi/src share.  Nothing here is
 * exported; libpm-fi.so exports fi_prov_ini only (libpm-fi.map).
 *
 * Design: docs/mpi/design.md.  Layers: match.c and cq.c know nothing of PM;
 * proc.c, progress.c and tagged.c are the only callers of pm.h.
 */
#ifndef PMFI_H
#define PMFI_H

#include "pm.h"

#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PMFI_NAME        "pm"
/* The newest API whose semantics the provider implements (design §1): a
 * request of any version from PMFI_API_MIN to this one gets the meaning of
 * its own version (info.c). */
#define PMFI_API_VERSION FI_VERSION(2, 5)
#define PMFI_PROV_VERSION FI_VERSION(0, 1)
/* Oldest API whose memory-registration semantics we implement. */
#define PMFI_API_MIN     FI_VERSION(1, 5)

/*
 * What API 2.x added that Debian's 1.17 headers, which we build against,
 * lack (values of libfabric v2.5.1's fabric.h).  From 2.0 on, bits 45 and
 * 48 of caps mean FI_TAGGED_DIRECTED_RECV and FI_EXACT_DIRECTED_RECV (in
 * 1.x they were other flags), and a mem_tag_format below 1 << 16 names a
 * format instead of describing bits.
 */
#define PMFI_V2                     FI_VERSION(2, 0)
#define PMFI_TAGGED_DIRECTED_RECV   (1ULL << 45)
#define PMFI_EXACT_DIRECTED_RECV    (1ULL << 48)
#define PMFI_TAG_MPI                1u
#define PMFI_TAG_CCL                2u
#define PMFI_TAG_MAX_FORMAT         (1ull << 16)

/* fi_domain_attr as a 2.x core allocates it: the 1.17 structure and the
 * fields appended since (only read or written for requests of a version
 * that has them: the core that takes such a request has them too). */
struct pmfi_domain_attr_v2 {
	struct fi_domain_attr v1;
	size_t max_ep_auth_key;         /* 1.20 */
	uint32_t max_group_id;          /* 2.0  */
	uint64_t max_cntr_value;        /* 2.5  */
	uint64_t max_err_cntr_value;    /* 2.5  */
};

/* A provider-specific address format ("PM" in the low bits). */
#define PMFI_ADDR_FORMAT ((uint32_t)(1u << 31) | 0x504du)

#define PMFI_NAME_LEN    64
#define PMFI_NAME_MAGIC  0x49464d50u  /* "PMFI" little-endian */
#define PMFI_NAME_VERSION 1

#define PMFI_INJECT_SIZE 4096
#define PMFI_TX_SIZE     1024
#define PMFI_RX_SIZE     1024
#define PMFI_CQ_SIZE     4096
#define PMFI_CQ_SIZE_MAX (1u << 24)     /* entries of one CQ: 1 GiB of ring */
#define PMFI_MAX_MSG     ((size_t)UINT32_MAX)
#define PMFI_MR_KEY_SIZE 8
/* Endpoints that may be live at once in a process, sharing its PM context
 * (Open MPI's mtl ofi and btl ofi each open one): the index in names and
 * headers says which one a message is for. */
#define PMFI_MAX_EPS     16

/* FI_RMA and FI_ATOMIC: offered only to hints that ask for them with
 * mr_mode VIRT_ADDR | ALLOCATED | PROV_KEY (design §8). */
#define PMFI_RMA_CAPS (FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | \
		       FI_REMOTE_WRITE)
#define PMFI_RMA_MR_MODE (FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
#define PMFI_CAPS (FI_TAGGED | FI_MSG | FI_SEND | FI_RECV | FI_DIRECTED_RECV | \
		   FI_SOURCE | FI_MULTI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM)
/* FI_OPT_MIN_MULTI_RECV until the application sets it. */
#define PMFI_MIN_MULTI_RECV 64
#define PMFI_TX_OP_FLAGS (FI_COMPLETION | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | \
			  FI_DELIVERY_COMPLETE | FI_INJECT)
#define PMFI_RX_OP_FLAGS (FI_COMPLETION)

extern struct fi_provider pmfi_prov;

/* Tunables (FI_PM_<NAME> in the environment), read once at load. */
struct pmfi_params {
	size_t eager_max;       /* largest message sent eagerly; 0: by device */
	/* FI_PM_ADDRESSING: how the process's PM context is opened. */
	enum { PMFI_ADDR_AUTO, PMFI_ADDR_JOB, PMFI_ADDR_DETACHED } addressing;
};
extern struct pmfi_params pmfi_params;
/* The eager threshold for peers that a PM device (pm_peer_device()) serves. */
size_t pmfi_eager_default(const char *device);

#define PMFI_WARN(fmt, ...) FI_WARN(&pmfi_prov, FI_LOG_CORE, fmt "\n", ##__VA_ARGS__)
#define PMFI_INFO(fmt, ...) FI_INFO(&pmfi_prov, FI_LOG_CORE, fmt "\n", ##__VA_ARGS__)

/* ---- the name of an endpoint (fi_getname), 64 bytes, little-endian ---- */

struct pmfi_name {
	uint32_t magic;         /* PMFI_NAME_MAGIC */
	uint8_t version;        /* PMFI_NAME_VERSION */
	uint8_t pad;
	uint16_t ep;            /* endpoint index in its process (< PMFI_MAX_EPS) */
	uint64_t reserved;
	uint8_t pm[PM_ADDRESS_MAX]; /* pm_address(), zero-padded */
};
_Static_assert(sizeof(struct pmfi_name) == PMFI_NAME_LEN, "name layout");

/* ---- the header of every PM message the provider sends, 32 bytes ---- */

enum pmfi_op {
	PMFI_OP_EAGER = 1,      /* payload follows */
	PMFI_OP_RTS = 2,        /* body: struct pmfi_rts; the receiver reads */
	PMFI_OP_FIN = 3,        /* the receiver is done reading: arg = cookie */
};

#define PMFI_HDR_CQ_DATA  0x01u
#define PMFI_HDR_UNTAGGED 0x02u

struct pmfi_hdr {
	uint8_t op;
	uint8_t flags;
	uint16_t dst_ep, src_ep;
	uint16_t zero;
	uint64_t tag;
	uint64_t data;          /* CQ data; FIN: status (0 or negative errno) */
	uint64_t arg;           /* RTS: message length; FIN: the sender's cookie */
};
_Static_assert(sizeof(struct pmfi_hdr) == 32, "header layout");

struct pmfi_rts {
	uint64_t rkey;
	uint64_t cookie;
};

/* ---- intrusive lists ---- */

struct pmfi_list {
	struct pmfi_list *next, *prev;
};

static inline void pmfi_list_init(struct pmfi_list *l)
{
	l->next = l->prev = l;
}

static inline bool pmfi_list_empty(const struct pmfi_list *l)
{
	return l->next == l;
}

static inline void pmfi_list_add_tail(struct pmfi_list *l, struct pmfi_list *e)
{
	e->prev = l->prev;
	e->next = l;
	l->prev->next = e;
	l->prev = e;
}

static inline void pmfi_list_del(struct pmfi_list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = e->prev = e;
}

#define pmfi_container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ---- fabric, domain ---- */

struct pmfi_fabric {
	struct fid_fabric fid;
};

struct pmfi_domain {
	struct fid_domain fid;
	struct pmfi_fabric *fabric;
	enum fi_threading threading;
	bool locking;           /* anything but FI_THREAD_DOMAIN: pmfi_pm_lock */
	bool rma;               /* opened with FI_RMA: MRs with remote access */
	int refs;               /* objects opened from it */
};

void pmfi_lock(struct pmfi_domain *d);
void pmfi_unlock(struct pmfi_domain *d);

int pmfi_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		     struct fid_domain **domain, void *context);
int pmfi_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
		     void *context);
int pmfi_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		 struct fid_eq **eq, void *context);
int pmfi_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
		uint64_t offset, uint64_t requested_key, uint64_t flags,
		struct fid_mr **mr, void *context);
int pmfi_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		 uint64_t access, uint64_t offset, uint64_t requested_key,
		 uint64_t flags, struct fid_mr **mr, void *context);
int pmfi_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags,
		    struct fid_mr **mr);

/* ---- completion counters (cntr.c) ---- */

struct pmfi_cntr {
	struct fid_cntr fid;
	struct pmfi_domain *dom;
	uint64_t value, err;
	int refs;               /* endpoints bound */
	struct pmfi_ep *ep;     /* the last endpoint bound: reads progress it */
};

/* The events an endpoint may count: RMA ones, which it has none of yet. */
#define PMFI_CNTR_EVENTS (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)

int pmfi_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		   struct fid_cntr **cntr, void *context);

/* A 64-byte name as fi_getname gives it (magic, version, endpoint index). */
bool pmfi_name_valid(const void *name, size_t len);

/* getinfo (info.c) */
int pmfi_getinfo(uint32_t version, const char *node, const char *service,
		 uint64_t flags, const struct fi_info *hints, struct fi_info **info);

struct pmfi_ep;

/* ---- the process's PM context (proc.c) ----
 *
 * One PM context per process, shared by every endpoint and AV of every
 * domain: under a launcher pm_open() is collective, so it is opened once, by
 * the first object that needs it, and closed with the last.
 */
int pmfi_proc_get(pm_context_t **pm);
void pmfi_proc_put(void);
/* Peer numbers the context may ever give (its size, or PM_DETACHED_MAX for
 * a detached context, whose size grows with fi_av_insert). */
int pmfi_proc_max_peers(pm_context_t *pm);
bool pmfi_proc_detached(void);
/* Endpoints share the context: each live one holds an index (the lowest
 * free one; -FI_EBUSY when PMFI_MAX_EPS are live), by which a message that
 * another endpoint's progress takes from PM finds it. */
int pmfi_proc_ep_claim(struct pmfi_ep *ep);
void pmfi_proc_ep_release(int index);
struct pmfi_ep *pmfi_proc_ep(int index);
/* The lock of the domains that lock (threading other than FI_THREAD_DOMAIN):
 * one for the process, as they all drive its one PM context. */
extern pthread_mutex_t pmfi_pm_lock;

/* ---- address vector (av.c) ---- */

struct pmfi_av_entry {
	int peer;               /* PM peer number */
	uint16_t ep;
};

struct pmfi_av {
	struct fid_av fid;
	struct pmfi_domain *dom;
	pm_context_t *pm;       /* a reference held (pmfi_proc_get) */
	struct pmfi_av_entry *tab;
	unsigned char (*names)[PMFI_NAME_LEN]; /* as inserted (fi_av_lookup) */
	size_t count, cap;
	fi_addr_t *by_peer;     /* PM peer -> first fi_addr (FI_SOURCE) */
	int npeers;
	int refs;               /* endpoints bound */
};

int pmfi_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		 struct fid_av **av, void *context);

static inline const struct pmfi_av_entry *pmfi_av_lookup(const struct pmfi_av *av,
							  fi_addr_t a)
{
	return a < av->count && av->tab[a].peer >= 0 ? &av->tab[a] : NULL;
}

/* The fi_addr of endpoint ep of PM peer peer (FI_SOURCE). */
fi_addr_t pmfi_av_source(const struct pmfi_av *av, int peer, uint16_t ep);

/* ---- completion queue (cq.c) ---- */

struct pmfi_cq_err {
	struct pmfi_list link;
	struct fi_cq_err_entry e;
};

struct pmfi_ep;

struct pmfi_cq {
	struct fid_cq fid;
	struct pmfi_domain *dom;
	enum fi_cq_format format;
	struct fi_cq_tagged_entry *ring;
	fi_addr_t *src;         /* source of each entry (fi_cq_readfrom) */
	size_t size, head, count;       /* size: completions it holds at most */
	size_t mask;            /* the ring's slots - 1 (a power of two >= size:
	                           no division on the data path) */
	struct pmfi_list errs;  /* struct pmfi_cq_err, in order */
	struct pmfi_cq_err *last_err; /* handed out by readerr, freed at next */
	bool just_emptied;      /* the last read took the last completion: the
	                           next read may skip its pass (cq.c, read_cq) */
	struct pmfi_ep *eps[4]; /* bound endpoints, progressed by reads */
	int neps;
};

int pmfi_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		 struct fid_cq **cq, void *context);
/* Room for n more completions. */
static inline bool pmfi_cq_room(const struct pmfi_cq *cq, size_t n)
{
	return cq->size - cq->count >= n;
}
/* Append a completion; the caller checked pmfi_cq_room(). */
void pmfi_cq_write(struct pmfi_cq *cq, const struct fi_cq_tagged_entry *e, fi_addr_t src);
/* Append an error completion; -FI_ENOMEM when memory is short. */
int pmfi_cq_write_err(struct pmfi_cq *cq, const struct fi_cq_tagged_entry *e,
		      int err, int prov_errno, size_t olen);
int pmfi_cq_bind_ep(struct pmfi_cq *cq, struct pmfi_ep *ep);
void pmfi_cq_unbind_ep(struct pmfi_cq *cq, struct pmfi_ep *ep);

/* ---- matching (match.c): posted receives and unexpected messages ---- */

/* One posted receive, or one operation of any kind (a pool entry). */
struct pmfi_req {
	struct pmfi_list link;
	enum { REQ_FREE, REQ_RECV, REQ_SEND, REQ_CTRL, REQ_RMA } kind;
	bool tagged;
	bool busy_read;         /* a pm_read is outstanding into buf */
	void *context;
	uint64_t flags;         /* op flags (FI_COMPLETION, FI_CLAIM, ...) */
	void *buf;
	size_t len;             /* buffer length */
	uint64_t tag, ignore;
	uint64_t data;
	int peer;               /* PM peer; -1 for any (receives) */
	uint16_t peer_ep;       /* its endpoint index: the one a directed receive
				 * names, then a matched receive's sender */
	/* FI_MULTI_RECV: a buffer (flags has FI_MULTI_RECV) stays posted while
	 * messages fill it from off on; the receive of a message that uses it
	 * up carries multi_last (FI_MULTI_RECV in its completion). */
	size_t off;
	bool multi_last;
	/* sends */
	size_t msg_len;
	struct pmfi_hdr hdr;    /* ctrl messages and queued sends */
	pm_mr_t *mr;            /* rendezvous: the exposed buffer */
	/* receives matched with an RTS */
	size_t rts_len;         /* the sender's length */
	uint64_t rkey;          /* the sender's exposed buffer */
	uint64_t cookie;
	struct pm_op op;
};

/* An unexpected message: kept until a receive takes it. */
struct pmfi_unexp {
	struct pmfi_list link;
	int peer;
	uint16_t peer_ep;       /* the sending endpoint's index */
	uint8_t op;             /* EAGER or RTS */
	bool tagged;
	uint64_t tag, data;
	bool has_data;
	size_t len;             /* the message's length */
	struct pmfi_rts rts;
	unsigned char payload[]; /* EAGER: len bytes */
};

struct pmfi_match {
	struct pmfi_list posted[2];     /* [tagged] struct pmfi_req */
	struct pmfi_list unexp[2];      /* [tagged] struct pmfi_unexp */
	uint64_t unexp_count, unexp_bytes; /* totals, logged at close */
};

void pmfi_match_init(struct pmfi_match *m);
static inline bool pmfi_tag_matches(uint64_t want, uint64_t ignore, uint64_t tag)
{
	return ((want ^ tag) & ~ignore) == 0;
}
/* The first posted receive that takes a message from peer with tag,
 * unlinked, unless it is a multi-receive buffer: that one stays posted
 * until it is used up (progress.c unlinks it). */
struct pmfi_req *pmfi_match_posted(struct pmfi_match *m, bool tagged, int peer,
				   uint16_t peer_ep, uint64_t tag);
/* The first unexpected message r takes; unlinked unless peek. */
struct pmfi_unexp *pmfi_match_unexp(struct pmfi_match *m, const struct pmfi_req *r, bool peek);
/* The posted receive with this context, unlinked; NULL when none. */
struct pmfi_req *pmfi_match_cancel(struct pmfi_match *m, const void *context);

/* ---- endpoint (ep.c) ---- */

struct pmfi_peer_q {
	struct pmfi_list pending;       /* struct pmfi_req waiting for PM room */
	struct pmfi_list active;        /* in ep->active while pending is not empty */
	size_t eager_limit;             /* largest eager payload to this peer;
					   0: not known yet (pmfi_eager_limit) */
	bool gone;                      /* PM says it exited or died */
};

struct pmfi_ep {
	struct fid_ep fid;
	struct pmfi_domain *dom;
	struct pmfi_av *av;
	struct pmfi_cq *tx_cq, *rx_cq;
	struct pmfi_cntr *rma_cntr; /* bound for PMFI_CNTR_EVENTS */
	uint64_t cntr_events;   /* which of them it counts (FI_READ, FI_WRITE) */
	struct pmfi_list rma;   /* RMA requests PM has not completed */
	uint64_t tx_op_flags, rx_op_flags; /* from the fi_info, or set later */
	bool tx_selective, rx_selective;
	bool enabled;
	int index;              /* in the process (names, headers): pmfi_proc_ep */
	struct pmfi_list inbox; /* struct pmfi_inbox: messages another endpoint
				   took from PM while our CQs were full */
	pm_context_t *pm;
	int self;               /* our PM rank */
	int npeers;             /* slots in peers: pmfi_proc_max_peers() */
	struct pmfi_peer_q *peers;
	/* Which receives honour src_addr: FI_DIRECTED_RECV both kinds; from API
	 * 2.0 FI_TAGGED_DIRECTED_RECV tagged ones only, and
	 * FI_EXACT_DIRECTED_RECV as FI_DIRECTED_RECV with FI_ADDR_UNSPEC
	 * refused (exact). */
	bool directed_msg, directed_tagged, exact;
	size_t min_multi_recv;  /* FI_OPT_MIN_MULTI_RECV */
	bool multi_retry;       /* unexpected messages wait for a multi-receive
				   buffer that had no room for them in the CQ
				   or the request pool: progress retries */
	struct pmfi_list active; /* peers with pending sends */
	struct pmfi_list rndv;  /* rendezvous sends waiting for FIN */
	struct pmfi_list reads; /* receives reading from a sender */
	struct pmfi_list read_wait; /* receives whose read met -EAGAIN */
	struct pmfi_match match;
	struct pmfi_req *pool;  /* fixed pool of requests */
	struct pmfi_list free_reqs;
	size_t pool_size;
	uint64_t cookie_gen;
	uint64_t passes;        /* of progress: a peer check every so many */
	/* The last message a progress pass took, dispatched (whatever was
	 * kept of it copied) and not yet released: the next pass releases it
	 * first (progress.c, pmfi_release_held), or ep_close. */
	struct pm_msg held;
	bool holding;
	uint64_t dropped;       /* malformed messages, logged at close */
	uint64_t multi_msgs, multi_used_up; /* messages into multi-receive
					       buffers, buffers used up: logged at close */
};

/* A message for ep taken from PM by another endpoint's progress, kept
 * until ep's progress has room for what it completes. */
struct pmfi_inbox {
	struct pmfi_list link;
	int peer;
	size_t len;
	unsigned char data[];
};

int pmfi_ep_open(struct fid_domain *domain, struct fi_info *info, struct fid_ep **ep,
		 void *context);
/* The largest eager payload to peer, learnt from PM on first use (a peer
 * of a detached context may come after the endpoint). */
size_t pmfi_eager_limit(struct pmfi_ep *ep, int peer);
struct pmfi_req *pmfi_req_get(struct pmfi_ep *ep);
void pmfi_req_put(struct pmfi_ep *ep, struct pmfi_req *r);

/* ---- data path (tagged.c, progress.c) ---- */

/* Release to PM the message the last progress pass held back. */
void pmfi_release_held(struct pmfi_ep *ep);

extern struct fi_ops_tagged pmfi_tagged_ops;
extern struct fi_ops_rma pmfi_rma_ops;
extern struct fi_ops_atomic pmfi_atomic_ops;
/* Complete the RMA requests PM has finished (progress.c calls it). */
void pmfi_rma_poll(struct pmfi_ep *ep);

/* One remote operation (rma.c): a read or write of len bytes at addr of
 * key, or with FI_ATOMIC in what an atomic (op, its operands, the old
 * value into result or nowhere) on the 64- or 32-bit word there. */
struct pmfi_remote {
	uint64_t what;          /* FI_READ or FI_WRITE, | FI_ATOMIC */
	void *buf;
	size_t len;
	fi_addr_t dest;
	uint64_t addr, key;
	void *context;
	uint64_t flags;         /* op flags: FI_COMPLETION, FI_INJECT */
	unsigned aop;           /* enum pm_atomic_op, | PM_ATOMIC_32 */
	uint64_t operand, compare;
	void *result;           /* the old value (the datatype's width), or NULL */
};

/* Post o on ep, locking the domain; 0 (its completion, an error one
 * included, comes later) or -FI_E*. */
ssize_t pmfi_remote_post(struct pmfi_ep *ep, const struct pmfi_remote *o);
/* The atomic answers of the domain (fi_query_atomic), atomic.c. */
int pmfi_query_atomic(struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op,
		      struct fi_atomic_attr *attr, uint64_t flags);
extern struct fi_ops_msg pmfi_msg_ops;

/* One pass of progress over ep (design §7). */
void pmfi_progress(struct pmfi_ep *ep);
/* Post a send (eager or rendezvous) now or queue it; 0 or -FI_E*. */
ssize_t pmfi_send_post(struct pmfi_ep *ep, struct pmfi_req *r);
/* One PM message to peer now: header and body; 0, -EAGAIN or a PM error. */
int pmfi_send_eager(struct pmfi_ep *ep, int peer, const struct pmfi_hdr *h, const void *body,
		    size_t len);
/* Fill multi-receive buffer m (posted) from the unexpected messages it takes. */
void pmfi_multi_drain(struct pmfi_ep *ep, struct pmfi_req *m);
/* Drop an unexpected message (FI_DISCARD), answering a rendezvous. */
void pmfi_unexp_discard(struct pmfi_ep *ep, struct pmfi_unexp *u);
/* Start taking what the unexpected message u holds into receive r (u freed). */
void pmfi_recv_take(struct pmfi_ep *ep, struct pmfi_req *r, struct pmfi_unexp *u);
/* Complete receive r with len bytes of a message from peer (error < 0). */
void pmfi_recv_complete(struct pmfi_ep *ep, struct pmfi_req *r, size_t msg_len,
			uint64_t tag, uint64_t data, bool has_data, int err);
/* A receive that ends in error before any data: cancelled, no match for a
 * peek, or its peer gone.  -FI_ENOMEM when the error completion is lost. */
int pmfi_recv_error(struct pmfi_ep *ep, void *context, bool tagged, void *buf, uint64_t tag,
		    int err, int prov_errno);
/* Complete a send. */
void pmfi_send_complete(struct pmfi_ep *ep, struct pmfi_req *r, int err);

/* The answers of an object to what it does not do (-FI_ENOSYS). */
int pmfi_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int pmfi_no_control(struct fid *fid, int command, void *arg);
int pmfi_no_ops_open(struct fid *fid, const char *name, uint64_t flags, void **ops,
		     void *context);

/* What a completion's prov_errno (PM's errno, positive) means, for the CQ's
 * and EQ's strerror: also copied into buf when one is given. */
const char *pmfi_strerror(int prov_errno, char *buf, size_t len);

/* FI errors from PM's negative errnos. */
int pmfi_errno(int pm_err);

#endif /* PMFI_H */
