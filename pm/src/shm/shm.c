/* SPDX-License-Identifier: MIT */
/*
 * shm.c - the shm device: the processes of a job on one node.
 *
 * Every process owns one segment holding a header (its doorbell and its
 * table of exposed regions) and one receive ring per local sender,
 * itself included.  Senders map the receiver's segment and build messages
 * directly in their ring there; the receiver reads them in place.  Remote
 * memory is single-copy: process_vm_writev/readv straight between the two
 * address spaces.  The segment's name is removed as soon as every peer has
 * mapped it, so nothing is left in /dev/shm when a process dies.
 *
 * Layout and protocol: docs/pm/shm.md.
 */
#include "shm.h"
#include "core/atomic.h"
#include "core/ring.h"
#include "util/clock.h"
#include "util/futex.h"
#include "util/log.h"

#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC        "PMSHM001"
#define SHM_KEY          "pm.shm"
#define SHM_VERSION      2      /* 2: the atomics lock */
#define SHM_BLOCK_SLICE_MS 100  /* how often a sleeper checks peers' health */

struct shm_window {
	_Atomic uint64_t key;
	uint64_t addr;
	uint64_t len;
	uint64_t _pad;
};

struct shm_seg {
	char magic[8];
	uint32_t version;
	uint32_t nrings;
	uint64_t ring_bytes;
	int32_t pid;
	int32_t rank;
	_Alignas(64) _Atomic uint32_t bell;     /* bumped to wake the owner */
	_Atomic uint32_t sleeping;              /* the owner is in futex_wait */
	_Atomic uint32_t wake_port;             /* 0, or the owner also sleeps on
						   a UDP socket at 127.0.0.1:port
						   (network order) */
	_Atomic uint32_t closed;                /* the owner closed its context:
						   its exit is no crash */
	_Atomic uint32_t atomic_lock;           /* pid of whoever runs an atomic
						   on the owner's regions, or 0
						   (core/atomic.h) */
	_Alignas(64) struct shm_window win[PM_MAX_WINDOWS];
};

/* What a process publishes through the bootstrap. */
struct shm_addr {
	int32_t pid;
	uint32_t ring_bytes;
};

struct shm_peer {
	int rank;
	pid_t pid;
	int pidfd;
	struct shm_seg *seg;            /* the peer's segment (== own for self) */
	size_t seg_len;
	struct ring_producer tx;        /* our ring in the peer's segment */
	struct ring_consumer rx;        /* the peer's ring in our segment */
	uint64_t blocked_tail;          /* tx tail seen when a send said EAGAIN */
	bool want_space;
	bool dead;
	bool broken;                    /* sent a malformed record: ignored */
};

struct shm_dev {
	struct pm_device base;
	struct shm_seg *me;
	size_t me_len;
	char name[64];
	bool named;
	int me_local;
	int nlocal;
	struct shm_peer *peers;         /* by local index */
	int *local_of;                  /* rank -> local index, or -1 */
	int wake_fd;                    /* 127.0.0.1 socket, or -1 (futex only) */
	int next_rx;                    /* round-robin start of recv */
	uint64_t ring_bytes;
};

static inline struct shm_dev *to_shm(struct pm_device *dev)
{
	return (struct shm_dev *)dev;
}

static size_t rings_offset(void)
{
	return (sizeof(struct shm_seg) + 4095) & ~(size_t)4095;
}

static size_t seg_bytes(uint32_t nrings, uint64_t ring_bytes)
{
	return rings_offset() + nrings * ring_footprint(ring_bytes);
}

static void *seg_ring(struct shm_seg *seg, int i)
{
	return (uint8_t *)seg + rings_offset() + (size_t)i * ring_footprint(seg->ring_bytes);
}

static void seg_name(char *buf, size_t len, uint64_t jobkey, int rank)
{
	snprintf(buf, len, "/pm-%016" PRIx64 "-%d", jobkey, rank);
}

static int shm_local(const struct shm_dev *s, int peer)
{
	if (peer < 0 || peer >= s->base.ctx->size)
		return -1;
	return s->local_of[peer];
}

static int pidfd_open_compat(pid_t pid)
{
#ifdef SYS_pidfd_open
	return (int)syscall(SYS_pidfd_open, pid, 0);
#else
	(void)pid;
	errno = ENOSYS;
	return -1;
#endif
}

static bool peer_died(struct shm_peer *p)
{
	if (p->dead)
		return true;
	if (p->pid == getpid())
		return false;
	if (p->pidfd >= 0) {
		struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };

		p->dead = poll(&pfd, 1, 0) == 1;
	} else {
		p->dead = kill(p->pid, 0) < 0 && errno == ESRCH;
	}
	return p->dead;
}

/* ---- opening ---- */

static int shm_setup(struct pm_device *dev, struct pm_boot *b)
{
	struct shm_dev *s = to_shm(dev);
	struct pm_context *ctx = dev->ctx;

	s->ring_bytes = (uint64_t)ctx->shm_ring_kib * 1024u;
	if (!ring_size_valid(s->ring_bytes)) {
		pm_log(ctx->rank, "shm ring of %u KiB: must be a power of two >= 4",
		       ctx->shm_ring_kib);
		return -EINVAL;
	}
	s->nlocal = b->nlocal;
	s->local_of = malloc((size_t)b->size * sizeof(int));
	s->peers = calloc((size_t)b->nlocal, sizeof(*s->peers));
	if (!s->local_of || !s->peers)
		return -ENOMEM;
	for (int r = 0; r < b->size; r++)
		s->local_of[r] = -1;
	s->me_local = -1;
	for (int i = 0; i < b->nlocal; i++) {
		s->local_of[b->local_ranks[i]] = i;
		s->peers[i].rank = b->local_ranks[i];
		s->peers[i].pidfd = -1;
		if (b->local_ranks[i] == b->rank)
			s->me_local = i;
	}
	if (s->me_local < 0) {
		pm_log(ctx->rank, "the launcher's local peers do not include this rank");
		return -EPROTO;
	}

	seg_name(s->name, sizeof(s->name), b->jobkey, b->rank);
	s->me_len = seg_bytes((uint32_t)s->nlocal, s->ring_bytes);
	int fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);

	if (fd < 0) {
		int err = -errno;

		pm_log(ctx->rank, "shm_open %s: %s", s->name, strerror(errno));
		return err;
	}
	s->named = true;
	if (ftruncate(fd, (off_t)s->me_len) < 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	s->me = mmap(NULL, s->me_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s->me == MAP_FAILED) {
		s->me = NULL;
		return -errno;
	}
	s->me->version = SHM_VERSION;
	s->me->nrings = (uint32_t)s->nlocal;
	s->me->ring_bytes = s->ring_bytes;
	s->me->pid = getpid();
	s->me->rank = b->rank;
	for (int i = 0; i < s->nlocal; i++)
		ring_init(seg_ring(s->me, i), s->ring_bytes);
	atomic_thread_fence(memory_order_release);
	memcpy(s->me->magic, SHM_MAGIC, sizeof(s->me->magic));

	/* Every executor of this context's atomics, its udp progress
	 * included, takes the lock that its shm peers can reach. */
	ctx->atomic_lock = &s->me->atomic_lock;

	struct shm_addr addr = { .pid = getpid(), .ring_bytes = (uint32_t)s->ring_bytes };

	return b->ops->put(b, SHM_KEY, &addr, sizeof(addr));
}

static int map_peer(struct shm_dev *s, struct pm_boot *b, struct shm_peer *p)
{
	struct shm_addr addr;
	size_t len = sizeof(addr);
	char name[64];
	int err = b->ops->get(b, p->rank, SHM_KEY, &addr, &len);

	if (err)
		return err;
	if (len != sizeof(addr))
		return -EPROTO;
	seg_name(name, sizeof(name), b->jobkey, p->rank);
	int fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);

	if (fd < 0)
		return -errno;

	struct stat st;

	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	p->seg_len = (size_t)st.st_size;
	p->seg = mmap(NULL, p->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p->seg == MAP_FAILED) {
		p->seg = NULL;
		return -errno;
	}
	/* The segment is the peer's word about itself: check it fits. */
	if (p->seg_len < sizeof(struct shm_seg) ||
	    memcmp(p->seg->magic, SHM_MAGIC, sizeof(p->seg->magic)) != 0 ||
	    p->seg->version != SHM_VERSION || p->seg->nrings != (uint32_t)s->nlocal ||
	    p->seg->pid != addr.pid ||
	    !ring_size_valid(p->seg->ring_bytes) ||
	    p->seg_len < seg_bytes(p->seg->nrings, p->seg->ring_bytes))
		return -EPROTO;
	p->pid = addr.pid;
	p->pidfd = pidfd_open_compat(p->pid);
	return 0;
}

static int shm_connect(struct pm_device *dev, struct pm_boot *b)
{
	struct shm_dev *s = to_shm(dev);

	for (int i = 0; i < s->nlocal; i++) {
		struct shm_peer *p = &s->peers[i];

		if (i == s->me_local) {
			p->seg = s->me;
			p->pid = getpid();
		} else {
			int err = map_peer(s, b, p);

			if (err) {
				pm_log(dev->ctx->rank, "shm: attaching to rank %d: %s", p->rank,
				       strerror(-err));
				return err;
			}
		}
		ring_producer_attach(&p->tx, seg_ring(p->seg, s->me_local), p->seg->ring_bytes);
		ring_consumer_attach(&p->rx, seg_ring(s->me, i), s->ring_bytes);
	}
	return 0;
}

static void shm_ready(struct pm_device *dev)
{
	struct shm_dev *s = to_shm(dev);

	if (s->named) {
		shm_unlink(s->name);
		s->named = false;
	}
}

static void shm_destroy(struct pm_device *dev)
{
	struct shm_dev *s = to_shm(dev);

	shm_ready(dev);
	if (s->me) {
		atomic_store_explicit(&s->me->closed, 1, memory_order_release);
		dev->ctx->atomic_lock = &dev->ctx->atomic_lock_own;
	}
	for (int i = 0; s->peers && i < s->nlocal; i++) {
		struct shm_peer *p = &s->peers[i];

		if (p->seg && p->seg != s->me)
			munmap(p->seg, p->seg_len);
		if (p->pidfd >= 0)
			close(p->pidfd);
	}
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->me)
		munmap(s->me, s->me_len);
	free(s->peers);
	free(s->local_of);
	free(s);
}

/* ---- messages ---- */

static const char *shm_device_of(const struct pm_device *dev, int peer)
{
	return shm_local((const struct shm_dev *)dev, peer) >= 0 ? dev->ops->name : NULL;
}

static size_t shm_max_message(const struct pm_device *dev, int peer)
{
	const struct shm_dev *s = (const struct shm_dev *)dev;
	int l = shm_local(s, peer);

	return l < 0 ? 0 : ring_max_message(s->peers[l].tx.size);
}

static int shm_sleep_fd(struct pm_device *dev);

/* One byte from fd to a sleeper's loopback wake socket at port. */
static void wake_datagram(int fd, uint32_t port)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = (in_port_t)port,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char b = 0;

	sendto(fd, &b, 1, MSG_DONTWAIT, (struct sockaddr *)&to, sizeof(to));
}

/* Wake the owner of seg if it sleeps.  The fence pairs with the one in
 * shm_sleep(): either it sees our update or we see it sleeping.  An owner
 * that sleeps in poll() beside a network device (composite) is woken by a
 * datagram on its loopback wake socket; the futex covers everyone else. */
static void ring_bell(struct shm_dev *s, struct shm_seg *seg)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(&seg->sleeping, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&seg->bell, 1, memory_order_relaxed);
	futex_wake_shared(&seg->bell);

	uint32_t port = atomic_load_explicit(&seg->wake_port, memory_order_relaxed);

	/* Any process can wake a poll()ing sleeper: the socket to send from
	 * is made on first need. */
	if (port && (s->wake_fd >= 0 || shm_sleep_fd(&s->base) >= 0))
		wake_datagram(s->wake_fd, port);
}

/*
 * pm_signal(): ring our own bell, the way a peer does (ring_bell), from
 * any thread or a signal handler.  Unlike ring_bell it never makes the
 * wake socket (the owner may be making it right now): a port in our
 * header means our socket exists, and the acquire load makes its
 * descriptor, stored before the port (shm_sleep_fd), visible here.
 */
static void shm_wake(struct pm_device *dev)
{
	struct shm_dev *s = to_shm(dev);
	struct shm_seg *me = s->me;

	/* pm_signal() fenced after setting its flag: pairs with shm_sleep's. */
	if (!atomic_load_explicit(&me->sleeping, memory_order_relaxed))
		return;
	atomic_fetch_add_explicit(&me->bell, 1, memory_order_relaxed);
	futex_wake_shared(&me->bell);

	uint32_t port = atomic_load_explicit(&me->wake_port, memory_order_acquire);

	if (port)
		wake_datagram(s->wake_fd, port);
}

static int shm_send_buffer(struct pm_device *dev, int peer, size_t len, void **buf)
{
	struct shm_dev *s = to_shm(dev);
	int l = shm_local(s, peer);

	if (l < 0)
		return -EINVAL;

	struct shm_peer *p = &s->peers[l];

	/* Once the peer is known to be dead (pm_wait, pm_peer_alive or a
	 * full ring found out), say so: a message written into its ring
	 * would be lost without a word. */
	if (p->dead)
		return -EPIPE;

	int err = ring_reserve(&p->tx, len, buf);

	if (err == -EAGAIN) {
		if (peer_died(p))
			return -EPIPE;
		p->want_space = true;
		p->blocked_tail = p->tx.cached_tail;
	}
	return err;
}

static int shm_send(struct pm_device *dev, int peer, size_t len)
{
	struct shm_dev *s = to_shm(dev);
	int l = shm_local(s, peer);

	if (l < 0)
		return -EINVAL;

	int err = ring_publish(&s->peers[l].tx, len);

	if (!err)
		ring_bell(s, s->peers[l].seg);
	return err;
}

static int shm_recv(struct pm_device *dev, struct pm_msg *msg)
{
	struct shm_dev *s = to_shm(dev);

	for (int k = 0; k < s->nlocal; k++) {
		int i = s->next_rx + k < s->nlocal ? s->next_rx + k : s->next_rx + k - s->nlocal;
		struct shm_peer *p = &s->peers[i];

		if (p->broken || !ring_readable(&p->rx))
			continue;

		int err = ring_peek(&p->rx, &msg->data, &msg->len, &msg->_cookie);

		if (err == -EPROTO) {
			p->broken = true;
			dev->ctx->stats->drops++;
			pm_log(dev->ctx->rank, "shm: malformed record from rank %d; ignoring it",
			       p->rank);
			continue;
		}
		if (err)
			continue;
		msg->peer = p->rank;
		/* Start after this ring next time: no sender can starve another. */
		s->next_rx = i + 1 == s->nlocal ? 0 : i + 1;
		return 0;
	}
	return -EAGAIN;
}

static int shm_release(struct pm_device *dev, const struct pm_msg *msg)
{
	struct shm_dev *s = to_shm(dev);
	int l = shm_local(s, msg->peer);

	if (l < 0)
		return -EINVAL;

	struct shm_peer *p = &s->peers[l];
	uint64_t tail = p->rx.tail;
	int err = ring_release(&p->rx, msg->_cookie);

	if (!err && p->rx.tail != tail)
		ring_bell(s, p->seg);
	return err;
}

/* ---- progress ---- */

static bool shm_event(struct shm_dev *s)
{
	for (int i = 0; i < s->nlocal; i++) {
		struct shm_peer *p = &s->peers[i];

		if (!p->broken && ring_readable(&p->rx))
			return true;
		if (p->want_space &&
		    atomic_load_explicit(&p->tx.sh->tail, memory_order_acquire) != p->blocked_tail) {
			p->want_space = false;
			return true;
		}
	}
	return false;
}

/* A peer that is gone without closing its context: it crashed (or was
 * killed).  One that closed first simply finished before us. */
static bool any_peer_crashed(struct shm_dev *s)
{
	bool crashed = false;

	for (int i = 0; i < s->nlocal; i++) {
		struct shm_peer *p = &s->peers[i];

		crashed |= peer_died(p) && p->seg && p->seg != s->me &&
			   !atomic_load_explicit(&p->seg->closed, memory_order_acquire);
	}
	return crashed;
}

static int shm_sleep(struct pm_device *dev, uint64_t deadline)
{
	struct shm_dev *s = to_shm(dev);

	if (any_peer_crashed(s))
		return shm_event(s) ? 0 : -ECONNRESET;

	uint64_t now = pm_now_ns();

	if (now >= deadline)
		return 0;

	/* Wake at least every slice to look at the peers' health.  Alone on
	 * the node there is no one to watch, and nothing but pm_signal()
	 * (shm_wake) or the deadline can end the wait: sleep until then. */
	uint64_t left_ms = (deadline - now + 999999u) / 1000000u;
	uint64_t most = s->nlocal > 1 ? SHM_BLOCK_SLICE_MS : INT_MAX;
	int slice = (int)(left_ms < most ? left_ms : most);
	uint32_t bell = atomic_load_explicit(&s->me->bell, memory_order_relaxed);

	atomic_store_explicit(&s->me->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (!shm_event(s) && !pm_signal_pending(dev->ctx))
		futex_wait_shared(&s->me->bell, bell, slice);
	atomic_store_explicit(&s->me->sleeping, 0, memory_order_relaxed);
	return 0;
}

static bool shm_poll(struct pm_device *dev)
{
	return shm_event(to_shm(dev));
}

/* The loopback socket peers send a byte to when this process sleeps in
 * poll() rather than on its futex; made on first use. */
static int shm_sleep_fd(struct pm_device *dev)
{
	struct shm_dev *s = to_shm(dev);
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);

	if (s->wake_fd >= 0)
		return s->wake_fd;
	s->wake_fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->wake_fd < 0)
		return -1;
	if (bind(s->wake_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(s->wake_fd, (struct sockaddr *)&sa, &len) < 0) {
		close(s->wake_fd);
		s->wake_fd = -1;
		return -1;
	}
	/* After the descriptor: shm_wake, on another thread, uses the
	 * descriptor once it sees the port. */
	atomic_store(&s->me->wake_port, sa.sin_port);
	return s->wake_fd;
}

static int shm_sleep_prepare(struct pm_device *dev)
{
	struct shm_dev *s = to_shm(dev);

	if (any_peer_crashed(s))
		return shm_event(s) ? 1 : -ECONNRESET;
	atomic_store_explicit(&s->me->sleeping, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	/* A pending pm_signal() is an event for the composite's sleep: it
	 * must not block (the signaller may have found us awake). */
	return shm_event(s) || pm_signal_pending(dev->ctx);
}

static void shm_sleep_finish(struct pm_device *dev)
{
	struct shm_dev *s = to_shm(dev);
	char buf[64];

	atomic_store_explicit(&s->me->sleeping, 0, memory_order_relaxed);
	while (s->wake_fd >= 0 && recv(s->wake_fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

static int shm_peer_alive(struct pm_device *dev, int peer)
{
	struct shm_dev *s = to_shm(dev);
	int l = shm_local(s, peer);

	return l < 0 ? -EINVAL : !peer_died(&s->peers[l]);
}

/* ---- remote memory ---- */

static int shm_expose(struct pm_device *dev, uint32_t idx, uint64_t key, void *addr,
		      size_t len)
{
	struct shm_window *w = &to_shm(dev)->me->win[idx];

	/* Hide first so a reader never pairs the new key with old bounds. */
	atomic_store_explicit(&w->key, 0, memory_order_release);
	if (key == 0)
		return 0;
	w->addr = (uintptr_t)addr;
	w->len = len;
	atomic_store_explicit(&w->key, key, memory_order_release);
	return 0;
}

/* Where [roffset, roffset + len) of p's window rkey lies in p's memory. */
static int window_at(const struct shm_peer *p, uint64_t rkey, uint64_t roffset, size_t len,
		     void **remote)
{
	uint32_t idx = PM_WINDOW_IDX(rkey);

	if (idx >= PM_MAX_WINDOWS || rkey == 0)
		return -ENOENT;

	struct shm_window *w = &p->seg->win[idx];

	if (atomic_load_explicit(&w->key, memory_order_acquire) != rkey)
		return -ENOENT;
	uint64_t waddr = w->addr, wlen = w->len;

	if (atomic_load_explicit(&w->key, memory_order_acquire) != rkey)
		return -ENOENT; /* re-registered while we read it */
	if (!pm_window_offset(rkey, waddr, &roffset) || roffset > wlen || len > wlen - roffset)
		return -ERANGE;
	*remote = (void *)(uintptr_t)(waddr + roffset);
	return 0;
}

/* len bytes between here and there in p, one way, with process_vm_*. */
static int vm_copy(const struct shm_peer *p, bool write, void *local, void *remote, size_t len)
{
	size_t done = 0;

	while (done < len) {
		struct iovec liov = { (uint8_t *)local + done, len - done };
		struct iovec riov = { (uint8_t *)remote + done, len - done };
		ssize_t n = write ? process_vm_writev(p->pid, &liov, 1, &riov, 1, 0)
				  : process_vm_readv(p->pid, &liov, 1, &riov, 1, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return errno == ESRCH ? -EPIPE : -errno;
		}
		if (n == 0)
			return -EIO;
		done += (size_t)n;
	}
	return 0;
}

static int shm_rma(struct pm_device *dev, int peer, bool write, void *local,
		   size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	struct shm_dev *s = to_shm(dev);
	int l = shm_local(s, peer);

	if (l < 0)
		return -EINVAL;

	struct shm_peer *p = &s->peers[l];
	void *remote;
	int err = window_at(p, rkey, roffset, len, &remote);

	if (err)
		return err;
	if (p->pid == getpid()) {
		memmove(write ? remote : local, write ? local : remote, len);
	} else {
		err = vm_copy(p, write, local, remote, len);
		if (err)
			return err;
	}
	op->status = 0;
	op->peer = peer;
	return 0;
}

/* Under the owner's lock, in its memory: the owner's atomics and every
 * other executor's take turns there (core/atomic.h). */
static int shm_atomic(struct pm_device *dev, int peer, uint32_t aop, uint64_t operand,
		      uint64_t compare, void *result, uint64_t rkey, uint64_t roffset,
		      struct pm_op *op)
{
	struct shm_dev *s = to_shm(dev);
	int l = shm_local(s, peer);

	if (l < 0)
		return -EINVAL;

	struct shm_peer *p = &s->peers[l];
	size_t width = pm_atomic_width(aop);
	uint8_t word[8];
	void *remote;
	uint64_t old, v;
	int err = window_at(p, rkey, roffset, width, &remote);

	if (err)
		return err;
	if ((uintptr_t)remote & (width - 1))
		return -EINVAL;
	if (p->pid == getpid()) {
		err = pm_atomic_here(&p->seg->atomic_lock, remote, aop, operand, compare, &old);
	} else {
		pm_atomic_lock(&p->seg->atomic_lock);
		err = vm_copy(p, false, word, remote, width);
		old = pm_atomic_load(aop, word);
		v = pm_atomic_compute(aop, old, operand, compare);
		if (!err && v != old) {
			pm_atomic_store(aop, word, v);
			err = vm_copy(p, true, word, remote, width);
		}
		pm_atomic_unlock(&p->seg->atomic_lock);
	}
	if (err)
		return err;
	if (result)
		pm_atomic_store(aop, result, old);
	op->status = 0;
	op->peer = peer;
	return 0;
}

static int shm_test(struct pm_device *dev, struct pm_op *op)
{
	(void)dev;
	/* Transfers are synchronous: an op is done when rma returns. */
	return op->status != 1;
}

static int shm_drain(struct pm_device *dev)
{
	/* A published message is already in the receiver's memory and remote
	 * memory operations complete before they return: nothing is in flight. */
	(void)dev;
	return 0;
}

/* Nothing to answer on shm (no acknowledgements): just sleep, in one
 * interruptible system call, without looking at unread messages. */
static void shm_hold(struct pm_device *dev, uint64_t deadline)
{
	uint64_t now = pm_now_ns();

	(void)dev;
	if (now >= deadline)
		return;

	uint64_t left = deadline - now;
	struct timespec ts = { .tv_sec = (time_t)(left / 1000000000u),
			       .tv_nsec = (long)(left % 1000000000u) };

	nanosleep(&ts, NULL);   /* EINTR: the resume's signal, welcome */
}

static int shm_drain_poll(struct pm_device *dev)
{
	return shm_drain(dev) == 0;
}

static void shm_resumed(struct pm_device *dev)
{
	(void)dev;              /* no timers */
}

static struct pm_device *shm_create(struct pm_context *ctx, unsigned flags)
{
	struct shm_dev *s = calloc(1, sizeof(*s));

	(void)flags;           /* it serves only local peers anyway */
	if (!s)
		return NULL;
	s->base.ops = &pm_shm_ops;
	s->base.ctx = ctx;
	s->wake_fd = -1;
	return &s->base;
}

const struct pm_device_ops pm_shm_ops = {
	.name = "shm",
	.create = shm_create,
	.setup = shm_setup,
	.connect = shm_connect,
	.ready = shm_ready,
	.destroy = shm_destroy,
	.device_of = shm_device_of,
	.max_message = shm_max_message,
	.send_buffer = shm_send_buffer,
	.send = shm_send,
	.recv = shm_recv,
	.release = shm_release,
	.sleep = shm_sleep,
	.poll = shm_poll,
	.sleep_fd = shm_sleep_fd,
	.sleep_prepare = shm_sleep_prepare,
	.sleep_finish = shm_sleep_finish,
	.wake = shm_wake,
	.peer_alive = shm_peer_alive,
	.expose = shm_expose,
	.rma = shm_rma,
	.atomic = shm_atomic,
	.test = shm_test,
	.drain = shm_drain,
	.drain_poll = shm_drain_poll,
	.hold = shm_hold,
	.resumed = shm_resumed,
};
