/* SPDX-License-Identifier: MIT */
/*
 * regcache.h - the registration (pin-down) cache of seed 003.
 *
 * Registering memory with a device can be expensive (pinning pages, telling
 * the NIC).  The cache keeps registrations after their last use and hands
 * them out again when a later buffer lies inside one, so a program that
 * reuses its buffers pays for registration once.  When the cache is full the
 * least recently used idle registration is evicted.
 *
 * Registrations are page-aligned.  Entries live in a fixed pool allocated
 * once: no allocation on the fast path.
 */
#ifndef PM_REGCACHE_H
#define PM_REGCACHE_H

#include <stddef.h>
#include <stdint.h>

struct regcache_entry {
	uintptr_t start, end;   /* [start, end), page aligned */
	uint32_t refs;
	uint64_t last_use;
	void *handle;           /* the device's registration */
};

struct regcache_ops {
	/* Register [start, start+len); store the device's handle. */
	int (*reg)(void *arg, uintptr_t start, size_t len, void **handle);
	void (*dereg)(void *arg, void *handle);
};

struct regcache_counters {
	uint64_t *hits, *misses, *evictions;   /* may point into pm_stats */
};

struct regcache {
	struct regcache_entry *pool;
	struct regcache_entry **sorted;         /* by start address */
	uint32_t n, cap;
	uint64_t clock;
	uintptr_t page;
	struct regcache_ops ops;
	void *arg;
	struct regcache_counters cnt;
	uint64_t own_counters[3];
};

int regcache_init(struct regcache *rc, uint32_t capacity,
		  const struct regcache_ops *ops, void *arg,
		  const struct regcache_counters *cnt);
void regcache_fini(struct regcache *rc);

/*
 * A registration covering [addr, addr+len), taken from the cache or made.
 * -ENOSPC when the cache is full of registrations in use.
 */
int regcache_acquire(struct regcache *rc, const void *addr, size_t len,
		     struct regcache_entry **entry);
void regcache_release(struct regcache *rc, struct regcache_entry *entry);

/* Drop idle registrations overlapping [addr, addr+len) (memory going away). */
void regcache_invalidate(struct regcache *rc, const void *addr, size_t len);

#endif /* PM_REGCACHE_H */
