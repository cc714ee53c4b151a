/* SPDX-License-Identifier: MIT */
/*
 * pm.h - PM, the user-level communication library of score.
 *
 * A *context* is one process's endpoint in one job.  The processes of a job
 * are peers numbered 0..size-1.  Every context offers the same API whatever
 * the *device* beneath it (shm on one node, a network device between nodes,
 * composite choosing per peer).
 *
 * Conventions: every function returning int returns 0 (or a documented
 * non-negative value) on success and a negative errno on failure.  No
 * function blocks except pm_open(), pm_wait() and pm_quiesce(); none
 * allocates memory except pm_open(), pm_mr_register() and, in a detached
 * context, pm_peer_insert() of a new peer.
 *
 * Thread safety: a context is used by one thread at a time; pm_signal()
 * alone may be called meanwhile from any thread or a signal handler.
 *
 * See docs/pm/guide.md for the programming guide.
 */
#ifndef PM_H
#define PM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PM_VERSION_MAJOR 0
#define PM_VERSION_MINOR 1
#define PM_VERSION_PATCH 0

/* Returns "MAJOR.MINOR.PATCH" of the library actually loaded. */
const char *pm_version(void);

/* Like strerror(), for the negative errno values PM returns. */
const char *pm_strerror(int err);

typedef struct pm_context pm_context_t;
typedef struct pm_mr pm_mr_t;

/*
 * Opening a context.  Every field is optional (zero means "default, or the
 * environment variable named beside it").
 */
struct pm_open_attr {
	const char *device;     /* "composite" (default), "shm", "udp" PM_DEVICE */
	uint32_t spin_us;       /* busy-poll budget of pm_wait(),    PM_SPIN_US
	                           then block (default 200 us)                 */
	uint32_t shm_ring_kib;  /* bytes of each shm receive ring,   PM_SHM_RING_KIB
	                           per sending peer (default 512)              */
	uint32_t udp_ring_kib;  /* udp send and receive ring per     PM_UDP_RING_KIB
	                           remote peer (default 512)                   */
	uint32_t udp_window;    /* udp packets in flight per peer    PM_UDP_WINDOW
	                           (default 512, a power of two)               */
	uint32_t flags;         /* PM_OPEN_*                                   */
};

/*
 * A detached context: opened without any launcher, even under one, it is a
 * job of its own whose peers are whatever contexts the program inserts
 * with pm_peer_insert(), by the addresses they exchanged by any means of
 * their own (a socket, a file, MPICH's PMI).  On the composite device (the
 * default) a peer in a process of the same host is reached through shm,
 * any other through udp; on "udp", every peer through udp; shm alone is
 * -ENOTSUP (its address would not say where the process is).  pm_rank() is 0 and
 * pm_size() is 1 + the peers inserted so far: peer 0 is the context itself,
 * the others are numbered 1, 2, ... in the order of their first insertion.
 * At most PM_DETACHED_MAX peers, itself included.  Its address carries a
 * random key that every packet to it must carry: keep it as secret as a
 * job key.  See docs/pm/guide.md, "Detached contexts".
 */
#define PM_OPEN_DETACHED 0x1u
#define PM_DETACHED_MAX  1024

/*
 * Open this process's context of its job.  Under a PMIx launcher (scrun,
 * srun --mpi=pmix, mpirun) rank and size come from PMIx and endpoint
 * addresses are exchanged with a fence, so pm_open() is collective: every
 * process of the job must call it.  Without a launcher the process is a
 * singleton job of size 1.  With PM_OPEN_DETACHED in attr->flags it is a
 * detached context (above), never collective.  attr may be NULL.
 *
 * Errors: -ENODEV unknown device, -ENETUNREACH a peer no device reaches,
 * -EPROTO bootstrap failed, -ENOMEM, -EINVAL unknown flags, -ENOTSUP a
 * detached context on the shm device alone.
 */
int pm_open(pm_context_t **ctx, const struct pm_open_attr *attr);

/* Close a context (not collective).  Messages not yet taken are lost. */
int pm_close(pm_context_t *ctx);

/* This process's rank and its job's size (a detached context: 0, and 1 +
 * the peers inserted so far). */
int pm_rank(const pm_context_t *ctx);
int pm_size(const pm_context_t *ctx);

/* Name of the device that serves peer ("self", "shm", ...), NULL if none. */
const char *pm_peer_device(const pm_context_t *ctx, int peer);

/* Largest message, in bytes, that can be sent to peer. */
size_t pm_max_message(const pm_context_t *ctx, int peer);

/* ------------------------------------------------------------------------
 * Addresses, for layers that name peers by address rather than by rank
 * (libfabric's address vectors: the provider pm in mpi/).
 *
 * A context's address is an opaque blob of at most PM_ADDRESS_MAX bytes;
 * pm_peer_insert() turns an address of a context of the same job back into
 * its peer number.  Layout: docs/pm/wire.md, "Addresses".
 *
 * A detached context's address carries its key, the secret that lets a
 * sender in: hand it only to the peers meant to talk to it, and never log
 * it.
 */
#define PM_ADDRESS_MAX 48

/* Write this context's address into buf (*len bytes available); set *len
 * to its size.  Errors: -ENOBUFS buf too small (*len says how much). */
int pm_address(const pm_context_t *ctx, void *buf, size_t *len);

/*
 * The peer number of the context whose address is addr, in *peer.  In a
 * launcher's job: its rank.  In a detached context: the number given at
 * the address's first insertion (the same number again afterwards; its
 * own address is 0); a new peer makes pm_size() grow by one and is
 * reachable once it has inserted this context's address too (until then
 * its packets are dropped, counted, and resent by the protocol).  Inserting
 * allocates the peer's queues; nothing else does.
 * Errors: -EINVAL malformed; -EADDRNOTAVAIL a context of another job (or a
 * detached one in a job, or the reverse); -ENETUNREACH no network of this
 * context reaches it; -ENOSPC PM_DETACHED_MAX peers already; -ENOMEM.
 */
int pm_peer_insert(pm_context_t *ctx, const void *addr, size_t len, int *peer);

/* ------------------------------------------------------------------------
 * Messages: zero-copy hand-off.
 *
 * The sender asks for a buffer that lives where the receiver will read it,
 * fills it and sends it.  The receiver reads the message in place and
 * releases it; releasing is what frees space for the sender (flow control).
 * Delivery is reliable and ordered per (sender, receiver) pair.
 */

/*
 * Get a buffer of len bytes (len <= pm_max_message()) for a message to peer.
 * At most one buffer per peer is outstanding until pm_send().
 * Errors: -EAGAIN no space now (the receiver has not released yet, or the
 * context is quiesced): progress with pm_wait() and try again; -EMSGSIZE;
 * -EBUSY a buffer for peer is already outstanding; -EPIPE peer is gone;
 * -EINVAL bad peer.
 */
int pm_send_buffer(pm_context_t *ctx, int peer, size_t len, void **buf);

/* Send the outstanding buffer for peer, with len <= the length asked for. */
int pm_send(pm_context_t *ctx, int peer, size_t len);

/* A received message, valid until pm_release(). */
struct pm_msg {
	const void *data;
	size_t len;
	int peer;
	uint32_t _reserved;
	uint64_t _cookie;       /* the device's handle; do not touch */
};

/*
 * Take the next received message, or -EAGAIN when there is none.  Messages
 * may be released in any order; each must be released exactly once.
 */
int pm_recv(pm_context_t *ctx, struct pm_msg *msg);

/*
 * pm_recv() without progress: take a message that has already arrived,
 * or -EAGAIN, without looking at the network.  For draining: after a
 * pm_recv() returned a message, pm_recv_queued() takes the others its
 * progress brought in and ends without the empty poll (a system call on
 * udp) that a last pm_recv() would make.  On shm it is pm_recv().
 */
int pm_recv_queued(pm_context_t *ctx, struct pm_msg *msg);
int pm_release(pm_context_t *ctx, const struct pm_msg *msg);

/*
 * Progress: busy-poll for up to spin_us, then block until a message may
 * have arrived or send space may have been freed, pm_signal() is called,
 * a peer's remote operation was served while it slept
 * (pm_requests_served()), or timeout_ms passes (-1 waits forever).
 * Returns 0 on an event,
 * -ETIMEDOUT, or -ECONNRESET when a peer has died without closing its
 * context (crashed, killed); a peer that closed and exited is simply gone
 * (see pm_peer_alive()).  Spurious wake-ups happen; callers retry their
 * pm_recv()/pm_send_buffer().
 */
int pm_wait(pm_context_t *ctx, int timeout_ms);

/*
 * Wake a thread blocked in pm_wait() on ctx: that pm_wait() returns 0
 * soon (at once if it is spinning, within microseconds if it sleeps).
 * A pm_signal() made while no thread waits makes the next pm_wait()
 * return at once (the wake-up is remembered, not counted: several
 * signals before one wait wake it once).  The one PM call that may be
 * made from another thread while ctx is in use, and from a signal
 * handler: it takes no lock and allocates nothing (and keeps errno).
 * The pm_wait() that takes the signal also sees what the signalling
 * thread wrote before pm_signal().  Errors: -EINVAL ctx is NULL.
 */
int pm_signal(pm_context_t *ctx);

/* 1 if peer is alive, 0 if it is gone (exited or died), negative on error. */
int pm_peer_alive(pm_context_t *ctx, int peer);

/*
 * How many remote operations of its peers (remote writes, reads and
 * atomics on its regions) ctx has taken in so far over a network device.
 * The device serves them inside pm_recv()/pm_wait() and hands the caller
 * nothing, so a caller that polls for its peers' sake (a DSM's service
 * thread) sees from this count that they are still busy with it.  Between
 * processes of one node (shm) the peer does them alone: not counted.  A
 * load, no system call; 0 for a NULL ctx.
 */
uint64_t pm_requests_served(const pm_context_t *ctx);

/* ------------------------------------------------------------------------
 * Remote memory.
 *
 * A process registers a region and hands its key to peers (in a message);
 * peers then write into it and read from it by offset, one-sided.  Local
 * buffers passed to pm_write()/pm_read() go through the registration cache
 * (the pin-down cache): registering them is implicit and reused.
 */
int pm_mr_register(pm_context_t *ctx, void *addr, size_t len, pm_mr_t **mr);
/* PM_MR_VIRT: peers name places in the region by virtual address (the
 * roffset of pm_write/pm_read is addr + offset), as libfabric's
 * FI_MR_VIRT_ADDR does; an address below addr or past its end is -ERANGE.
 * Unknown flags: -EINVAL. */
#define PM_MR_VIRT 0x1u
int pm_mr_register_flags(pm_context_t *ctx, void *addr, size_t len, unsigned flags,
			 pm_mr_t **mr);
int pm_mr_deregister(pm_context_t *ctx, pm_mr_t *mr);
uint64_t pm_mr_key(const pm_mr_t *mr);

/* Caller-owned handle of one remote-memory operation. */
struct pm_op {
	int status;             /* 1 pending, 0 done, negative errno failed */
	int peer;
	uint64_t _device[4];
};

/*
 * Start a write of len bytes from src into peer's region rkey at roffset,
 * or a read from there into dst.  src/dst must stay valid until the
 * operation completes.  A range outside the region (-ERANGE) or an unknown
 * key (-ENOENT) is reported at start by devices that can see the peer's
 * regions (shm), and in op->status at completion by network devices (udp),
 * which learn it from the peer.  Other errors at start: -EAGAIN quiesced or
 * too many operations outstanding, -EPIPE peer gone.  A zero-length
 * operation completes at once.
 *
 * Order: the remote operations (writes, reads, atomics) that one context
 * starts to one peer take effect at the peer in the order they were
 * started: a read started after a write sees the write without waiting for
 * it to complete (shm does each at once; udp carries them in one ordered
 * stream and the peer applies each as it comes).  libpmdsm relies on it.
 */
int pm_write(pm_context_t *ctx, int peer, const void *src, size_t len,
	     uint64_t rkey, uint64_t roffset, struct pm_op *op);
int pm_read(pm_context_t *ctx, int peer, void *dst, size_t len,
	    uint64_t rkey, uint64_t roffset, struct pm_op *op);

/* 1 when op completed (op->status holds its result), 0 while pending. */
int pm_test(pm_context_t *ctx, struct pm_op *op);

/*
 * Atomics: one read-modify-write of a 64-bit word in peer's region rkey at
 * roffset (8-byte aligned in memory), or of a 32-bit word (4-byte aligned)
 * with PM_ATOMIC_32 or'ed into aop, atomic with respect to every other PM
 * atomic on that word, whoever issues it (the owner itself included), but
 * not with plain stores or pm_write().  The word holds the new value:
 *
 *   PM_ATOMIC_ADD    old + operand (two's complement: signed or not)
 *   PM_ATOMIC_SWAP   operand
 *   PM_ATOMIC_CSWAP  operand if old == compare, else old
 *   PM_ATOMIC_READ   old (unchanged)
 *   PM_ATOMIC_AND, PM_ATOMIC_OR, PM_ATOMIC_XOR   old & | ^ operand
 *
 * (a 32-bit word takes the low 32 bits of operand and compare), and
 * result, when not NULL, the old value once the operation completes
 * (pm_test()): 8 bytes, or 4 for a 32-bit word; it must stay valid until
 * then.  compare is read by PM_ATOMIC_CSWAP only.  Where it runs: on shm
 * the caller does it at once, under a lock in the owner's segment, so it
 * is complete when pm_atomic() returns; on udp the owner's progress (any PM
 * call that progresses: pm_recv, pm_wait, pm_test) does it and answers,
 * like a pm_read(), and the answer completes op.  Errors as pm_read(), and
 * -EINVAL for an unknown op; a word that is not aligned is -EINVAL, at
 * start on shm, in op->status on udp.
 */
enum pm_atomic_op {
	PM_ATOMIC_ADD = 1,
	PM_ATOMIC_SWAP = 2,
	PM_ATOMIC_CSWAP = 3,
	PM_ATOMIC_READ = 4,
	PM_ATOMIC_AND = 5,
	PM_ATOMIC_OR = 6,
	PM_ATOMIC_XOR = 7,
};
#define PM_ATOMIC_32 0x100u     /* or'ed into aop: a 32-bit word */

int pm_atomic(pm_context_t *ctx, int peer, unsigned aop, uint64_t operand, uint64_t compare,
	      void *result, uint64_t rkey, uint64_t roffset, struct pm_op *op);

/* ------------------------------------------------------------------------
 * Network preemption (used by scored).
 *
 * pm_quiesce() stops injection (sends and remote operations return -EAGAIN)
 * and returns once nothing this context sent is in flight.  pm_resume()
 * reopens it.  Both are idempotent.
 */
int pm_quiesce(pm_context_t *ctx);
int pm_resume(pm_context_t *ctx);

/* ------------------------------------------------------------------------
 * Statistics.  The same counters are published in shared memory so that
 * other processes (pminfo, scored) read them live; see docs/pm/stats.md.
 */
struct pm_stats {
	uint64_t msgs_sent, bytes_sent;
	uint64_t msgs_recv, bytes_recv;
	uint64_t send_eagain;           /* pm_send_buffer() said "try again" */
	uint64_t rma_writes, rma_reads, rma_bytes;
	uint64_t regcache_hits, regcache_misses, regcache_evictions;
	uint64_t waits_blocked;         /* pm_wait() calls that went to sleep */
	uint64_t retransmits, drops, stops, gos, loses; /* network devices */
	uint64_t quiesces, quiesce_ns;
	/* Timeouts that asked the peer (POLL) instead of resending blindly; data
	 * packets received twice (a resend of what had arrived: a spurious
	 * retransmission seen from the receiver); packets sent again because
	 * the receiver refused them for want of room (STOP), which is flow
	 * control, not loss, and not counted in retransmits. */
	uint64_t rto_polls, dups, refused_resends;
};

int pm_stats_get(const pm_context_t *ctx, struct pm_stats *stats);

#define PM_STATS_LAYER_MAX 32

/*
 * Publish counters of a layer above PM (its name, e.g. "dsm", at most
 * 15 characters) in ctx's statistics page: n names (each at most 31
 * characters, [a-z0-9_]), and *counters set to n 64-bit words in the
 * page, zeroed, that the layer updates in place (each an aligned word,
 * written without locks, as PM's own).  At most one layer per context, at
 * most PM_STATS_LAYER_MAX (32) counters.  Errors: -EINVAL, -EEXIST (a
 * layer is published already), -E2BIG.
 *
 * In detail: -EINVAL for a NULL argument, n == 0, a name empty, too long
 * or of other characters, two counters of one name, or a layer named
 * "pm" or "agent" or beginning with "pm_" or "agent_" (its metrics could
 * be PM's own or scored's agent's);
 * -E2BIG for n > PM_STATS_LAYER_MAX; *counters is NULL after an error.
 * The words stay valid until pm_close().  Readers (pminfo, scored's agent,
 * which exports each as a metric score_<layer>_<name>_total, a name
 * ending in _ns as seconds) see each word whole but not all at one
 * instant: a word that more than one thread updates needs atomic updates
 * (__atomic_fetch_add(&w, 1, __ATOMIC_RELAXED)).  See docs/pm/stats.md.
 */
int pm_stats_layer(pm_context_t *ctx, const char *layer, const char *const *names,
		   unsigned n, uint64_t **counters);

/* ------------------------------------------------------------------------
 * Raw Ethernet for unprivileged processes
 *
 * The eth device (PM_NET_DEVICE=eth) needs packet sockets, which take
 * CAP_NET_RAW to open.  A privileged launcher (scored's agent with
 * pm_net_device = "eth") opens them for a process it is about to start:
 *
 *   pm_eth_grant(nics, conf, fds, max_fds, env, envlen, err, errlen)
 *
 * opens, on each NIC PM would use in that process (nics and conf are the
 * values PM_UDP_NICS and PM_UDP_CONF have in the process's environment,
 * NULL when unset), a UDP socket that holds the process's port and a
 * packet socket whose filter passes only PM's frames (EtherType 0x88B5)
 * for that port, locked (SO_LOCK_FILTER): the process cannot see other
 * processes' frames.  It can send any frame on those NICs: grant only
 * where the network and its users are trusted (docs/pm/design.md, "The
 * eth device").  The descriptors are close-on-exec: the launcher makes
 * them inheritable in the child only, and puts PM_ETH_GRANT=<env> into the
 * child's environment; the first PM context of the process that opens
 * the eth device takes them.  Returns the number of descriptors written
 * to fds (two per NIC), or a negative errno with the reason in err
 * (-EPERM without CAP_NET_RAW, -ENOSPC when max_fds or envlen is too
 * small); nothing stays open after an error.
 */
int pm_eth_grant(const char *nics, const char *conf, int *fds, int max_fds, char *env,
		 size_t envlen, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* PM_H */
