/* SPDX-License-Identifier: MIT */
/*
 * pm_internal.h - what the pieces of libpm share: the context, the device
 * interface and the bootstrap interface.  Nothing here is exported.
 */
#ifndef PM_INTERNAL_H
#define PM_INTERNAL_H

#include "pm.h"
#include "regcache.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PM_JOB_MAX        256
#define PM_MAX_WINDOWS    256     /* exposed regions per context */
/* A window's key: generation << 16 | PM_KEY_VIRT | slot index. */
#define PM_KEY_VIRT       0x8000u /* registered PM_MR_VIRT: offsets are addresses */
#define PM_WINDOW_IDX(key) ((uint32_t)((key) & 0x7fffu))

/* The offset into a window that a remote operation's roffset names: itself,
 * or for a PM_MR_VIRT key (libfabric's FI_MR_VIRT_ADDR) the distance from
 * the window's base address; false when that address lies below the base. */
static inline bool pm_window_offset(uint64_t key, uint64_t base, uint64_t *off)
{
	if (!(key & PM_KEY_VIRT))
		return true;
	if (*off < base)
		return false;
	*off -= base;
	return true;
}

/* ---- bootstrap: rank, size, locality and the exchange of addresses ---- */

struct pm_boot;

struct pm_boot_ops {
	const char *name;
	int (*put)(struct pm_boot *b, const char *key, const void *val, size_t len);
	/* Collective: every put before it is visible to every get after it. */
	int (*fence)(struct pm_boot *b);
	/* Copies at most *len bytes; sets *len to the value's size. */
	int (*get)(struct pm_boot *b, int rank, const char *key, void *val, size_t *len);
	void (*fini)(struct pm_boot *b);
};

struct pm_boot {
	int rank, size;
	char job[PM_JOB_MAX];   /* the launcher's name for the job */
	uint64_t jobkey;        /* the job's secret: names shared objects, tags packets */
	int nlocal;             /* processes of the job on this node */
	int *local_ranks;       /* sorted, nlocal entries, owned */
	const struct pm_boot_ops *ops;
	void *priv;
};

/* PMIx when a launcher is present, otherwise a singleton; detached: a
 * singleton whatever the environment (its job is named "detached.*"). */
int pm_boot_open(struct pm_boot *b, bool detached);
int pm_boot_open_pmix(struct pm_boot *b);
int pm_boot_open_singleton(struct pm_boot *b);
void pm_boot_close(struct pm_boot *b);

/* ---- devices ---- */

struct pm_device;
struct pm_daddr;

struct pm_device_ops {
	const char *name;
	/* A new device of this kind for ctx (flags: PM_DEVICE_*), or NULL
	 * when memory is short.  Nothing is opened before setup. */
	struct pm_device *(*create)(struct pm_context *ctx, unsigned flags);
	/* Opening: setup (create, put address) - fence - connect (get
	 * addresses, attach) - fence - ready (forget names).  destroy undoes
	 * whatever of it was done. */
	int (*setup)(struct pm_device *dev, struct pm_boot *b);
	int (*connect)(struct pm_device *dev, struct pm_boot *b);
	void (*ready)(struct pm_device *dev);
	void (*destroy)(struct pm_device *dev);

	/* Name of the device that reaches peer, NULL when none does. */
	const char *(*device_of)(const struct pm_device *dev, int peer);
	size_t (*max_message)(const struct pm_device *dev, int peer);

	int (*send_buffer)(struct pm_device *dev, int peer, size_t len, void **buf);
	int (*send)(struct pm_device *dev, int peer, size_t len);
	int (*recv)(struct pm_device *dev, struct pm_msg *msg);
	/* recv without progress: only what the device already holds.  NULL
	 * when recv itself makes none (shm reads its rings). */
	int (*recv_queued)(struct pm_device *dev, struct pm_msg *msg);
	int (*release)(struct pm_device *dev, const struct pm_msg *msg);
	/* Make progress without blocking; true when something happened that
	 * a waiter cares about (a message, send space, a completion). */
	bool (*poll)(struct pm_device *dev);
	/* Sleep until something may have happened or deadline_ns (CLOCK_
	 * MONOTONIC) passes; 0, or -ECONNRESET when a peer died.  pm_wait()
	 * spins on poll first and calls this in a loop (context.c). */
	int (*sleep)(struct pm_device *dev, uint64_t deadline_ns);

	/* Sleeping on several devices at once (composite).  A device that can
	 * be woken through a file descriptor returns it from sleep_fd (NULL op
	 * or -1: it cannot); sleep_prepare announces the sleep and returns 1
	 * when an event is already there, 0, or -ECONNRESET; sleep_finish ends
	 * it.  block sleeps in the device until its own event, one of
	 * extra_fds, or deadline. */
	int (*sleep_fd)(struct pm_device *dev);
	int (*sleep_prepare)(struct pm_device *dev);
	void (*sleep_finish)(struct pm_device *dev);
	int (*block)(struct pm_device *dev, uint64_t deadline_ns, const int *extra_fds,
		     int nextra);
	/* pm_signal(): end the sleep of sleep or block early (a NULL op: the
	 * signal is seen when the sleep ends by itself).  Called from any
	 * thread or a signal handler, after ctx->signaled was set and a
	 * full fence: it may only use atomics and system calls, no lock, no
	 * allocation, and wakes the owner only if the owner announced a sleep.
	 * The other half is the sleeper's: announce the sleep, full fence,
	 * then look at pm_signal_pending() before sleeping. */
	void (*wake)(struct pm_device *dev);
	int (*peer_alive)(struct pm_device *dev, int peer);

	/* Detached contexts (NULL ops: the device cannot serve them).
	 * address: this context's address (core/detached.h), as
	 * pm_address(); a device that has none leaves it to the others.
	 * insert: the context at d, decoded by the core.  *peer comes in as
	 * the number a new peer gets (ctx->size, which the core then counts)
	 * and goes out as the peer's number, the one it got at its first
	 * insertion if it had one; -EHOSTUNREACH: this device does not reach
	 * it (composite asks the next one). */
	int (*address)(const struct pm_device *dev, void *buf, size_t *len);
	int (*insert)(struct pm_device *dev, const struct pm_daddr *d, int *peer);

	/* Make [addr, addr+len) reachable by peers under key in window slot
	 * idx; key 0 hides the slot. */
	int (*expose)(struct pm_device *dev, uint32_t idx, uint64_t key, void *addr,
		      size_t len);
	int (*rma)(struct pm_device *dev, int peer, bool write, void *local,
		   size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op);
	int (*test)(struct pm_device *dev, struct pm_op *op);
	/* pm_atomic() to a peer (op already checked); completes like rma. */
	int (*atomic)(struct pm_device *dev, int peer, uint32_t aop, uint64_t operand,
		      uint64_t compare, void *result, uint64_t rkey, uint64_t roffset,
		      struct pm_op *op);

	/* Block until nothing sent is in flight. */
	int (*drain)(struct pm_device *dev);

	/* Preemption from outside (control.c).  These three run in a signal
	 * handler that interrupted the application (never PM), so they may
	 * only use the device's own structures and system calls: no malloc,
	 * no stdio, no locks.
	 * drain_poll: progress once without blocking; 1 when nothing sent is
	 * in flight any more (everything acknowledged), 0 not yet.
	 * hold: keep the protocol alive without delivering anything to the
	 * application (take packets in, acknowledge them), then sleep until
	 * traffic, a signal or deadline_ns; never a busy spin, even when
	 * messages wait unread.
	 * resumed: after a hold of any length (the process may have been
	 * frozen for seconds), restart protocol timers from now so that the
	 * frozen time does not look like lost packets. */
	int (*drain_poll)(struct pm_device *dev);
	void (*hold)(struct pm_device *dev, uint64_t deadline_ns);
	void (*resumed)(struct pm_device *dev);
};

struct pm_device {
	const struct pm_device_ops *ops;
	struct pm_context *ctx;
};

/* A device's next message: with progress (recv), or only what it already
 * holds (recv_queued, where the device has one; else recv makes none). */
static inline int pm_device_recv(struct pm_device *dev, struct pm_msg *msg, bool progress)
{
	if (!progress && dev->ops->recv_queued)
		return dev->ops->recv_queued(dev, msg);
	return dev->ops->recv(dev, msg);
}

/* Flags of create: serve only the peers on other nodes (a network device
 * under composite, beside shm). */
#define PM_DEVICE_REMOTE_ONLY 1u

/*
 * The device table (src/devices.c): every device libpm is built with,
 * NULL-terminated, each entry declared by its device's own header.  The
 * core and composite find a device by its name here and never name one in
 * code.
 */
extern const struct pm_device_ops *const pm_devices[];

/* The device called name, or NULL. */
const struct pm_device_ops *pm_device_find(const char *name);
/* Create ctx's device and open it over the bootstrap (core/device.c):
 * every process of the job runs the same steps, so the fences match. */
int pm_device_open(struct pm_context *ctx, const char *name);

/* ---- the context ---- */

/* An exposed region; pm_mr_t to users.  Lives in the context's table. */
struct pm_mr {
	uint64_t key;                   /* 0: slot free */
	void *addr;
	size_t len;
	struct regcache_entry *pin;
};

struct pm_stats_page;

struct pm_context {
	int rank, size;
	bool detached;                  /* PM_OPEN_DETACHED: size grows by insert */
	/* A detached context's identity in its address (core/detached.h):
	 * its id, drawn at pm_open(), its host's pm_host_id(), and its pid
	 * once a shm device lets other processes reach it (else 0). */
	uint32_t detached_id;
	uint32_t host_id;
	uint32_t detached_pid;
	struct pm_boot boot;
	struct pm_device *dev;
	struct pm_stats_page *page;     /* shared, read by pminfo and scored */
	struct pm_stats *stats;         /* &page->stats */
	char stats_path[256];
	uint64_t requests_served;       /* pm_requests_served(): the network device's count */
	uint32_t spin_us;
	uint32_t shm_ring_kib;
	uint32_t udp_ring_kib;
	uint32_t udp_window;
	bool quiesced;
	/* Preemption by scored (control.c, docs/pm/control.md). */
	_Atomic uint32_t *control;      /* the page's control word, or a word
					   that stays 0 (PM_CONTROL=0) */
	volatile sig_atomic_t in_call;  /* in a PM call, or held by the handler */
	volatile sig_atomic_t ctl_pending; /* the handler found this call in
					      progress: serve at its exit */
	volatile pid_t owner_tid;       /* thread of the latest call */
	/* Set by pm_signal() (any thread, a signal handler), taken by the
	 * pm_wait() it ends: a flag, not a count. */
	_Atomic uint32_t signaled;
	volatile sig_atomic_t opening;  /* in pm_open(): no device yet, nothing
					   on the wire, so a quiesce is answered
					   at once (control.c) */
	int control_slot;               /* in the registry of control.c, or -1 */
	struct regcache regcache;
	/* The lock of this context's atomics (core/atomic.h): a word in the
	 * shm segment when the shm device serves it (set by its setup), else
	 * atomic_lock_own. */
	_Atomic uint32_t *atomic_lock;
	_Atomic uint32_t atomic_lock_own;
	uint64_t window_gen;
	struct pm_mr windows[PM_MAX_WINDOWS];
};

/* A pm_signal() is pending: a device that is about to sleep looks here
 * after announcing its sleep (the wake op's other half); it does not take
 * the flag, pm_wait() does. */
static inline bool pm_signal_pending(const struct pm_context *ctx)
{
	return atomic_load_explicit(&ctx->signaled, memory_order_relaxed) != 0;
}

/* ---- preemption from outside: control.c ---- */

/* Watch ctx's control word from now on (PM_CONTROL), registering it with
 * the process's SIGURG handler; in pm_open(), as soon as the statistics page
 * exists, so that a rank still in its bootstrap answers too. */
void pm_control_open(struct pm_context *ctx);
/* pm_open() is done: the context is a full one (state OPEN). */
void pm_control_opened(struct pm_context *ctx);
/* Forget ctx; the handler no longer sees it when this returns. */
void pm_control_close(struct pm_context *ctx);
/* The control word asks for a quiesce: run the preemption procedure now
 * (a call's safe exit point).  Returns after the agent's resume. */
void pm_control_serve(struct pm_context *ctx);
pid_t pm_thread_id_slow(void);

/* This thread's id, cached; the handler forwards SIGURG to the thread
 * that uses a context (initial-exec: no __tls_get_addr on the fast path). */
extern _Thread_local pid_t pm_tl_tid __attribute__((tls_model("initial-exec")));

static inline pid_t pm_thread_id(void)
{
	pid_t t = pm_tl_tid;

	return __builtin_expect(t != 0, 1) ? t : pm_thread_id_slow();
}

/*
 * Every public call that can touch the device brackets its work with
 * these.  The flag tells the SIGURG handler that PM's structures may be
 * half-updated, so it must leave the work to the call's exit.  Plain
 * stores and compiler-only fences: the handler runs on this thread.
 */
static inline void pm_call_enter(struct pm_context *ctx)
{
	ctx->in_call = 1;
	ctx->owner_tid = pm_thread_id();
	atomic_signal_fence(memory_order_seq_cst);
}

static inline void pm_call_exit(struct pm_context *ctx)
{
	atomic_signal_fence(memory_order_seq_cst);
	ctx->in_call = 0;
	atomic_signal_fence(memory_order_seq_cst);
	/* A relaxed load of a line only the agent writes, and a flag beside
	 * the context's hot fields (another context of this thread asked while
	 * this call ran). */
	if (__builtin_expect((atomic_load_explicit(ctx->control, memory_order_relaxed) |
			      (uint32_t)ctx->ctl_pending) != 0, 0))
		pm_control_serve(ctx);
}

#endif /* PM_INTERNAL_H */
