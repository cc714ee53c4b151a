/* SPDX-License-Identifier: MIT */
/*
 * boot_singleton.c - a job of one process, started without any launcher.
 * The key-value store holds only this process's own values.
 */
#include "pm_internal.h"
#include "util/random.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SINGLETON_KEYS 8

struct singleton_kv {
	char key[64];
	void *val;
	size_t len;
};

struct singleton {
	struct singleton_kv kv[SINGLETON_KEYS];
	int n;
};

static int singleton_put(struct pm_boot *b, const char *key, const void *val, size_t len)
{
	struct singleton *s = b->priv;

	if (s->n == SINGLETON_KEYS || strlen(key) >= sizeof(s->kv[0].key))
		return -ENOSPC;
	void *copy = malloc(len ? len : 1);

	if (!copy)
		return -ENOMEM;
	memcpy(copy, val, len);
	snprintf(s->kv[s->n].key, sizeof(s->kv[0].key), "%s", key);
	s->kv[s->n].val = copy;
	s->kv[s->n].len = len;
	s->n++;
	return 0;
}

static int singleton_fence(struct pm_boot *b)
{
	(void)b;
	return 0;
}

static int singleton_get(struct pm_boot *b, int rank, const char *key, void *val, size_t *len)
{
	struct singleton *s = b->priv;

	if (rank != 0)
		return -EINVAL;
	for (int i = s->n; i-- > 0;) {
		if (strcmp(s->kv[i].key, key) == 0) {
			memcpy(val, s->kv[i].val, s->kv[i].len < *len ? s->kv[i].len : *len);
			*len = s->kv[i].len;
			return 0;
		}
	}
	return -ENOENT;
}

static void singleton_fini(struct pm_boot *b)
{
	struct singleton *s = b->priv;

	for (int i = 0; s && i < s->n; i++)
		free(s->kv[i].val);
	free(s);
	b->priv = NULL;
}

static const struct pm_boot_ops singleton_ops = {
	.name = "singleton",
	.put = singleton_put,
	.fence = singleton_fence,
	.get = singleton_get,
	.fini = singleton_fini,
};

int pm_boot_open_singleton(struct pm_boot *b)
{
	struct timespec now;

	b->priv = calloc(1, sizeof(struct singleton));
	b->local_ranks = calloc(1, sizeof(int));
	if (!b->priv || !b->local_ranks) {
		free(b->priv);
		free(b->local_ranks);
		return -ENOMEM;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	/* Unique per process and start, so shared objects never collide. */
	snprintf(b->job, sizeof(b->job), "singleton.%d.%lld", (int)getpid(),
		 (long long)now.tv_sec * 1000000000ll + now.tv_nsec);
	int err = pm_random_u64(&b->jobkey);

	if (err) {
		free(b->priv);
		free(b->local_ranks);
		b->priv = NULL;
		b->local_ranks = NULL;
		return err;
	}
	b->rank = 0;
	b->size = 1;
	b->nlocal = 1;
	b->local_ranks[0] = 0;
	b->ops = &singleton_ops;
	return 0;
}
