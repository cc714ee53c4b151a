/* SPDX-License-Identifier: MIT */
/*
 * test_regcache.c - the registration (pin-down) cache (pm/src/regcache.[ch]).
 *
 * The device's registration is a fake that records every call and hands
 * out numbered handles, so the test sees exactly what was registered and
 * deregistered.  The cache never touches the memory, so addresses are
 * plain numbers.
 */
#include "check.h"
#include "core/regcache.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIVE (1u << 20)

struct fake {
	uint64_t regs, deregs;
	uint64_t next_handle;
	int fail_next;                  /* errno to return from the next reg */
	/* Live registrations by handle number: range, and whether alive. */
	bool *live;                     /* by handle number, MAX_LIVE of them */
	uintptr_t last_start;
	size_t last_len;
};

static int fake_reg(void *arg, uintptr_t start, size_t len, void **handle)
{
	struct fake *f = arg;

	if (f->fail_next) {
		int err = f->fail_next;

		f->fail_next = 0;
		return -err;
	}
	CHECK(f->next_handle + 1 < MAX_LIVE);
	uint64_t h = ++f->next_handle;

	f->regs++;
	f->live[h] = true;
	f->last_start = start;
	f->last_len = len;
	*handle = (void *)(uintptr_t)h;
	return 0;
}

static void fake_dereg(void *arg, void *handle)
{
	struct fake *f = arg;
	uintptr_t h = (uintptr_t)handle;

	CHECK_MSG(h > 0 && h <= f->next_handle, "dereg of unknown handle %zu", (size_t)h);
	CHECK_MSG(f->live[h], "handle %zu deregistered twice", (size_t)h);
	f->live[h] = false;
	f->deregs++;
}

static void fake_init(struct fake *f)
{
	memset(f, 0, sizeof(*f));
	f->live = calloc(MAX_LIVE, sizeof(*f->live));
	CHECK(f->live);
}

static void fake_fini(struct fake *f)
{
	free(f->live);
	f->live = NULL;
}

static const struct regcache_ops fake_ops = { .reg = fake_reg, .dereg = fake_dereg };

static uintptr_t P;     /* the page size */

struct counters {
	uint64_t hits, misses, evictions;
};

static void cache_new(struct regcache *rc, struct fake *f, struct counters *c,
		      uint32_t cap)
{
	fake_init(f);
	memset(c, 0, sizeof(*c));
	struct regcache_counters cnt = { &c->hits, &c->misses, &c->evictions };

	CHECK_OK(regcache_init(rc, cap, &fake_ops, f, &cnt));
}

static const void *A(uintptr_t x)
{
	return (const void *)x;
}

static struct regcache_entry *acquire(struct regcache *rc, uintptr_t addr, size_t len)
{
	struct regcache_entry *e = NULL;

	CHECK_OK(regcache_acquire(rc, A(addr), len, &e));
	CHECK(e);
	/* Whatever came back covers the buffer, on page boundaries. */
	CHECK_U64(e->start, <=, addr);
	CHECK_U64(e->end, >=, addr + len);
	CHECK_EQ(e->start % P, 0);
	CHECK_EQ(e->end % P, 0);
	CHECK(e->refs >= 1);
	return e;
}

static uintptr_t handle_of(const struct regcache_entry *e)
{
	return (uintptr_t)e->handle;
}

static void test_init(void)
{
	struct regcache rc;
	struct fake f;
	struct regcache_ops no_dereg = { .reg = fake_reg };

	CHECK_ERR(regcache_init(&rc, 0, &fake_ops, &f, NULL), -EINVAL);
	CHECK_ERR(regcache_init(&rc, 4, NULL, &f, NULL), -EINVAL);
	CHECK_ERR(regcache_init(&rc, 4, &no_dereg, &f, NULL), -EINVAL);
	/* Without counters of its own, the cache counts privately. */
	fake_init(&f);
	CHECK_OK(regcache_init(&rc, 4, &fake_ops, &f, NULL));
	struct regcache_entry *e = acquire(&rc, 10 * P, 10);

	regcache_release(&rc, e);
	e = acquire(&rc, 10 * P + 20, 10);
	regcache_release(&rc, e);
	CHECK_EQ(*rc.cnt.hits, 1);
	CHECK_EQ(*rc.cnt.misses, 1);
	regcache_fini(&rc);
	CHECK_EQ(f.regs, 1);
	CHECK_EQ(f.deregs, 1);
	fake_fini(&f);
}

static void test_hit_miss_alignment(void)
{
	struct regcache rc;
	struct fake f;
	struct counters c;

	cache_new(&rc, &f, &c, 16);
	CHECK_ERR(regcache_acquire(&rc, A(100 * P), 0, &(struct regcache_entry *){ 0 }),
		  -EINVAL);
	CHECK_ERR(regcache_acquire(&rc, A(UINTPTR_MAX - 10), 100,
				   &(struct regcache_entry *){ 0 }), -EINVAL);
	CHECK_EQ(f.regs, 0);

	/* A buffer inside one page: the whole page is registered. */
	struct regcache_entry *e1 = acquire(&rc, 100 * P + 123, 200);

	CHECK_EQ(c.misses, 1);
	CHECK_EQ(c.hits, 0);
	CHECK_EQ(f.regs, 1);
	CHECK_EQ(f.last_start, 100 * P);
	CHECK_EQ(f.last_len, P);
	CHECK_EQ(e1->refs, 1);

	/* A buffer straddling a page boundary: both pages. */
	struct regcache_entry *e2 = acquire(&rc, 200 * P - 1, 2);

	CHECK_EQ(f.last_start, 199 * P);
	CHECK_EQ(f.last_len, 2 * P);
	CHECK(e2 != e1);
	CHECK_EQ(c.misses, 2);

	/* Later buffers inside a registration hit it, however placed. */
	struct regcache_entry *h = acquire(&rc, 100 * P, P);

	CHECK(h == e1);
	CHECK_EQ(e1->refs, 2);
	h = acquire(&rc, 100 * P + P - 1, 1);
	CHECK(h == e1);
	h = acquire(&rc, 199 * P, 2 * P);
	CHECK(h == e2);
	CHECK_EQ(c.hits, 3);
	CHECK_EQ(c.misses, 2);
	CHECK_EQ(f.regs, 2);

	/* One byte past a registration is a miss, before it too. */
	acquire(&rc, 100 * P + P - 1, 2);
	CHECK_EQ(c.misses, 3);
	CHECK_EQ(f.last_start, 100 * P);
	CHECK_EQ(f.last_len, 2 * P);
	acquire(&rc, 100 * P - 1, 1);
	CHECK_EQ(c.misses, 4);
	CHECK_EQ(f.last_start, 99 * P);
	CHECK_EQ(f.last_len, P);

	/* The larger registration made for [100P, 102P) now serves a
	 * buffer that the first one could not. */
	uint64_t regs = f.regs;

	h = acquire(&rc, 101 * P + 5, P - 10);
	CHECK_EQ(f.regs, regs);
	CHECK_EQ(h->start, 100 * P);
	CHECK_EQ(h->end, 102 * P);

	/* Releasing keeps the entry; reacquiring hits without registering. */
	regcache_release(&rc, e1);
	regcache_release(&rc, e1);
	regcache_release(&rc, e1);
	CHECK_EQ(e1->refs, 0);
	regcache_release(&rc, e1);      /* one too many: stays at zero */
	CHECK_EQ(e1->refs, 0);
	regcache_release(&rc, NULL);
	h = acquire(&rc, 100 * P + 7, 7);
	CHECK_EQ(f.regs, regs);
	CHECK_EQ(f.deregs, 0);

	regcache_fini(&rc);
	CHECK_EQ(f.deregs, f.regs);
	fake_fini(&f);
}

/* Overlapping registrations: the one that covers the buffer is found. */
static void test_overlaps(void)
{
	struct regcache rc;
	struct fake f;
	struct counters c;

	cache_new(&rc, &f, &c, 16);
	struct regcache_entry *a = acquire(&rc, 10 * P, 2 * P);         /* [10,12) */
	struct regcache_entry *b = acquire(&rc, 11 * P, 3 * P);         /* [11,14) */
	struct regcache_entry *d = acquire(&rc, 8 * P, 8 * P);          /* [8,16) */

	CHECK_EQ(f.regs, 3);
	CHECK(acquire(&rc, 10 * P + 1, P) != NULL);
	CHECK(acquire(&rc, 12 * P, 2 * P) != NULL);
	CHECK(acquire(&rc, 9 * P, 6 * P) == d);
	CHECK(acquire(&rc, 15 * P, P) == d);
	CHECK_EQ(f.regs, 3);
	CHECK_EQ(c.hits, 4);
	(void)a;
	(void)b;
	regcache_fini(&rc);
	CHECK_EQ(f.deregs, 3);
	fake_fini(&f);
}

static void test_lru_eviction(void)
{
	struct regcache rc;
	struct fake f;
	struct counters c;
	struct regcache_entry *e[5];
	uintptr_t handle[5];

	cache_new(&rc, &f, &c, 4);
	for (int i = 0; i < 4; i++) {
		e[i] = acquire(&rc, (uintptr_t)(i + 1) * 100 * P, P);
		handle[i] = handle_of(e[i]);
		regcache_release(&rc, e[i]);
	}
	CHECK_EQ(f.regs, 4);
	/* Touch 0, 1 and 3: entry 2 becomes the least recently used. */
	regcache_release(&rc, acquire(&rc, 100 * P, 1));
	regcache_release(&rc, acquire(&rc, 200 * P, 1));
	regcache_release(&rc, acquire(&rc, 400 * P, 1));
	CHECK_EQ(c.hits, 3);
	CHECK_EQ(c.evictions, 0);

	/* A fifth, new buffer: entry 2 goes, and only it. */
	e[4] = acquire(&rc, 900 * P, P);
	handle[4] = handle_of(e[4]);
	CHECK_EQ(c.evictions, 1);
	CHECK_EQ(f.deregs, 1);
	CHECK(!f.live[handle[2]]);
	CHECK(f.live[handle[0]] && f.live[handle[1]] && f.live[handle[3]]);
	regcache_release(&rc, e[4]);

	/* Now 0 is the oldest; entry 2's buffer misses and evicts it. */
	uint64_t misses = c.misses;

	e[2] = acquire(&rc, 300 * P, 1);
	CHECK_EQ(c.misses, misses + 1);
	CHECK_EQ(c.evictions, 2);
	CHECK(!f.live[handle[0]]);
	regcache_release(&rc, e[2]);

	/* An entry in use is never the victim, even when it is the oldest. */
	struct regcache_entry *busy = acquire(&rc, 200 * P, 1);    /* entry 1 */

	CHECK_EQ(busy->refs, 1);
	regcache_release(&rc, acquire(&rc, 400 * P, 1));
	regcache_release(&rc, acquire(&rc, 900 * P, 1));
	regcache_release(&rc, acquire(&rc, 300 * P, 1));
	/* Entry 1 is the oldest now but busy: 400P (entry 3) goes. */
	acquire(&rc, 1000 * P, 1);
	CHECK(f.live[handle_of(busy)]);
	CHECK(!f.live[handle[3]]);
	CHECK_EQ(c.evictions, 3);

	regcache_fini(&rc);
	CHECK_EQ(f.deregs, f.regs);
	fake_fini(&f);
}

static void test_full_of_busy(void)
{
	struct regcache rc;
	struct fake f;
	struct counters c;
	struct regcache_entry *e[3], *x;

	cache_new(&rc, &f, &c, 3);
	for (int i = 0; i < 3; i++)
		e[i] = acquire(&rc, (uintptr_t)(i + 1) * 10 * P, P);
	CHECK_ERR(regcache_acquire(&rc, A(100 * P), 1, &x), -ENOSPC);
	CHECK_ERR(regcache_acquire(&rc, A(100 * P), 1, &x), -ENOSPC);
	CHECK_EQ(f.regs, 3);
	CHECK_EQ(f.deregs, 0);
	CHECK_EQ(c.evictions, 0);
	/* Hits still work when full. */
	CHECK(acquire(&rc, 20 * P + 1, 1) == e[1]);
	regcache_release(&rc, e[1]);
	/* One freed: the next miss evicts it. */
	regcache_release(&rc, e[1]);
	x = acquire(&rc, 100 * P, 1);
	CHECK_EQ(c.evictions, 1);
	CHECK_EQ(f.deregs, 1);
	CHECK_EQ(x->start, 100 * P);
	/* And the buffer that lived there misses now. */
	CHECK_ERR(regcache_acquire(&rc, A(20 * P), 1, &x), -ENOSPC);

	/* A failed registration leaves no entry behind. */
	regcache_release(&rc, e[0]);
	f.fail_next = EIO;
	CHECK_ERR(regcache_acquire(&rc, A(500 * P), 1, &x), -EIO);
	CHECK_EQ(rc.n, 2);
	x = acquire(&rc, 500 * P, 1);
	CHECK_EQ(rc.n, 3);
	regcache_fini(&rc);
	CHECK_EQ(f.deregs, f.regs);
	fake_fini(&f);
}

static void test_invalidate(void)
{
	struct regcache rc;
	struct fake f;
	struct counters c;

	cache_new(&rc, &f, &c, 8);
	struct regcache_entry *a = acquire(&rc, 10 * P, P);     /* [10,11) idle */
	struct regcache_entry *b = acquire(&rc, 11 * P, 2 * P); /* [11,13) busy */
	struct regcache_entry *d = acquire(&rc, 13 * P, P);     /* [13,14) idle */
	struct regcache_entry *g = acquire(&rc, 20 * P, P);     /* [20,21) idle */
	uintptr_t ha = handle_of(a), hb = handle_of(b), hd = handle_of(d), hg = handle_of(g);

	regcache_release(&rc, a);
	regcache_release(&rc, d);
	regcache_release(&rc, g);

	/* [10.5P, 13.5P) overlaps a, b and d; b is in use and stays. */
	regcache_invalidate(&rc, A(10 * P + P / 2), 3 * P);
	CHECK(!f.live[ha]);
	CHECK(f.live[hb]);
	CHECK(!f.live[hd]);
	CHECK(f.live[hg]);
	CHECK_EQ(f.deregs, 2);
	CHECK_EQ(rc.n, 2);
	CHECK_EQ(c.evictions, 0);       /* invalidation is not eviction */

	/* Touching ranges that end where an entry starts do not overlap. */
	regcache_invalidate(&rc, A(19 * P), P);
	regcache_invalidate(&rc, A(21 * P), P);
	CHECK(f.live[hg]);

	/* The invalidated buffers miss again; the survivors hit. */
	uint64_t misses = c.misses;

	regcache_release(&rc, acquire(&rc, 10 * P, 1));
	CHECK_EQ(c.misses, misses + 1);
	regcache_release(&rc, acquire(&rc, 20 * P, 1));
	regcache_release(&rc, acquire(&rc, 11 * P, 1));
	CHECK_EQ(c.misses, misses + 1);

	/* Once idle, b goes as well. */
	regcache_release(&rc, b);
	regcache_invalidate(&rc, A(0), 100 * P);
	CHECK_EQ(rc.n, 0);
	CHECK_EQ(f.deregs, f.regs);
	regcache_fini(&rc);
	CHECK_EQ(f.deregs, f.regs);
	fake_fini(&f);
}

/*
 * Random acquire/release/invalidate against a model of what is in use:
 * entries cover their buffers, busy registrations are never dropped,
 * every registration is dropped exactly once, the sorted index stays
 * sorted, and the counters add up.
 */
static void test_random(void)
{
	struct regcache rc;
	struct fake f;
	struct counters c;
	struct regcache_entry *held[64];
	uintptr_t held_handle[64];
	int nheld = 0;
	uint64_t rng = 77, acquires = 0, enospc = 0;

	cache_new(&rc, &f, &c, 8);
	for (int step = 0; step < 200000; step++) {
		uint64_t x = check_rand(&rng);

		if (x % 8 < 3 && nheld < 64) {
			uintptr_t addr = (uintptr_t)(1000 + (x >> 8) % 64) * P +
					 (uintptr_t)((x >> 20) % P);
			size_t len = 1 + (size_t)((x >> 32) % (3 * P));
			struct regcache_entry *e = NULL;
			int err = regcache_acquire(&rc, A(addr), len, &e);

			if (err == -ENOSPC) {
				enospc++;
				/* Only when every entry is in use. */
				CHECK_EQ(rc.n, 8);
				for (uint32_t i = 0; i < rc.n; i++)
					CHECK(rc.sorted[i]->refs > 0);
				continue;
			}
			CHECK_OK(err);
			acquires++;
			CHECK_U64(e->start, <=, addr);
			CHECK_U64(e->end, >=, addr + len);
			held[nheld] = e;
			held_handle[nheld] = handle_of(e);
			nheld++;
		} else if (x % 8 < 6 && nheld > 0) {
			int k = (int)((x >> 8) % (uint64_t)nheld);

			regcache_release(&rc, held[k]);
			held[k] = held[nheld - 1];
			held_handle[k] = held_handle[nheld - 1];
			nheld--;
		} else {
			uintptr_t addr = (uintptr_t)(1000 + (x >> 8) % 64) * P;

			regcache_invalidate(&rc, A(addr), (size_t)((x >> 20) % 4 + 1) * P);
		}
		/* Invariants. */
		for (int k = 0; k < nheld; k++) {
			CHECK_MSG(f.live[held_handle[k]], "step %d: a registration in use "
				  "was dropped", step);
			CHECK(handle_of(held[k]) == held_handle[k]);
		}
		CHECK_U64(rc.n, <=, 8);
		CHECK_EQ(f.regs - f.deregs, rc.n);
		for (uint32_t i = 1; i < rc.n; i++)
			CHECK_U64(rc.sorted[i - 1]->start, <=, rc.sorted[i]->start);
	}
	CHECK_EQ(c.hits + c.misses, acquires + enospc);
	CHECK(c.hits > 1000);
	CHECK(c.evictions > 100);
	CHECK(enospc > 0);
	printf("random: %llu acquires, %llu hits, %llu misses, %llu evictions, %llu ENOSPC\n",
	       (unsigned long long)acquires, (unsigned long long)c.hits,
	       (unsigned long long)c.misses, (unsigned long long)c.evictions,
	       (unsigned long long)enospc);
	while (nheld)
		regcache_release(&rc, held[--nheld]);
	regcache_fini(&rc);
	CHECK_EQ(f.deregs, f.regs);
	fake_fini(&f);
}

int main(void)
{
	P = (uintptr_t)sysconf(_SC_PAGESIZE);
	CHECK(P >= 4096 && (P & (P - 1)) == 0);
	test_init();
	test_hit_miss_alignment();
	test_overlaps();
	test_lru_eviction();
	test_full_of_busy();
	test_invalidate();
	test_random();
	printf("regcache tests passed\n");
	return 0;
}
