/* SPDX-License-Identifier: MIT */
/* regcache.c - the registration (pin-down) cache (see regcache.h). */
#include "regcache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int regcache_init(struct regcache *rc, uint32_t capacity,
		  const struct regcache_ops *ops, void *arg,
		  const struct regcache_counters *cnt)
{
	memset(rc, 0, sizeof(*rc));
	if (capacity == 0 || !ops || !ops->reg || !ops->dereg)
		return -EINVAL;
	rc->pool = calloc(capacity, sizeof(*rc->pool));
	rc->sorted = calloc(capacity, sizeof(*rc->sorted));
	if (!rc->pool || !rc->sorted) {
		free(rc->pool);
		free(rc->sorted);
		return -ENOMEM;
	}
	rc->cap = capacity;
	rc->ops = *ops;
	rc->arg = arg;
	rc->page = (uintptr_t)sysconf(_SC_PAGESIZE);
	if (cnt && cnt->hits && cnt->misses && cnt->evictions) {
		rc->cnt = *cnt;
	} else {
		rc->cnt.hits = &rc->own_counters[0];
		rc->cnt.misses = &rc->own_counters[1];
		rc->cnt.evictions = &rc->own_counters[2];
	}
	return 0;
}

void regcache_fini(struct regcache *rc)
{
	for (uint32_t i = 0; i < rc->n; i++)
		rc->ops.dereg(rc->arg, rc->sorted[i]->handle);
	free(rc->pool);
	free(rc->sorted);
	memset(rc, 0, sizeof(*rc));
}

/* Index of the first entry whose start is greater than addr. */
static uint32_t upper_bound(const struct regcache *rc, uintptr_t addr)
{
	uint32_t lo = 0, hi = rc->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (rc->sorted[mid]->start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static void remove_at(struct regcache *rc, uint32_t i)
{
	struct regcache_entry *e = rc->sorted[i];

	rc->ops.dereg(rc->arg, e->handle);
	memmove(&rc->sorted[i], &rc->sorted[i + 1],
		(rc->n - i - 1) * sizeof(*rc->sorted));
	rc->n--;
	memset(e, 0, sizeof(*e));
}

static struct regcache_entry *free_slot(struct regcache *rc)
{
	for (uint32_t i = 0; i < rc->cap; i++)
		if (rc->pool[i].end == 0)
			return &rc->pool[i];
	return NULL;
}

/* Make room by evicting the least recently used idle entry. */
static int evict_one(struct regcache *rc)
{
	uint32_t victim = UINT32_MAX;

	for (uint32_t i = 0; i < rc->n; i++) {
		const struct regcache_entry *e = rc->sorted[i];

		if (e->refs == 0 &&
		    (victim == UINT32_MAX || e->last_use < rc->sorted[victim]->last_use))
			victim = i;
	}
	if (victim == UINT32_MAX)
		return -ENOSPC;
	remove_at(rc, victim);
	(*rc->cnt.evictions)++;
	return 0;
}

int regcache_acquire(struct regcache *rc, const void *addr, size_t len,
		     struct regcache_entry **entry)
{
	uintptr_t a = (uintptr_t)addr;

	if (len == 0 || a + len < a)
		return -EINVAL;

	uintptr_t start = a & ~(rc->page - 1);
	uintptr_t end = (a + len + rc->page - 1) & ~(rc->page - 1);

	/* Entries may overlap, so any entry starting at or before addr can
	 * cover it; the newest registrations are usually the ones reused. */
	for (uint32_t i = upper_bound(rc, a); i-- > 0;) {
		struct regcache_entry *e = rc->sorted[i];

		if (e->start <= start && e->end >= end) {
			e->refs++;
			e->last_use = ++rc->clock;
			(*rc->cnt.hits)++;
			*entry = e;
			return 0;
		}
	}

	(*rc->cnt.misses)++;
	if (rc->n == rc->cap) {
		int rc_evict = evict_one(rc);

		if (rc_evict)
			return rc_evict;
	}

	struct regcache_entry *e = free_slot(rc);
	void *handle = NULL;
	int err = rc->ops.reg(rc->arg, start, end - start, &handle);

	if (err)
		return err;
	*e = (struct regcache_entry){ .start = start, .end = end, .refs = 1,
				      .last_use = ++rc->clock, .handle = handle };

	uint32_t pos = upper_bound(rc, start);

	memmove(&rc->sorted[pos + 1], &rc->sorted[pos],
		(rc->n - pos) * sizeof(*rc->sorted));
	rc->sorted[pos] = e;
	rc->n++;
	*entry = e;
	return 0;
}

void regcache_release(struct regcache *rc, struct regcache_entry *entry)
{
	(void)rc;
	if (entry && entry->refs > 0)
		entry->refs--;
}

void regcache_invalidate(struct regcache *rc, const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, b = a + len;

	for (uint32_t i = rc->n; i-- > 0;) {
		const struct regcache_entry *e = rc->sorted[i];

		if (e->refs == 0 && e->start < b && a < e->end)
			remove_at(rc, i);
	}
}
