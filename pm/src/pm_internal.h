/* SPDX-License-Identifier: MIT */
/*
 * pm_internal.h - what the pieces of libpm share: the context, the device
 * interface and the bootstrap interface.  Nothing here is exported.
 */
#ifndef PM_INTERNAL_H
#define PM_INTERNAL_H

#include "pm.h"
#include "regcache.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PM_JOB_MAX        256
#define PM_MAX_WINDOWS    256     /* exposed regions per context */
#define PM_WINDOW_IDX(key) ((uint32_t)((key) & 0xffffu))

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
	uint64_t jobkey;        /* hash of job: names shared objects, tags packets */
	int nlocal;             /* processes of the job on this node */
	int *local_ranks;       /* sorted, nlocal entries, owned */
	const struct pm_boot_ops *ops;
	void *priv;
};

/* PMIx when a launcher is present, otherwise a singleton. */
int pm_boot_open(struct pm_boot *b);
int pm_boot_open_pmix(struct pm_boot *b);
int pm_boot_open_singleton(struct pm_boot *b);
void pm_boot_close(struct pm_boot *b);
uint64_t pm_hash64(const char *s);

/* ---- devices ---- */

struct pm_device;

struct pm_device_ops {
	const char *name;
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
	int (*peer_alive)(struct pm_device *dev, int peer);

	/* Make [addr, addr+len) reachable by peers under key in window slot
	 * idx; key 0 hides the slot. */
	int (*expose)(struct pm_device *dev, uint32_t idx, uint64_t key, void *addr,
		      size_t len);
	int (*rma)(struct pm_device *dev, int peer, bool write, void *local,
		   size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op);
	int (*test)(struct pm_device *dev, struct pm_op *op);

	/* Block until nothing sent is in flight. */
	int (*drain)(struct pm_device *dev);
};

struct pm_device {
	const struct pm_device_ops *ops;
	struct pm_context *ctx;
};

struct pm_device *pm_shm_create(struct pm_context *ctx);
struct pm_device *pm_composite_create(struct pm_context *ctx);
/* remote_only: serve only peers on other nodes (under composite). */
struct pm_device *pm_udp_create(struct pm_context *ctx, bool remote_only);
/* The fuzzer's and unit tests' way in: a udp device with no sockets, one
 * path per rank (127.0.0.1+r:20000+r), fed datagrams directly. */
struct pm_device *pm_udp_testing_create(struct pm_context *ctx, uint64_t jobkey, uint32_t me,
					uint32_t size);
void pm_udp_testing_input(struct pm_device *dev, uint32_t from, const uint8_t *buf, size_t len);

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
	struct pm_boot boot;
	struct pm_device *dev;
	struct pm_stats_page *page;     /* shared, read by pminfo and scored */
	struct pm_stats *stats;         /* &page->stats */
	char stats_path[256];
	uint32_t spin_us;
	uint32_t shm_ring_kib;
	uint32_t udp_ring_kib;
	uint32_t udp_window;
	bool quiesced;
	struct regcache regcache;
	uint64_t window_gen;
	struct pm_mr windows[PM_MAX_WINDOWS];
};

/* Diagnostics on stderr, prefixed "pm[rank]:", unless PM_VERBOSE=0. */
void pm_log(const struct pm_context *ctx, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

uint64_t pm_now_ns(void);

#endif /* PM_INTERNAL_H */
