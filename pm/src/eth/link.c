/* SPDX-License-Identifier: MIT */
/* link.c - one NIC of the eth device: packet socket and receive ring. */
#include "link.h"
#include "frame.h"
#include "udp/udp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ETH_RING_BYTES (4u << 20)       /* as the udp device's socket buffers */
#define ETH_BLOCK_BYTES (64u << 10)
#define ETH_SNDBUF (4 << 20)
#define ETH_LONE_MAX 512                /* a lone small frame goes by sendto */

/* Room in a ring frame for the kernel's header and address before the
 * packet (TPACKET2_HDRLEN, aligned, plus its reserve). */
#define ETH_FRAME_HEADROOM 128u

static int fail(char *err, size_t errlen, int e, const char *what, const char *nic)
{
	if (e == -EPERM || e == -EACCES)
		snprintf(err, errlen, "%s on %s: %s (raw frames need CAP_NET_RAW: run as root, or "
			 "use PM_NET_DEVICE=udp)", what, nic, strerror(-e));
	else
		snprintf(err, errlen, "%s on %s: %s", what, nic, strerror(-e));
	return e;
}

/* A UDP socket bound on the NIC's address holds a port number no other
 * context on this node can have: ours for the frames' dst_port. */
static int reserve_port(struct eth_link *l, const struct udp_nic *nic)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = nic->addr };
	socklen_t len = sizeof(sa);

	l->port_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (l->port_fd < 0)
		return -errno;
	if (bind(l->port_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(l->port_fd, (struct sockaddr *)&sa, &len) < 0)
		return -errno;
	l->port = ntohs(sa.sin_port);
	return 0;
}

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static int map_ring(struct eth_link *l, uint16_t mtu)
{
	int version = TPACKET_V2;
	unsigned m = mtu > UDP_PKT_MAX + ETH_LINK_HDR_BYTES ? UDP_PKT_MAX + ETH_LINK_HDR_BYTES : mtu;

	l->frame_bytes = pow2_at_least(m + ETH_FRAME_HEADROOM);
	if (l->frame_bytes < 2048)
		l->frame_bytes = 2048;
	/* A frame takes a whole slot whatever its size: jumbo frames get a
	 * bigger ring rather than fewer slots (16 MiB at MTU 9000), so small
	 * packets find as many slots as at MTU 1500. */
	size_t bytes = ETH_RING_BYTES;

	if (bytes < (size_t)ETH_RING_MIN_FRAMES * l->frame_bytes)
		bytes = (size_t)ETH_RING_MIN_FRAMES * l->frame_bytes;
	l->frames = (uint32_t)(bytes / l->frame_bytes);

	struct tpacket_req req = {
		.tp_block_size = ETH_BLOCK_BYTES, .tp_block_nr = (unsigned)(bytes / ETH_BLOCK_BYTES),
		.tp_frame_size = l->frame_bytes, .tp_frame_nr = l->frames,
	};

	if (setsockopt(l->fd, SOL_PACKET, PACKET_VERSION, &version, sizeof(version)) < 0 ||
	    setsockopt(l->fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof(req)) < 0)
		return -errno;
	l->ring_bytes = bytes;
	l->ring = mmap(NULL, l->ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		       l->fd, 0);
	if (l->ring == MAP_FAILED) {
		l->ring = NULL;
		return -errno;
	}
	return 0;
}

/* l's port and packet socket on nic, the packet socket of protocol 0
 * with the filter for the port: eth_filter's for this process, or (grant)
 * eth_grant_filter's, locked, for a process a launcher starts. */
static int open_sockets(struct eth_link *l, const struct udp_nic *nic, bool grant, char *err,
			size_t errlen)
{
	struct sock_filter prog[ETH_GRANT_FILTER_INSNS];
	struct sock_fprog fprog = { .filter = prog };
	int one = 1, e;

	e = reserve_port(l, nic);
	if (e)
		return fail(err, errlen, e, "port", nic->name);
	/* Protocol 0 until bind: nothing lands in the ring before the filter
	 * and the ring are in place. */
	l->fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (l->fd < 0)
		return fail(err, errlen, -errno, "packet socket", nic->name);
	fprog.len = eth_filter_for(l->port, grant, prog);
	if (setsockopt(l->fd, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof(fprog)) < 0 ||
	    (grant && setsockopt(l->fd, SOL_SOCKET, SO_LOCK_FILTER, &one, sizeof(one)) < 0))
		return fail(err, errlen, -errno, "socket filter", nic->name);
	return 0;
}

/* ---- sockets granted by a launcher (pm_eth_grant, PM_ETH_GRANT) ---- */

/* The descriptors PM_ETH_GRANT ("eth0=5/6,eth1=7/8": NIC=packet/port)
 * names for nic: 1, 0 when it names none, -EINVAL when it is malformed. */
static int granted(const char *nic, int *fd, int *port_fd)
{
	const char *p = getenv("PM_ETH_GRANT");
	size_t len = strlen(nic);

	while (p && *p) {
		char *end;
		long a, b;

		if (strncmp(p, nic, len) == 0 && p[len] == '=') {
			a = strtol(p + len + 1, &end, 10);
			if (*end != '/' || a < 0 || a > INT32_MAX)
				return -EINVAL;
			b = strtol(end + 1, &end, 10);
			if ((*end != ',' && *end) || b < 0 || b > INT32_MAX)
				return -EINVAL;
			*fd = (int)a;
			*port_fd = (int)b;
			return 1;
		}
		p = strchr(p, ',');
		p = p ? p + 1 : NULL;
	}
	return 0;
}

static int sock_int(int fd, int opt)
{
	int v = -1;
	socklen_t len = sizeof(v);

	return getsockopt(fd, SOL_SOCKET, opt, &v, &len) < 0 ? -1 : v;
}

static int not_granted(char *err, size_t errlen, const char *nic, int fd, int port_fd)
{
	snprintf(err, errlen, "PM_ETH_GRANT names descriptors %d/%d on %s that are not the "
		 "sockets a launcher granted (closed by an earlier PM context of this process, "
		 "or not inherited)", fd, port_fd, nic);
	return -EBADF;
}

/* Take the sockets a launcher opened for this process on nic, after
 * checking they are what pm_eth_grant makes: a UDP socket bound on the
 * NIC's address, and a packet socket never bound (another PM context of
 * this process has not taken it) whose filter is eth_grant_filter's for
 * that port. */
static int adopt(struct eth_link *l, const struct udp_nic *nic, int fd, int port_fd, char *err,
		 size_t errlen)
{
	struct sockaddr_in sa;
	struct sockaddr_ll sll;
	socklen_t len = sizeof(sa), llen = sizeof(sll);
	struct sock_filter want[ETH_GRANT_FILTER_INSNS], have[ETH_GRANT_FILTER_INSNS];
	socklen_t n = ETH_GRANT_FILTER_INSNS;   /* SO_GET_FILTER counts instructions */

	if (sock_int(port_fd, SO_DOMAIN) != AF_INET || sock_int(port_fd, SO_TYPE) != SOCK_DGRAM ||
	    getsockname(port_fd, (struct sockaddr *)&sa, &len) < 0 || sa.sin_addr.s_addr != nic->addr)
		return not_granted(err, errlen, nic->name, fd, port_fd);
	if (sock_int(fd, SO_DOMAIN) != AF_PACKET || sock_int(fd, SO_TYPE) != SOCK_DGRAM ||
	    getsockname(fd, (struct sockaddr *)&sll, &llen) < 0)
		return not_granted(err, errlen, nic->name, fd, port_fd);
	if (sll.sll_protocol != 0) {
		snprintf(err, errlen, "PM_ETH_GRANT's packet socket on %s is taken by another PM "
			 "context of this process (a launcher grants one per process; "
			 "PM_NET_DEVICE=udp for the others)", nic->name);
		return -EBUSY;
	}
	eth_grant_filter(ntohs(sa.sin_port), want);
	if (getsockopt(fd, SOL_SOCKET, SO_GET_FILTER, have, &n) < 0 ||
	    n != ETH_GRANT_FILTER_INSNS || memcmp(want, have, sizeof(want)) != 0)
		return fail(err, errlen, -EBADF, "PM_ETH_GRANT's packet socket filter", nic->name);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fcntl(port_fd, F_SETFD, FD_CLOEXEC) < 0)
		return fail(err, errlen, -errno, "PM_ETH_GRANT's sockets", nic->name);
	l->fd = fd;
	l->port_fd = port_fd;
	l->port = ntohs(sa.sin_port);
	return 0;
}

int eth_link_grant(const struct udp_nic *nic, int *fd, int *port_fd, char *err, size_t errlen)
{
	struct eth_link l = { .fd = -1, .port_fd = -1, .addr = nic->addr };
	int e = open_sockets(&l, nic, true, err, errlen);

	if (e) {
		eth_link_close(&l);
		return e;
	}
	*fd = l.fd;
	*port_fd = l.port_fd;
	return 0;
}

int eth_link_open(struct eth_link *l, const struct udp_nic *nic, char *err, size_t errlen)
{
	struct ifreq ifr = { 0 };
	int sndbuf = ETH_SNDBUF, e, fd, port_fd;

	*l = (struct eth_link){ .fd = -1, .port_fd = -1, .addr = nic->addr };
	snprintf(l->name, sizeof(l->name), "%s", nic->name);
	l->ifindex = (int)if_nametoindex(nic->name);
	if (l->ifindex == 0)
		return fail(err, errlen, -ENODEV, "interface", nic->name);
	e = granted(nic->name, &fd, &port_fd);
	if (e < 0)
		return fail(err, errlen, e, "PM_ETH_GRANT", nic->name);
	e = e ? adopt(l, nic, fd, port_fd, err, errlen) : open_sockets(l, nic, false, err, errlen);
	if (e)
		return e;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", nic->name);
	if (ioctl(l->fd, SIOCGIFHWADDR, &ifr) < 0)
		return fail(err, errlen, -errno, "MAC address", nic->name);
	memcpy(l->mac, ifr.ifr_hwaddr.sa_data, sizeof(l->mac));
	e = map_ring(l, nic->mtu);
	if (e)
		return fail(err, errlen, e, "receive ring", nic->name);
	/* Frames go through the NIC's queueing discipline as any others do
	 * (PACKET_QDISC_BYPASS measured no faster here): shaping an
	 * administrator put on the NIC applies, and a full queue pushes back
	 * on the socket instead of dropping at the driver. */
	if (setsockopt(l->fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf)) < 0)
		setsockopt(l->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));

	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_PM_TYPE),
				   .sll_ifindex = l->ifindex };

	if (bind(l->fd, (struct sockaddr *)&sll, sizeof(sll)) < 0)
		return fail(err, errlen, -errno, "bind", nic->name);
	return 0;
}

void eth_link_close(struct eth_link *l)
{
	if (l->ring)
		munmap(l->ring, l->ring_bytes);
	if (l->fd >= 0)
		close(l->fd);
	if (l->port_fd >= 0)
		close(l->port_fd);
	l->ring = NULL;
	l->fd = l->port_fd = -1;
}

uint32_t eth_link_capacity(const struct eth_link *l, uint16_t mtu)
{
	return l->frames * (uint32_t)(mtu - ETH_LINK_HDR_BYTES);
}

/* ---- neighbours ---- */

/* addr's MAC on l's interface in the neighbour table (/proc/net/arp: the
 * table of this process's network namespace), if it is complete. */
static bool arp_lookup(const struct eth_link *l, uint32_t addr, uint8_t mac[6])
{
	FILE *f = fopen("/proc/net/arp", "re");
	char line[256], ip[64], hw[64], dev[64];
	unsigned type, flags;
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		struct in_addr a;

		if (sscanf(line, "%63s 0x%x 0x%x %63s %*s %63s", ip, &type, &flags, hw, dev) != 5 ||
		    inet_pton(AF_INET, ip, &a) != 1 || a.s_addr != addr ||
		    strcmp(dev, l->name) != 0 || !(flags & 0x2) /* ATF_COM */)
			continue;
		found = sscanf(hw, "%hhx:%hhx:%hhx:%hhx:%hhx:%hhx", &mac[0], &mac[1], &mac[2],
			       &mac[3], &mac[4], &mac[5]) == 6;
	}
	fclose(f);
	return found;
}

int eth_link_resolve(struct eth_link *l, uint32_t addr, uint16_t port, uint8_t mac[6],
		     uint64_t timeout_ns)
{
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_addr.s_addr = addr,
				  .sin_port = port };
	uint64_t waited = 0;
	const uint64_t step = 1000000;  /* 1 ms */

	if (arp_lookup(l, addr, mac))
		return 0;
	/* The peer's port socket never reads: the datagram costs it a few
	 * bytes of receive buffer, once per insertion. */
	if (sendto(l->port_fd, "", 0, 0, (struct sockaddr *)&to, sizeof(to)) < 0)
		return -EHOSTUNREACH;
	while (waited < timeout_ns) {
		struct timespec ts = { 0, (long)step };

		nanosleep(&ts, NULL);
		waited += step;
		if (arp_lookup(l, addr, mac))
			return 0;
	}
	return -EHOSTUNREACH;
}

/* ---- sending ---- */

static struct sockaddr_ll dest(const struct eth_link *l, const struct eth_send *s)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_PM_TYPE),
				   .sll_ifindex = l->ifindex, .sll_halen = 6 };

	memcpy(sll.sll_addr, s->mac, 6);
	return sll;
}

static void link_hdr(const struct eth_link *l, const struct eth_send *s,
		     uint8_t out[ETH_LINK_HDR_BYTES])
{
	struct eth_link_hdr h = { .dst_port = s->port, .src_port = l->port, .src_addr = l->addr,
				  .len = (uint16_t)s->len };

	eth_link_hdr_encode(&h, out);
}

/* A lone small frame (a ping-pong's message, an ACK): gathered and sent
 * with sendto, which copies no message header or iovec in. */
static int send_lone(struct eth_link *l, const struct eth_send *s)
{
	uint8_t buf[ETH_LINK_HDR_BYTES + ETH_LONE_MAX];
	struct sockaddr_ll to = dest(l, s);
	size_t off = ETH_LINK_HDR_BYTES;

	link_hdr(l, s, buf);
	for (int i = 0; i < s->niov; i++) {
		memcpy(buf + off, s->iov[i].iov_base, s->iov[i].iov_len);
		off += s->iov[i].iov_len;
	}
	for (;;) {
		if (syscall(SYS_sendto, l->fd, buf, off, 0, &to, sizeof(to)) >= 0)
			return 0;
		if (errno != EINTR)
			return -errno;
	}
}

int eth_link_send(struct eth_link *l, const struct eth_send *s, int n, int *err)
{
	struct mmsghdr mh[ETH_LINK_BATCH];
	struct sockaddr_ll to[ETH_LINK_BATCH];
	struct iovec iov[ETH_LINK_BATCH][3];
	uint8_t hdr[ETH_LINK_BATCH][ETH_LINK_HDR_BYTES];
	int done = 0;

	*err = 0;
	if (n == 1 && s->len <= ETH_LONE_MAX) {
		*err = send_lone(l, s);
		return *err ? 0 : 1;
	}
	for (int i = 0; i < n; i++) {
		to[i] = dest(l, &s[i]);
		link_hdr(l, &s[i], hdr[i]);
		iov[i][0] = (struct iovec){ hdr[i], ETH_LINK_HDR_BYTES };
		for (int v = 0; v < s[i].niov && v < 2; v++)
			iov[i][v + 1] = s[i].iov[v];
		mh[i] = (struct mmsghdr){ .msg_hdr = { .msg_name = &to[i],
						       .msg_namelen = sizeof(to[i]),
						       .msg_iov = iov[i],
						       .msg_iovlen = (size_t)(s[i].niov < 2 ? s[i].niov : 2) + 1 } };
	}
	while (done < n) {
		int r = sendmmsg(l->fd, mh + done, (unsigned)(n - done), 0);

		if (r > 0) {
			done += r;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		*err = r < 0 ? -errno : -EIO;
		break;
	}
	return done;
}

/* ---- receiving ---- */

/* The kernel marks a frame LOSING when it dropped some for a full ring
 * since the statistics were last read; reading them resets them. */
static uint64_t overflowed(struct eth_link *l)
{
	struct tpacket_stats st = { 0 };
	socklen_t len = sizeof(st);

	if (getsockopt(l->fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) < 0)
		return 0;
	return st.tp_drops;
}

int eth_link_receive(struct eth_link *l, int max, eth_packet_fn *fn, void *arg,
		     struct eth_rx_drops *drops)
{
	int taken = 0;

	while (taken < max) {
		struct tpacket2_hdr *h = (void *)(l->ring + (size_t)l->next * l->frame_bytes);
		uint32_t st = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);

		if (!(st & TP_STATUS_USER))
			break;
		const uint8_t *p = (const uint8_t *)h + h->tp_net;
		struct eth_link_hdr lh;

		if (st & TP_STATUS_LOSING)
			drops->overflow += overflowed(l);
		/* A frame cut to the ring's frame size (COPY), or malformed, or
		 * for another port (the filter keeps those out: a guard). */
		if ((st & TP_STATUS_COPY) || h->tp_snaplen != h->tp_len ||
		    eth_link_hdr_decode(p, h->tp_snaplen, &lh) || lh.dst_port != l->port)
			drops->malformed++;
		else
			fn(arg, p + ETH_LINK_HDR_BYTES, lh.len, lh.src_addr, htons(lh.src_port));
		/* The frame goes back to the kernel only now: fn read it in
		 * place. */
		__atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
		l->next = (l->next + 1) & (l->frames - 1);
		taken++;
	}
	return taken;
}
