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
 * A detached context (no launcher: its peers come from pm_peer_insert)
 * has no names at all: its segment is a memfd with a ring for each of up
 * to PM_DETACHED_MAX senders.  A sender on the same host finds it among
 * the receiver's open files by the pid and context id of its address,
 * claims a free ring in its table and writes there; the receiver finds
 * which ring is whose by the claim (pid and context id) once it has
 * inserted the sender too.  Until then the messages wait in the ring.
 *
 * Layout and protocol: docs/pm/shm.md.
 */
#include "shm.h"
#include "core/atomic.h"
#include "core/detached.h"
#include "core/ring.h"
#include "util/clock.h"
#include "util/futex.h"
#include "util/log.h"

#include <errno.h>
#include <arpa/inet.h>
#include <dirent.h>
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
#define SHM_VERSION      3      /* 2: the atomics lock; 3: detached claims */
#define SHM_SLOTS        PM_DETACHED_MAX /* rings of a detached context */
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
	/* Detached (nrings == SHM_SLOTS): who owns it, checked by a sender
	 * that found it by pid and id, and how many rings are claimed. */
	uint32_t id;
	uint64_t key;
	_Atomic uint32_t nclaimed;
	_Alignas(64) struct shm_window win[PM_MAX_WINDOWS];
	/* Detached: ring i's sender, pid << 32 | context id, 0 while free.
	 * Claimed in order and never freed, so the claimed ones are a prefix. */
	_Alignas(64) _Atomic uint64_t claim[SHM_SLOTS];
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
	/* Detached: its claim tag (pid << 32 | id) and key; its ring in its
	 * segment, mapped alone (seg is then its header only); whether its
	 * ring in ours is found yet (rx reads an empty ring until then). */
	uint64_t tag;
	uint64_t key;
	void *ring_map;
	size_t ring_map_len;
	bool rx_found;
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
	/* Detached: the segment's memfd, open for the life of the context (a
	 * sender finds it in /proc/<pid>/fd); the peers whose ring in ours is
	 * not found yet, and the claims looked at so far. */
	bool detached;
	int memfd;
	int pending;
	uint32_t seen_claims;
	uint32_t scanned;
};

static inline struct shm_dev *to_shm(struct pm_device *dev)
{
	return (struct shm_dev *)dev;
}

static size_t rings_offset(void)
{
	return (sizeof(struct shm_seg) + 4095) & ~(size_t)4095;
}

/* Rings start on pages: a detached sender maps its ring alone. */
static size_t ring_stride(uint64_t ring_bytes)
{
	return (ring_footprint(ring_bytes) + 4095) & ~(size_t)4095;
}

static size_t seg_bytes(uint32_t nrings, uint64_t ring_bytes)
{
	return rings_offset() + nrings * ring_stride(ring_bytes);
}

static void *seg_ring(struct shm_seg *seg, int i)
{
	return (uint8_t *)seg + rings_offset() + (size_t)i * ring_stride(seg->ring_bytes);
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

/* Header fields of a fresh segment of nrings rings; the magic goes last,
 * when everything else is there for a peer to check. */
static void seg_init(struct shm_seg *seg, uint32_t nrings, uint64_t ring_bytes, int rank)
{
	seg->version = SHM_VERSION;
	seg->nrings = nrings;
	seg->ring_bytes = ring_bytes;
	seg->pid = getpid();
	seg->rank = rank;
}

static void seg_publish(struct shm_seg *seg)
{
	atomic_thread_fence(memory_order_release);
	memcpy(seg->magic, SHM_MAGIC, sizeof(seg->magic));
}

/* A peer's segment (seg_len bytes of it mapped, size bytes in all) is its
 * word about itself: check that it is what the peer's address told. */
static bool seg_fits(const struct shm_seg *seg, size_t seg_len, size_t size, uint32_t nrings,
		     pid_t pid)
{
	return seg_len >= sizeof(struct shm_seg) &&
	       memcmp(seg->magic, SHM_MAGIC, sizeof(seg->magic)) == 0 &&
	       seg->version == SHM_VERSION && seg->nrings == nrings && seg->pid == pid &&
	       ring_size_valid(seg->ring_bytes) && size >= seg_bytes(seg->nrings, seg->ring_bytes);
}

static int setup_detached(struct shm_dev *s, struct pm_boot *b);

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
	if (ctx->detached)
		return setup_detached(s, b);
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
	seg_init(s->me, (uint32_t)s->nlocal, s->ring_bytes, b->rank);
	for (int i = 0; i < s->nlocal; i++)
		ring_init(seg_ring(s->me, i), s->ring_bytes);
	seg_publish(s->me);

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
	if (!seg_fits(p->seg, p->seg_len, p->seg_len, (uint32_t)s->nlocal, addr.pid))
		return -EPROTO;
	p->pid = addr.pid;
	p->pidfd = pidfd_open_compat(p->pid);
	return 0;
}

static int connect_detached(struct shm_dev *s);

static int shm_connect(struct pm_device *dev, struct pm_boot *b)
{
	struct shm_dev *s = to_shm(dev);

	if (s->detached)
		return connect_detached(s);

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
		if (p->ring_map)
			munmap(p->ring_map, p->ring_map_len);
		if (p->pidfd >= 0)
			close(p->pidfd);
	}
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->memfd >= 0)
		close(s->memfd);
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

static void find_claims(struct shm_dev *s);

static int shm_recv(struct pm_device *dev, struct pm_msg *msg)
{
	struct shm_dev *s = to_shm(dev);

	if (__builtin_expect(s->pending != 0, 0))
		find_claims(s);

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
	if (s->pending)
		find_claims(s);
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

/* ---- detached contexts ---- */

/* A ring that never has anything: a peer's rx until its ring is found
 * (its first record's mark, zero, reads as nothing published). */
static _Alignas(64) uint8_t no_ring[RING_HDR_BYTES + RING_MIN_BYTES];

static uint64_t claim_tag(uint32_t pid, uint32_t id)
{
	return (uint64_t)pid << 32 | id;
}

static int setup_detached(struct shm_dev *s, struct pm_boot *b)
{
	struct pm_context *ctx = s->base.ctx;
	char name[32];

	s->detached = true;
	s->local_of = malloc(PM_DETACHED_MAX * sizeof(int));
	s->peers = calloc(SHM_SLOTS, sizeof(*s->peers));
	if (!s->local_of || !s->peers)
		return -ENOMEM;
	for (int r = 0; r < PM_DETACHED_MAX; r++)
		s->local_of[r] = -1;

	/* Found by senders under this name in /proc/<pid>/fd (find_segment);
	 * a memfd leaves nothing behind in any directory. */
	snprintf(name, sizeof(name), "pm.%08" PRIx32, ctx->detached_id);
	s->memfd = memfd_create(name, MFD_CLOEXEC);
	if (s->memfd < 0)
		return -errno;
	/* A memfd is made 0777; only /proc's rules would keep others out. */
	if (fchmod(s->memfd, 0600) < 0)
		return -errno;
	/* A ring for every peer there may be, in address space only: the
	 * pages of a ring no one claims are never touched. */
	s->me_len = seg_bytes(SHM_SLOTS, s->ring_bytes);
	if (ftruncate(s->memfd, (off_t)s->me_len) < 0)
		return -errno;
	s->me = mmap(NULL, s->me_len, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (s->me == MAP_FAILED) {
		s->me = NULL;
		return -errno;
	}
	seg_init(s->me, SHM_SLOTS, s->ring_bytes, 0);
	s->me->id = ctx->detached_id;
	s->me->key = b->jobkey;
	seg_publish(s->me);     /* fresh memory: every ring is empty already */
	ctx->atomic_lock = &s->me->atomic_lock;
	ctx->detached_pid = (uint32_t)getpid();
	return 0;
}

/* The memfd of the detached context id in process pid, reopened through
 * /proc as a file of a process we may trace (what process_vm_readv needs
 * anyway); -EHOSTUNREACH when there is no such file to reach. */
static int find_segment(uint32_t pid, uint32_t id)
{
	char dir[32], path[32 + sizeof(((struct dirent *)0)->d_name)], want[48], link[64];
	int fd = -EHOSTUNREACH;
	struct dirent *e;

	snprintf(dir, sizeof(dir), "/proc/%" PRIu32 "/fd", pid);
	int wlen = snprintf(want, sizeof(want), "/memfd:pm.%08" PRIx32 " (deleted)", id);
	DIR *d = opendir(dir);

	if (!d)
		return -EHOSTUNREACH;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		ssize_t n = readlink(path, link, sizeof(link));

		if (n != wlen || memcmp(link, want, (size_t)n) != 0)
			continue;
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			fd = -EHOSTUNREACH;
		break;
	}
	closedir(d);
	return fd;
}

/* Claim a free ring of seg for the sender tag: its index, or -ENOSPC. */
static int claim_ring(struct shm_seg *seg, uint64_t tag)
{
	for (int i = 0; i < SHM_SLOTS; i++) {
		uint64_t free_slot = 0;

		if (atomic_compare_exchange_strong(&seg->claim[i], &free_slot, tag)) {
			atomic_fetch_add_explicit(&seg->nclaimed, 1, memory_order_release);
			return i;
		}
	}
	return -ENOSPC;
}

/* Map the header of the segment of the context at d, check it is that
 * context's, claim a ring there and map it: p's tx. */
static int map_detached(struct shm_dev *s, struct shm_peer *p, const struct pm_daddr *d)
{
	struct pm_context *ctx = s->base.ctx;
	uint64_t mine = claim_tag(ctx->detached_pid, ctx->detached_id);
	int fd = find_segment(d->pid, d->id);
	struct stat st;
	int err = 0, slot;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0)
		err = -errno;
	else if (st.st_uid != geteuid() || (size_t)st.st_size < rings_offset())
		err = -EHOSTUNREACH;    /* not a segment of ours to write into */
	if (!err) {
		p->seg = mmap(NULL, rings_offset(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p->seg == MAP_FAILED) {
			p->seg = NULL;
			err = -errno;
		} else {
			p->seg_len = rings_offset();
		}
	}
	if (!err && !seg_fits(p->seg, p->seg_len, (size_t)st.st_size, SHM_SLOTS, (pid_t)d->pid))
		err = -EHOSTUNREACH;
	if (!err && (p->seg->id != d->id || p->seg->key != d->key))
		err = -EADDRNOTAVAIL;   /* its id, or its key, is another's */
	slot = err ? err : claim_ring(p->seg, mine);
	if (slot < 0) {
		err = slot;
	} else {
		p->ring_map_len = ring_stride(p->seg->ring_bytes);
		p->ring_map = mmap(NULL, p->ring_map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
				   (off_t)(rings_offset() + (size_t)slot * p->ring_map_len));
		if (p->ring_map == MAP_FAILED) {
			p->ring_map = NULL;
			err = -errno;
		} else {
			ring_producer_attach(&p->tx, p->ring_map, p->seg->ring_bytes);
		}
	}
	close(fd);
	return err;
}

/* The ring p writes to us, if it has claimed one. */
static void find_rx(struct shm_dev *s, struct shm_peer *p)
{
	for (int i = 0; i < SHM_SLOTS; i++) {
		uint64_t c = atomic_load_explicit(&s->me->claim[i], memory_order_acquire);

		if (c == 0)
			return;
		if (c == p->tag) {
			ring_consumer_attach(&p->rx, seg_ring(s->me, i), s->ring_bytes);
			p->rx_found = true;
			s->pending--;
			return;
		}
	}
}

/* Some peer claimed a ring in our segment since we last looked. */
static void find_claims(struct shm_dev *s)
{
	uint32_t n = atomic_load_explicit(&s->me->nclaimed, memory_order_acquire);

	if (n == s->seen_claims)
		return;
	s->seen_claims = n;
	for (int i = 0; i < s->nlocal && s->pending; i++)
		if (!s->peers[i].rx_found)
			find_rx(s, &s->peers[i]);
}

/* Undo a failed map_detached. */
static void forget_peer(struct shm_peer *p)
{
	if (p->seg)
		munmap(p->seg, p->seg_len);
	if (p->ring_map)
		munmap(p->ring_map, p->ring_map_len);
	if (p->pidfd >= 0)
		close(p->pidfd);
	memset(p, 0, sizeof(*p));
}

static int shm_insert(struct pm_device *dev, const struct pm_daddr *d, int *peer)
{
	struct shm_dev *s = to_shm(dev);
	struct pm_context *ctx = dev->ctx;

	/* Only where the pid means the same process (core/detached.h). */
	if (!s->detached || d->pid == 0 || d->host != ctx->host_id)
		return -EHOSTUNREACH;

	uint64_t tag = claim_tag(d->pid, d->id);

	for (int i = 0; i < s->nlocal; i++) {
		if (s->peers[i].tag != tag)
			continue;
		if (s->peers[i].key != d->key)
			return -EADDRNOTAVAIL;
		*peer = s->peers[i].rank;
		return 0;
	}
	if (s->nlocal >= SHM_SLOTS || *peer >= PM_DETACHED_MAX)
		return -ENOSPC;

	struct shm_peer *p = &s->peers[s->nlocal];
	bool self = d->pid == ctx->detached_pid && d->id == ctx->detached_id;
	int err = 0;

	memset(p, 0, sizeof(*p));
	p->rank = *peer;
	p->pid = (pid_t)d->pid;
	p->pidfd = -1;
	p->tag = tag;
	p->key = d->key;
	if (self) {
		int slot = d->key == s->me->key ? claim_ring(s->me, tag) : -EADDRNOTAVAIL;

		if (slot < 0)
			return slot;
		p->seg = s->me;
		ring_producer_attach(&p->tx, seg_ring(s->me, slot), s->ring_bytes);
	} else {
		err = map_detached(s, p, d);
		if (err) {
			forget_peer(p);
			return err;
		}
		p->pidfd = pidfd_open_compat(p->pid);
		ring_bell(s, p->seg);   /* a sleeping receiver looks for the claim */
	}
	ring_consumer_attach(&p->rx, no_ring, RING_MIN_BYTES);
	s->pending++;
	find_rx(s, p);
	s->local_of[*peer] = s->nlocal++;
	return 0;
}

/* The context itself is its peer 0, on its own segment like any other. */
static int connect_detached(struct shm_dev *s)
{
	struct pm_context *ctx = s->base.ctx;
	struct pm_daddr me = { .id = ctx->detached_id, .key = s->me->key, .host = ctx->host_id,
			       .pid = ctx->detached_pid };
	int peer = 0;

	s->me_local = 0;
	return shm_insert(&s->base, &me, &peer);
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
	s->memfd = -1;
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
	.insert = shm_insert,
};
