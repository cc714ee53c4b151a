/* SPDX-License-Identifier: MIT */
/*
 * context.c - the public API: opening a context over its device, and the
 * checks and counting every device shares.  Devices do the transport.
 */
#include "pm_internal.h"
#include "atomic.h"
#include "detached.h"
#include "stats.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/random.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define PM_DEFAULT_DEVICE       "composite"  /* a name in the device table */
#define PM_DETACHED_DEVICE      "composite"  /* shm on this host, udp beyond */
/* Long enough to cover a 1 MiB single-copy transfer by a peer (about
 * 100 us) without sleeping; short enough not to burn a core for nothing. */
#define PM_DEFAULT_SPIN_US      200
#define PM_DEFAULT_RING_KIB     512
#define PM_DEFAULT_UDP_RING_KIB 512
#define PM_DEFAULT_UDP_WINDOW   512
#define PM_REGCACHE_ENTRIES     256

#define STR2(x) #x
#define STR(x) STR2(x)

const char *pm_version(void)
{
	return STR(PM_VERSION_MAJOR) "." STR(PM_VERSION_MINOR) "." STR(PM_VERSION_PATCH);
}

const char *pm_strerror(int err)
{
	return strerror(err < 0 ? -err : err);
}

/* An unsigned knob from attr, else the environment, else the default. */
static int knob(uint32_t from_attr, const char *env, uint32_t dflt, uint32_t *out)
{
	const char *s = getenv(env);

	if (from_attr) {
		*out = from_attr;
		return 0;
	}
	if (!s || !*s) {
		*out = dflt;
		return 0;
	}

	char *end;
	unsigned long v = strtoul(s, &end, 10);

	if (*end || v > UINT32_MAX) {
		pm_log(-1, "%s=%s: not a number", env, s);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

/* The registration cache asks the device to pin; no device needs it yet. */
static int reg_noop(void *arg, uintptr_t start, size_t len, void **handle)
{
	(void)arg;
	(void)start;
	(void)len;
	*handle = NULL;
	return 0;
}

static void dereg_noop(void *arg, void *handle)
{
	(void)arg;
	(void)handle;
}

static const struct regcache_ops regcache_noop = { .reg = reg_noop, .dereg = dereg_noop };

int pm_open(pm_context_t **out, const struct pm_open_attr *attr)
{
	struct pm_open_attr none = { 0 };
	struct pm_context *ctx;
	const char *device;
	int err;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!attr)
		attr = &none;
	if (attr->flags & ~PM_OPEN_DETACHED)
		return -EINVAL;
	bool detached = attr->flags & PM_OPEN_DETACHED;

	device = attr->device ? attr->device : getenv("PM_DEVICE");
	if (!device || !*device)
		device = detached ? PM_DETACHED_DEVICE : PM_DEFAULT_DEVICE;
	const struct pm_device_ops *ops = pm_device_find(device);

	if (detached && !ops)
		return -ENODEV;
	if (detached && !ops->address) {
		/* shm alone has no address that says where the process is. */
		pm_log(-1, "device %s: a detached context runs on composite or udp", device);
		return -ENOTSUP;
	}
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->control_slot = -1;
	ctx->detached = detached;
	if (detached) {
		/* Public, and only needs to differ from that of another context
		 * that reuses a port or a pid; never 0 (core/detached.h). */
		uint64_t r = 0;

		err = pm_random_u64(&r);
		if (err) {
			free(ctx);
			return err;
		}
		ctx->detached_id = (uint32_t)r ? (uint32_t)r : 1;
		ctx->host_id = pm_host_id();
	}
	err = knob(attr->spin_us, "PM_SPIN_US", PM_DEFAULT_SPIN_US, &ctx->spin_us);
	if (!err)
		err = knob(attr->shm_ring_kib, "PM_SHM_RING_KIB", PM_DEFAULT_RING_KIB,
			   &ctx->shm_ring_kib);
	if (!err)
		err = knob(attr->udp_ring_kib, "PM_UDP_RING_KIB", PM_DEFAULT_UDP_RING_KIB,
			   &ctx->udp_ring_kib);
	if (!err)
		err = knob(attr->udp_window, "PM_UDP_WINDOW", PM_DEFAULT_UDP_WINDOW,
			   &ctx->udp_window);
	if (err) {
		free(ctx);
		return err;
	}

	err = pm_boot_open(&ctx->boot, detached);
	if (err) {
		pm_log(-1, "bootstrap failed: %s", strerror(-err));
		free(ctx);
		return err == -ENOMEM ? err : -EPROTO;
	}
	ctx->rank = ctx->boot.rank;
	ctx->size = ctx->boot.size;
	ctx->atomic_lock = &ctx->atomic_lock_own;

	err = pm_stats_publish(ctx, device);
	if (err) {
		pm_log(ctx->rank, "statistics page in %s: %s", pm_stats_dir(), strerror(-err));
		goto fail;
	}
	/* From the page on the agent may ask us to quiesce, while the device's
	 * bootstrap still waits for slower ranks: answer from now on. */
	ctx->in_call = 1;
	ctx->opening = 1;
	pm_control_open(ctx);
	struct regcache_counters cnt = {
		.hits = &ctx->stats->regcache_hits,
		.misses = &ctx->stats->regcache_misses,
		.evictions = &ctx->stats->regcache_evictions,
	};
	err = regcache_init(&ctx->regcache, PM_REGCACHE_ENTRIES, &regcache_noop, ctx, &cnt);
	if (err)
		goto fail;
	err = pm_device_open(ctx, device);
	if (err)
		goto fail;
	pm_control_opened(ctx);
	*out = ctx;
	/* A preemption asked for while we were opening is served now. */
	pm_call_exit(ctx);
	return 0;

fail:
	pm_close(ctx);
	return err;
}

int pm_close(pm_context_t *ctx)
{
	if (!ctx)
		return -EINVAL;
	ctx->in_call = 1;       /* no preemption from here on: it is going */
	pm_control_close(ctx);
	if (ctx->dev)
		ctx->dev->ops->destroy(ctx->dev);
	if (ctx->regcache.pool)
		regcache_fini(&ctx->regcache);
	pm_stats_unpublish(ctx);
	pm_boot_close(&ctx->boot);
	free(ctx);
	return 0;
}

int pm_rank(const pm_context_t *ctx)
{
	return ctx->rank;
}

int pm_size(const pm_context_t *ctx)
{
	return ctx->size;
}

static bool bad_peer(const pm_context_t *ctx, int peer)
{
	return peer < 0 || peer >= ctx->size;
}

const char *pm_peer_device(const pm_context_t *ctx, int peer)
{
	return bad_peer(ctx, peer) ? NULL : ctx->dev->ops->device_of(ctx->dev, peer);
}

size_t pm_max_message(const pm_context_t *ctx, int peer)
{
	return bad_peer(ctx, peer) ? 0 : ctx->dev->ops->max_message(ctx->dev, peer);
}

/* ---- addresses ----
 *
 * A context of a launcher's job is {kind, rank, job tag}.  The tag is a
 * hash of the launcher's public job name, not the job key (which is
 * secret): it only tells an address of another job from one of ours.  A
 * detached context's address is its device's: the device alone knows how
 * it is reached (udp/device.c).
 */
enum { PM_ADDR_JOB = 1, PM_ADDR_DETACHED = 2 /* the udp device's (udp/device.c) */ };

struct pm_job_address {         /* little-endian on the wire, 16 bytes */
	uint8_t kind;           /* PM_ADDR_JOB */
	uint8_t zero[3];
	uint32_t rank;
	uint64_t job_tag;
};

_Static_assert(sizeof(struct pm_job_address) <= PM_ADDRESS_MAX, "address too long");

/* 64-bit FNV-1a: stable across processes and builds. */
static uint64_t job_tag(const char *job)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const unsigned char *p = (const unsigned char *)job; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h;
}

int pm_address(const pm_context_t *ctx, void *buf, size_t *len)
{
	struct pm_job_address a = {
		.kind = PM_ADDR_JOB,
		.rank = htole32((uint32_t)ctx->rank),
		.job_tag = htole64(job_tag(ctx->boot.job)),
	};

	if (!buf || !len)
		return -EINVAL;
	if (ctx->detached)
		return ctx->dev->ops->address(ctx->dev, buf, len);
	if (*len < sizeof(a)) {
		*len = sizeof(a);
		return -ENOBUFS;
	}
	memcpy(buf, &a, sizeof(a));
	*len = sizeof(a);
	return 0;
}

static inline int detached_insert(pm_context_t *ctx, const void *addr, size_t len, int *peer)
{
	struct pm_daddr d;
	int err = pm_daddr_decode(addr, len, &d);

	if (err)
		return err;
	*peer = ctx->size;     /* a new peer's; the device checks the room */
	err = ctx->dev->ops->insert(ctx->dev, &d, peer);
	if (err == -EHOSTUNREACH)
		err = -ENETUNREACH;
	if (!err && *peer == ctx->size) {
		ctx->size++;
		ctx->page->size = ctx->size;    /* for pminfo */
	}
	return err;
}

int pm_peer_insert(pm_context_t *ctx, const void *addr, size_t len, int *peer)
{
	struct pm_job_address a;

	if (!addr || !peer || len < 1)
		return -EINVAL;
	if (ctx->detached) {
		/* The device makes the peer's queues and paths: a call in
		 * pm_call_enter()'s sense, as a preemption may come meanwhile. */
		pm_call_enter(ctx);
		int ret = detached_insert(ctx, addr, len, peer);

		pm_call_exit(ctx);
		return ret;
	}
	if (((const uint8_t *)addr)[0] == PM_ADDR_DETACHED)
		return -EADDRNOTAVAIL;  /* a context outside any job */
	if (len < sizeof(a))
		return -EINVAL;
	memcpy(&a, addr, sizeof(a));
	if (a.kind != PM_ADDR_JOB || a.zero[0] || a.zero[1] || a.zero[2])
		return -EINVAL;
	if (le64toh(a.job_tag) != job_tag(ctx->boot.job) ||
	    le32toh(a.rank) >= (uint32_t)ctx->size)
		return -EADDRNOTAVAIL;
	*peer = (int)le32toh(a.rank);
	return 0;
}

/* ---- messages ----
 *
 * Each public call that can touch the device is an inline body and a
 * wrapper that marks the context "in a call" around it (pm_call_enter/
 * exit in pm_internal.h): a preemption request that comes meanwhile is
 * served at the exit, where PM's structures are consistent again.
 */

static inline int send_buffer_call(pm_context_t *ctx, int peer, size_t len, void **buf)
{
	if (bad_peer(ctx, peer) || !buf)
		return -EINVAL;
	if (ctx->quiesced) {
		ctx->stats->send_eagain++;
		return -EAGAIN;
	}
	int err = ctx->dev->ops->send_buffer(ctx->dev, peer, len, buf);

	if (err == -EAGAIN)
		ctx->stats->send_eagain++;
	return err;
}

int pm_send_buffer(pm_context_t *ctx, int peer, size_t len, void **buf)
{
	pm_call_enter(ctx);
	int ret = send_buffer_call(ctx, peer, len, buf);

	pm_call_exit(ctx);
	return ret;
}

static inline int send_call(pm_context_t *ctx, int peer, size_t len)
{
	if (bad_peer(ctx, peer))
		return -EINVAL;
	int err = ctx->dev->ops->send(ctx->dev, peer, len);

	if (!err) {
		ctx->stats->msgs_sent++;
		ctx->stats->bytes_sent += len;
	}
	return err;
}

int pm_send(pm_context_t *ctx, int peer, size_t len)
{
	pm_call_enter(ctx);
	int ret = send_call(ctx, peer, len);

	pm_call_exit(ctx);
	return ret;
}

static inline int recv_call(pm_context_t *ctx, struct pm_msg *msg, bool progress)
{
	if (!msg)
		return -EINVAL;
	int err = pm_device_recv(ctx->dev, msg, progress);

	if (!err) {
		ctx->stats->msgs_recv++;
		ctx->stats->bytes_recv += msg->len;
	}
	return err;
}

int pm_recv(pm_context_t *ctx, struct pm_msg *msg)
{
	pm_call_enter(ctx);
	int ret = recv_call(ctx, msg, true);

	pm_call_exit(ctx);
	return ret;
}

int pm_recv_queued(pm_context_t *ctx, struct pm_msg *msg)
{
	pm_call_enter(ctx);
	int ret = recv_call(ctx, msg, false);

	pm_call_exit(ctx);
	return ret;
}

static inline int release_call(pm_context_t *ctx, const struct pm_msg *msg)
{
	if (!msg || bad_peer(ctx, msg->peer))
		return -EINVAL;
	return ctx->dev->ops->release(ctx->dev, msg);
}

int pm_release(pm_context_t *ctx, const struct pm_msg *msg)
{
	pm_call_enter(ctx);
	int ret = release_call(ctx, msg);

	pm_call_exit(ctx);
	return ret;
}

static inline bool preempt_asked(const struct pm_context *ctx)
{
	return __builtin_expect((atomic_load_explicit(ctx->control, memory_order_relaxed) |
				 (uint32_t)ctx->ctl_pending) != 0, 0);
}

/* Take a pending pm_signal(), if any.  The plain load first keeps the
 * spin loop free of locked instructions while nobody signals; acquire pairs
 * with pm_signal()'s exchange, so what the signaller wrote before it is
 * visible once pm_wait() returns. */
static inline bool signal_taken(struct pm_context *ctx)
{
	return __builtin_expect(atomic_load_explicit(&ctx->signaled, memory_order_relaxed) != 0, 0) &&
	       atomic_exchange_explicit(&ctx->signaled, 0, memory_order_acquire) != 0;
}

static inline int wait_call(pm_context_t *ctx, int timeout_ms)
{
	struct pm_device *dev = ctx->dev;
	uint64_t start = pm_now_ns();
	uint64_t spin_end = start + (uint64_t)ctx->spin_us * 1000u;
	uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms * 1000000u;

	/* Busy-poll first: an answer that comes within the spin costs no
	 * system call to sleep and none to be woken.  The clock is read every
	 * few polls only: a poll is far cheaper than reading it. */
	uint64_t spin_stop = spin_end < deadline ? spin_end : deadline;

	for (unsigned n = 0;; n++) {
		if (dev->ops->poll(dev))
			return 0;
		/* The agent asks for a quiesce: return (a spurious wake-up) so
		 * that the call's exit runs the procedure. */
		if (preempt_asked(ctx) || signal_taken(ctx))
			return 0;
		if ((n & 15) == 15 && pm_now_ns() >= spin_stop)
			break;
	}

	ctx->stats->waits_blocked++;
	uint64_t served = ctx->requests_served;

	for (;;) {
		if (pm_now_ns() >= deadline)
			return -ETIMEDOUT;

		/* The agent's SIGURG interrupts the sleep (EINTR is no error). */
		int err = dev->ops->sleep(dev, deadline);

		if (err)
			return err;
		/* The flag is looked at after every sleep: the device's sleep
		 * only ends early for it (pm_signal_pending), it leaves the
		 * taking to us.  A peer's remote operation served meanwhile
		 * ends the wait too: it brings the caller nothing, but a
		 * caller that waits for its peers' sake (a DSM home) would
		 * otherwise sleep through their whole run of reads, woken
		 * for each (pm_requests_served). */
		if (signal_taken(ctx) || dev->ops->poll(dev) || preempt_asked(ctx) ||
		    ctx->requests_served != served)
			return 0;
	}
}

int pm_wait(pm_context_t *ctx, int timeout_ms)
{
	pm_call_enter(ctx);
	int ret = wait_call(ctx, timeout_ms);

	pm_call_exit(ctx);
	return ret;
}

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "pm_signal() needs a lock-free flag");

/*
 * Not a call in pm_call_enter()'s sense: it runs on any thread, or in a
 * signal handler that interrupted anything (PM included), so it touches
 * nothing of the context but the flag and the device's wake, which use
 * only atomics and system calls.  Publishing the flag comes first and a
 * full fence separates it from the device's look at whether its owner
 * sleeps; the sleeper announces its sleep, fences, and looks at the flag
 * (pm_signal_pending): one of the two sees the other, so no wake-up is
 * lost (docs/pm/design.md, "Progress").
 */
int pm_signal(pm_context_t *ctx)
{
	if (!ctx)
		return -EINVAL;

	/* Already set: the signal that set it woke (or will be seen by) the
	 * sleeper, and the flag is taken once anyway. */
	if (atomic_exchange_explicit(&ctx->signaled, 1, memory_order_release))
		return 0;
	atomic_thread_fence(memory_order_seq_cst);

	struct pm_device *dev = ctx->dev;

	if (dev->ops->wake) {
		/* A handler must leave errno as it found it; the wake's
		 * system calls should not fail, but they may. */
		int saved = errno;

		dev->ops->wake(dev);
		errno = saved;
	}
	return 0;
}

static inline int peer_alive_call(pm_context_t *ctx, int peer)
{
	if (bad_peer(ctx, peer))
		return -EINVAL;
	return ctx->dev->ops->peer_alive(ctx->dev, peer);
}

int pm_peer_alive(pm_context_t *ctx, int peer)
{
	pm_call_enter(ctx);
	int ret = peer_alive_call(ctx, peer);

	pm_call_exit(ctx);
	return ret;
}

uint64_t pm_requests_served(const pm_context_t *ctx)
{
	return ctx ? ctx->requests_served : 0;
}

/* ---- remote memory ---- */

static inline int mr_register_call(pm_context_t *ctx, void *addr, size_t len,
				   unsigned flags, pm_mr_t **mr)
{
	if (!addr || !len || !mr || (flags & ~PM_MR_VIRT))
		return -EINVAL;

	uint32_t idx;

	for (idx = 0; idx < PM_MAX_WINDOWS && ctx->windows[idx].key; idx++)
		;
	if (idx == PM_MAX_WINDOWS)
		return -ENOSPC;

	struct pm_mr *w = &ctx->windows[idx];
	int err = regcache_acquire(&ctx->regcache, addr, len, &w->pin);

	if (err)
		return err;
	/* The generation makes a stale key of a reused slot fail cleanly. */
	uint64_t key = (++ctx->window_gen << 16) | (flags & PM_MR_VIRT ? PM_KEY_VIRT : 0) | idx;

	err = ctx->dev->ops->expose(ctx->dev, idx, key, addr, len);
	if (err) {
		regcache_release(&ctx->regcache, w->pin);
		return err;
	}
	w->key = key;
	w->addr = addr;
	w->len = len;
	*mr = w;
	return 0;
}

int pm_mr_register(pm_context_t *ctx, void *addr, size_t len, pm_mr_t **mr)
{
	pm_call_enter(ctx);
	int ret = mr_register_call(ctx, addr, len, 0, mr);

	pm_call_exit(ctx);
	return ret;
}

int pm_mr_register_flags(pm_context_t *ctx, void *addr, size_t len, unsigned flags,
			 pm_mr_t **mr)
{
	pm_call_enter(ctx);
	int ret = mr_register_call(ctx, addr, len, flags, mr);

	pm_call_exit(ctx);
	return ret;
}

static inline int mr_deregister_call(pm_context_t *ctx, pm_mr_t *mr)
{
	if (!mr || mr < ctx->windows || mr >= ctx->windows + PM_MAX_WINDOWS || !mr->key)
		return -EINVAL;
	ctx->dev->ops->expose(ctx->dev, PM_WINDOW_IDX(mr->key), 0, NULL, 0);
	regcache_release(&ctx->regcache, mr->pin);
	memset(mr, 0, sizeof(*mr));
	return 0;
}

int pm_mr_deregister(pm_context_t *ctx, pm_mr_t *mr)
{
	pm_call_enter(ctx);
	int ret = mr_deregister_call(ctx, mr);

	pm_call_exit(ctx);
	return ret;
}

uint64_t pm_mr_key(const pm_mr_t *mr)
{
	return mr ? mr->key : 0;
}

static inline int rma_call(pm_context_t *ctx, int peer, bool write, void *local, size_t len,
			   uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	if (bad_peer(ctx, peer) || !op || (!local && len))
		return -EINVAL;
	if (ctx->quiesced)
		return -EAGAIN;
	op->status = 1;
	op->peer = peer;
	if (len == 0) {
		op->status = 0;
		return 0;
	}

	struct regcache_entry *pin;
	int err = regcache_acquire(&ctx->regcache, local, len, &pin);

	if (err)
		return err;
	err = ctx->dev->ops->rma(ctx->dev, peer, write, local, len, rkey, roffset, op);
	/* Devices that complete asynchronously will release at completion;
	 * today every transfer has finished here. */
	regcache_release(&ctx->regcache, pin);
	if (err) {
		op->status = err;
		return err;
	}
	if (write)
		ctx->stats->rma_writes++;
	else
		ctx->stats->rma_reads++;
	ctx->stats->rma_bytes += len;
	return 0;
}

int pm_write(pm_context_t *ctx, int peer, const void *src, size_t len,
	     uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	pm_call_enter(ctx);
	int ret = rma_call(ctx, peer, true, (void *)src, len, rkey, roffset, op);

	pm_call_exit(ctx);
	return ret;
}

int pm_read(pm_context_t *ctx, int peer, void *dst, size_t len,
	    uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	pm_call_enter(ctx);
	int ret = rma_call(ctx, peer, false, dst, len, rkey, roffset, op);

	pm_call_exit(ctx);
	return ret;
}

static inline int atomic_call(pm_context_t *ctx, int peer, uint32_t aop, uint64_t operand,
			      uint64_t compare, void *result, uint64_t rkey,
			      uint64_t roffset, struct pm_op *op)
{
	if (bad_peer(ctx, peer) || !op || !pm_atomic_op_valid(aop))
		return -EINVAL;
	if (ctx->quiesced)
		return -EAGAIN;
	op->status = 1;
	op->peer = peer;

	int err = ctx->dev->ops->atomic(ctx->dev, peer, aop, operand, compare, result, rkey,
					roffset, op);

	if (err)
		op->status = err;
	return err;
}

int pm_atomic(pm_context_t *ctx, int peer, unsigned aop, uint64_t operand, uint64_t compare,
	      void *result, uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	pm_call_enter(ctx);
	int ret = atomic_call(ctx, peer, (uint32_t)aop, operand, compare, result, rkey, roffset,
			      op);

	pm_call_exit(ctx);
	return ret;
}

static inline int test_call(pm_context_t *ctx, struct pm_op *op)
{
	if (!op)
		return -EINVAL;
	if (op->status != 1)
		return 1;
	return ctx->dev->ops->test(ctx->dev, op);
}

int pm_test(pm_context_t *ctx, struct pm_op *op)
{
	pm_call_enter(ctx);
	int ret = test_call(ctx, op);

	pm_call_exit(ctx);
	return ret;
}

/* ---- network preemption ---- */

static inline int quiesce_call(pm_context_t *ctx)
{
	if (ctx->quiesced)
		return 0;

	uint64_t start = pm_now_ns();

	ctx->quiesced = true;
	int err = ctx->dev->ops->drain(ctx->dev);

	if (err) {
		ctx->quiesced = false;
		return err;
	}
	ctx->stats->quiesces++;
	ctx->stats->quiesce_ns += pm_now_ns() - start;
	atomic_store(&ctx->page->state, PM_STATS_QUIESCED);
	return 0;
}

int pm_quiesce(pm_context_t *ctx)
{
	pm_call_enter(ctx);
	int ret = quiesce_call(ctx);

	pm_call_exit(ctx);
	return ret;
}

static inline int resume_call(pm_context_t *ctx)
{
	if (!ctx->quiesced)
		return 0;
	ctx->quiesced = false;
	atomic_store(&ctx->page->state, PM_STATS_OPEN);
	return 0;
}

int pm_resume(pm_context_t *ctx)
{
	pm_call_enter(ctx);
	int ret = resume_call(ctx);

	pm_call_exit(ctx);
	return ret;
}

int pm_stats_get(const pm_context_t *ctx, struct pm_stats *stats)
{
	if (!stats)
		return -EINVAL;
	*stats = *ctx->stats;
	return 0;
}
