/* SPDX-License-Identifier: MIT */
/*
 * device.c - devices as the core sees them: found by name in the device
 * table (src/devices.c, filled in by the devices), and opened over the
 * bootstrap.  The core names no device.
 */
#include "pm_internal.h"
#include "util/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const struct pm_device_ops *pm_device_find(const char *name)
{
	for (const struct pm_device_ops *const *d = pm_devices; *d; d++)
		if (strcmp((*d)->name, name) == 0)
			return *d;
	return NULL;
}

static void unknown_device(const struct pm_context *ctx, const char *name)
{
	char known[128] = "";
	size_t n = 0;

	for (const struct pm_device_ops *const *d = pm_devices; *d && n < sizeof(known); d++)
		n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s", n ? ", " : "",
				      (*d)->name);
	pm_log(ctx->rank, "unknown device '%s' (known: %s)", name, known);
}

int pm_device_open(struct pm_context *ctx, const char *name)
{
	const struct pm_device_ops *ops = pm_device_find(name);
	struct pm_boot *b = &ctx->boot;
	int err;

	if (!ops) {
		unknown_device(ctx, name);
		return -ENODEV;
	}
	ctx->dev = ops->create(ctx, 0);
	if (!ctx->dev)
		return -ENOMEM;

	/* Every process runs the same steps, so the fences match up even when
	 * one fails: a failing process still joins them before reporting. */
	err = ctx->dev->ops->setup(ctx->dev, b);
	int ferr = b->ops->fence(b);

	if (!err && !ferr)
		err = ctx->dev->ops->connect(ctx->dev, b);
	int ferr2 = b->ops->fence(b);

	if (ferr || ferr2) {
		pm_log(ctx->rank, "bootstrap fence failed: %s", strerror(ferr ? -ferr : -ferr2));
		return -EPROTO;
	}
	/* A peer that failed its setup published no address: what we see is
	 * a failed lookup, which is the bootstrap's failure as far as we know. */
	if (err == -ENOENT || err == -ETIMEDOUT)
		return -EPROTO;
	if (err)
		return err;
	ctx->dev->ops->ready(ctx->dev);
	for (int peer = 0; peer < ctx->size; peer++) {
		if (!ctx->dev->ops->device_of(ctx->dev, peer)) {
			pm_log(ctx->rank, "no device of '%s' reaches rank %d (another node?)",
			       name, peer);
			return -ENETUNREACH;
		}
	}
	return 0;
}
