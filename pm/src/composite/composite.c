/* SPDX-License-Identifier: MIT */
/*
 * composite.c - PM/Composite: one context over several devices, each
 * peer routed to the device that reaches it best (shm for the same node, a
 * network device otherwise).  Seed 000, section 7.3.
 *
 * A detached context (no launcher) learns its peers one by one from
 * pm_peer_insert: each goes to the first device that reaches it (shm for
 * a process on this host, then udp), under the number the core gives.
 */
#include "composite.h"
#include "core/detached.h"
#include "util/clock.h"
#include "util/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define COMPOSITE_MAX_SUB 4
#define NO_ROUTE 0xff

struct composite_dev {
	struct pm_device base;
	struct pm_device *sub[COMPOSITE_MAX_SUB];
	int nsub;
	uint8_t *route;                 /* peer -> index into sub, or NO_ROUTE */
	int next_rx;
	/* Detached: each peer's context id and key, so that an address
	 * inserted again gets its number back whichever device serves it. */
	struct { uint32_t id; uint64_t key; } *known;
};

static inline struct composite_dev *to_comp(struct pm_device *dev)
{
	return (struct composite_dev *)dev;
}

static struct pm_device *route_of(const struct pm_device *dev, int peer)
{
	const struct composite_dev *c = (const struct composite_dev *)dev;

	if (peer < 0 || peer >= dev->ctx->size || c->route[peer] == NO_ROUTE)
		return NULL;
	return c->sub[c->route[peer]];
}

/* The device called name, from the device table, as the next one. */
static int add_sub(struct composite_dev *c, const char *name, unsigned flags)
{
	const struct pm_device_ops *ops = pm_device_find(name);

	if (!ops) {
		pm_log(c->base.ctx->rank, "composite: no device '%s' in this libpm", name);
		return -ENODEV;
	}
	c->sub[c->nsub] = ops->create(c->base.ctx, flags);
	if (!c->sub[c->nsub])
		return -ENOMEM;
	c->nsub++;
	return 0;
}

/* The device for peers on other nodes: PM_NET_DEVICE names it (udp, or
 * eth for raw Ethernet frames); udp by default. */
static const char *network_device(void)
{
	const char *net = getenv("PM_NET_DEVICE");

	return net && *net ? net : "udp";
}

static int comp_setup(struct pm_device *dev, struct pm_boot *b)
{
	struct composite_dev *c = to_comp(dev);

	bool detached = dev->ctx->detached;
	size_t peers = detached ? PM_DETACHED_MAX : (size_t)b->size;

	c->route = malloc(peers);
	if (!c->route)
		return -ENOMEM;
	memset(c->route, NO_ROUTE, peers);
	if (detached) {
		c->known = calloc(peers, sizeof(*c->known));
		if (!c->known)
			return -ENOMEM;
	}

	/* Devices in order of preference; each claims the peers it serves.
	 * The network device comes only when some peer is off this node (a
	 * detached context's peers may be anywhere), and last, because it is
	 * the one that can block on file descriptors. */
	int err = add_sub(c, "shm", 0);

	if (!err && (detached || b->nlocal < b->size))
		err = add_sub(c, network_device(), PM_DEVICE_REMOTE_ONLY);
	if (err)
		return err;
	for (int i = 0; i < c->nsub && !err; i++)
		err = c->sub[i]->ops->setup(c->sub[i], b);
	if (err)
		return err;
	/* With a blocking network device beside them, the other devices wake
	 * a sleeper through a descriptor: set that up before peers look. */
	for (int i = 0; c->nsub > 1 && i < c->nsub - 1; i++)
		if (c->sub[i]->ops->sleep_fd)
			c->sub[i]->ops->sleep_fd(c->sub[i]);
	return 0;
}

static int comp_connect(struct pm_device *dev, struct pm_boot *b)
{
	struct composite_dev *c = to_comp(dev);

	for (int i = 0; i < c->nsub; i++) {
		int err = c->sub[i]->ops->connect(c->sub[i], b);

		if (err)
			return err;
	}
	/* Peers no device serves keep NO_ROUTE; pm_open() reports them. */
	for (int peer = 0; peer < b->size; peer++)
		for (int i = 0; i < c->nsub && c->route[peer] == NO_ROUTE; i++)
			if (c->sub[i]->ops->device_of(c->sub[i], peer))
				c->route[peer] = (uint8_t)i;
	if (c->known) {         /* detached: peer 0 is itself */
		c->known[0].id = dev->ctx->detached_id;
		c->known[0].key = b->jobkey;
	}
	return 0;
}

static void comp_ready(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);

	for (int i = 0; i < c->nsub; i++)
		c->sub[i]->ops->ready(c->sub[i]);
}

static void comp_destroy(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);

	for (int i = 0; i < c->nsub; i++)
		c->sub[i]->ops->destroy(c->sub[i]);
	free(c->route);
	free(c->known);
	free(c);
}

static const char *comp_device_of(const struct pm_device *dev, int peer)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->device_of(d, peer) : NULL;
}

static size_t comp_max_message(const struct pm_device *dev, int peer)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->max_message(d, peer) : 0;
}

static int comp_send_buffer(struct pm_device *dev, int peer, size_t len, void **buf)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->send_buffer(d, peer, len, buf) : -EINVAL;
}

static int comp_send(struct pm_device *dev, int peer, size_t len)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->send(d, peer, len) : -EINVAL;
}

/* The devices in turn, starting after the one that gave the last message. */
static int recv_from_subs(struct composite_dev *c, struct pm_msg *msg, bool progress)
{
	for (int k = 0; k < c->nsub; k++) {
		int i = (c->next_rx + k) % c->nsub;

		if (pm_device_recv(c->sub[i], msg, progress) == 0) {
			c->next_rx = (i + 1) % c->nsub;
			return 0;
		}
	}
	return -EAGAIN;
}

static int comp_recv(struct pm_device *dev, struct pm_msg *msg)
{
	return recv_from_subs(to_comp(dev), msg, true);
}

static int comp_recv_queued(struct pm_device *dev, struct pm_msg *msg)
{
	return recv_from_subs(to_comp(dev), msg, false);
}

static int comp_release(struct pm_device *dev, const struct pm_msg *msg)
{
	struct pm_device *d = route_of(dev, msg->peer);

	return d ? d->ops->release(d, msg) : -EINVAL;
}

static bool comp_poll(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);
	bool ev = false;

	for (int i = 0; i < c->nsub; i++)
		ev |= c->sub[i]->ops->poll(c->sub[i]);
	return ev;
}

/* While sleeping, the blocking device waits in slices this long when some
 * other device has no file descriptor to wake it (see docs/pm/design.md,
 * "Progress"). */
#define COMPOSITE_SLICE_NS 1000000ull

static int comp_sleep(struct pm_device *dev, uint64_t deadline)
{
	struct composite_dev *c = to_comp(dev);

	if (c->nsub == 1)
		return c->sub[0]->ops->sleep(c->sub[0], deadline);

	/* The last device blocks; the others wake it through their fds. */
	struct pm_device *last = c->sub[c->nsub - 1];
	int fds[COMPOSITE_MAX_SUB];
	int nfds = 0, ready = 0, err = 0;
	bool all_fds = true;

	for (int i = 0; i < c->nsub - 1; i++) {
		int fd = c->sub[i]->ops->sleep_fd ? c->sub[i]->ops->sleep_fd(c->sub[i]) : -1;

		if (fd >= 0)
			fds[nfds++] = fd;
		else
			all_fds = false;
	}
	for (int i = 0; i < c->nsub - 1 && !ready; i++)
		if (c->sub[i]->ops->sleep_prepare)
			ready = c->sub[i]->ops->sleep_prepare(c->sub[i]);

	uint64_t now = pm_now_ns();
	uint64_t until = all_fds || deadline - now < COMPOSITE_SLICE_NS ? deadline
								       : now + COMPOSITE_SLICE_NS;

	if (ready == 0)
		err = last->ops->block(last, until, fds, nfds);
	for (int i = 0; i < c->nsub - 1; i++)
		if (c->sub[i]->ops->sleep_finish)
			c->sub[i]->ops->sleep_finish(c->sub[i]);
	return ready < 0 ? ready : err;
}

/*
 * pm_signal(): wake the device that sleeps.  Alone, that is the only one;
 * beside others, the last one blocks (comp_sleep) and the others only
 * announce their sleep (sleep_prepare, where a pending signal counts as an
 * event).  A last device without a wake op is reached through the others'
 * wake descriptors, which it polls.
 */
static void comp_wake(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);
	struct pm_device *last = c->sub[c->nsub - 1];

	if (last->ops->wake) {
		last->ops->wake(last);
		return;
	}
	for (int i = 0; i < c->nsub - 1; i++)
		if (c->sub[i]->ops->wake)
			c->sub[i]->ops->wake(c->sub[i]);
}

static int comp_peer_alive(struct pm_device *dev, int peer)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->peer_alive(d, peer) : -EINVAL;
}

static int comp_expose(struct pm_device *dev, uint32_t idx, uint64_t key, void *addr,
		       size_t len)
{
	struct composite_dev *c = to_comp(dev);

	for (int i = 0; i < c->nsub; i++) {
		int err = c->sub[i]->ops->expose(c->sub[i], idx, key, addr, len);

		if (err)
			return err;
	}
	return 0;
}

static int comp_rma(struct pm_device *dev, int peer, bool write, void *local,
		    size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->rma(d, peer, write, local, len, rkey, roffset, op) : -EINVAL;
}

static int comp_atomic(struct pm_device *dev, int peer, uint32_t aop, uint64_t operand,
		       uint64_t compare, void *result, uint64_t rkey, uint64_t roffset,
		       struct pm_op *op)
{
	struct pm_device *d = route_of(dev, peer);

	return d ? d->ops->atomic(d, peer, aop, operand, compare, result, rkey, roffset, op)
		 : -EINVAL;
}

static int comp_test(struct pm_device *dev, struct pm_op *op)
{
	struct pm_device *d = route_of(dev, op->peer);

	return d ? d->ops->test(d, op) : -EINVAL;
}

static int comp_drain(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);

	for (int i = 0; i < c->nsub; i++) {
		int err = c->sub[i]->ops->drain(c->sub[i]);

		if (err)
			return err;
	}
	return 0;
}

static int comp_drain_poll(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);
	int drained = 1;

	for (int i = 0; i < c->nsub; i++)
		drained &= c->sub[i]->ops->drain_poll(c->sub[i]);
	return drained;
}

/* The last device (the network's, when there is one) is the one with
 * something to answer; the others have nothing to do while held. */
static void comp_hold(struct pm_device *dev, uint64_t deadline)
{
	struct composite_dev *c = to_comp(dev);
	struct pm_device *last = c->sub[c->nsub - 1];

	last->ops->hold(last, deadline);
}

static void comp_resumed(struct pm_device *dev)
{
	struct composite_dev *c = to_comp(dev);

	for (int i = 0; i < c->nsub; i++)
		c->sub[i]->ops->resumed(c->sub[i]);
}

/* ---- detached contexts ---- */

/* The address is the one device's that has one (the network's); it
 * carries the pid through which shm reaches us (core/detached.h). */
static int comp_address(const struct pm_device *dev, void *buf, size_t *len)
{
	const struct composite_dev *c = (const struct composite_dev *)dev;

	for (int i = 0; i < c->nsub; i++)
		if (c->sub[i]->ops->address)
			return c->sub[i]->ops->address(c->sub[i], buf, len);
	return -ENOTSUP;
}

static int comp_insert(struct pm_device *dev, const struct pm_daddr *d, int *peer)
{
	struct composite_dev *c = to_comp(dev);
	int err = -EHOSTUNREACH;

	for (int p = 0; p < dev->ctx->size; p++) {
		if (c->known[p].id == d->id && c->known[p].key == d->key) {
			*peer = p;
			return 0;
		}
	}
	for (int i = 0; i < c->nsub && err == -EHOSTUNREACH; i++) {
		struct pm_device *sub = c->sub[i];

		err = sub->ops->insert ? sub->ops->insert(sub, d, peer) : -EHOSTUNREACH;
		if (!err && c->route[*peer] == NO_ROUTE) {
			c->route[*peer] = (uint8_t)i;
			c->known[*peer].id = d->id;
			c->known[*peer].key = d->key;
		}
	}
	return err;
}

static struct pm_device *comp_create(struct pm_context *ctx, unsigned flags)
{
	struct composite_dev *c = calloc(1, sizeof(*c));

	(void)flags;
	if (!c)
		return NULL;
	c->base.ops = &pm_composite_ops;
	c->base.ctx = ctx;
	return &c->base;
}

const struct pm_device_ops pm_composite_ops = {
	.name = "composite",
	.create = comp_create,
	.setup = comp_setup,
	.connect = comp_connect,
	.ready = comp_ready,
	.destroy = comp_destroy,
	.device_of = comp_device_of,
	.max_message = comp_max_message,
	.send_buffer = comp_send_buffer,
	.send = comp_send,
	.recv = comp_recv,
	.recv_queued = comp_recv_queued,
	.release = comp_release,
	.sleep = comp_sleep,
	.poll = comp_poll,
	.wake = comp_wake,
	.peer_alive = comp_peer_alive,
	.expose = comp_expose,
	.rma = comp_rma,
	.atomic = comp_atomic,
	.test = comp_test,
	.drain = comp_drain,
	.drain_poll = comp_drain_poll,
	.hold = comp_hold,
	.resumed = comp_resumed,
	.address = comp_address,
	.insert = comp_insert,
};
