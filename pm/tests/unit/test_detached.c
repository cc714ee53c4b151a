/* SPDX-License-Identifier: MIT */
/*
 * test_detached.c - detached contexts (PM_OPEN_DETACHED): two processes
 * started without any launcher find each other by the addresses they
 * exchange over a socketpair, as libfabric's fi_pingpong does over its own
 * TCP socket, and talk: messages both ways, every size up to the largest,
 * a remote read.  Once over udp on loopback (PM_DEVICE=udp): a packet sent
 * before its receiver inserted the sender is dropped, counted, and
 * delivered once the receiver has (Go-Back-N resends it).  Once on the
 * default device, composite, which reaches a process of this host through
 * shm: a message sent before the receiver inserted the sender waits in its
 * ring, nothing dropped.  Contexts of one process reach each other the
 * same way, and a composite context reaches a udp-only one over udp.  Then
 * what must be refused: malformed and foreign addresses, packets without
 * the receiver's key or from a socket it does not know, shm alone.
 *
 * Every wait is bounded (BUDGET_NS); the parent kills and reaps the child
 * on any failure of its own.
 */
#include "check.h"
#include "pm.h"
#include "udp/wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUDGET_NS (20ull * 1000000000ull)
#define ROUNDS 64
#define MAGIC_REGION 0x5eedu

static const char *dir;
static pid_t child = -1;

static void kill_child(void)
{
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		child = -1;
	}
}

/* Exactly len bytes from fd, or fail after the budget. */
static void read_all(int fd, void *buf, size_t len)
{
	uint64_t end = check_now_ns() + BUDGET_NS;
	size_t got = 0;

	while (got < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		CHECK_MSG(check_now_ns() < end, "no word from the other process");
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t n = read(fd, (char *)buf + got, len - got);

		CHECK_MSG(n > 0, "the other process hung up");
		got += (size_t)n;
	}
}

static void write_all(int fd, const void *buf, size_t len)
{
	CHECK_EQ(write(fd, buf, len), (long long)len);
}

/* Byte offsets of a detached address (docs/pm/wire.md, "Addresses"). */
enum { A_KIND = 0, A_NICS = 1, A_ID = 4, A_KEY = 8, A_HOST = 16, A_PID = 20, A_NIC0 = 24 };

/* A detached context on device (NULL: the default, composite). */
static pm_context_t *open_detached(const char *device)
{
	struct pm_open_attr attr = { .flags = PM_OPEN_DETACHED, .device = device };
	pm_context_t *ctx = NULL;
	unsigned char a[PM_ADDRESS_MAX];
	size_t len = sizeof(a);
	uint32_t pid;
	bool udp_only = device && strcmp(device, "udp") == 0;

	CHECK_OK(pm_open(&ctx, &attr));
	CHECK_EQ(pm_rank(ctx), 0);
	CHECK_EQ(pm_size(ctx), 1);
	/* Itself: over loopback alone, else in its own shm segment. */
	CHECK(strcmp(pm_peer_device(ctx, 0), udp_only ? "udp" : "shm") == 0);
	/* Its address names its process only when shm can reach it. */
	CHECK_OK(pm_address(ctx, a, &len));
	memcpy(&pid, a + A_PID, 4);
	CHECK_EQ(pid, udp_only ? 0 : (uint32_t)getpid());
	return ctx;
}

static bool on_shm(const char *device)
{
	return !device || strcmp(device, "udp") != 0;
}

/* Send one message of len bytes with pattern seed to peer, within the budget. */
static void send_msg(pm_context_t *ctx, int peer, size_t len, uint64_t seed)
{
	uint64_t end = check_now_ns() + BUDGET_NS;
	void *buf;
	int err;

	while ((err = pm_send_buffer(ctx, peer, len, &buf)) == -EAGAIN) {
		CHECK_MSG(check_now_ns() < end, "no send space for %zu bytes", len);
		pm_wait(ctx, 10);
	}
	CHECK_OK(err);
	check_fill(buf, len, seed);
	CHECK_OK(pm_send(ctx, peer, len));
}

static void recv_msg(pm_context_t *ctx, struct pm_msg *m)
{
	uint64_t end = check_now_ns() + BUDGET_NS;
	int err;

	while ((err = pm_recv(ctx, m)) == -EAGAIN) {
		CHECK_MSG(check_now_ns() < end, "no message came");
		pm_wait(ctx, 10);
	}
	CHECK_OK(err);
}

static uint64_t drops(pm_context_t *ctx)
{
	struct pm_stats st;

	CHECK_OK(pm_stats_get(ctx, &st));
	return st.drops;
}

/*
 * One side of the exchange.  The child (second) holds back its insertion
 * until the parent's first message has reached it: over udp it is dropped,
 * on shm it waits unseen in the ring.
 */
static void run(int fd, bool first, const char *device)
{
	pm_context_t *ctx = open_detached(device);
	bool shm = on_shm(device);
	unsigned char me[PM_ADDRESS_MAX], other[PM_ADDRESS_MAX];
	size_t len = sizeof(me);
	int peer = -1;
	char go = 'g';

	check_set_tag("%s %s", first ? "parent" : "child", device ? device : "composite");
	CHECK_OK(pm_address(ctx, me, &len));
	CHECK(len >= 32 && len <= PM_ADDRESS_MAX);
	write_all(fd, &len, sizeof(len));
	write_all(fd, me, len);
	size_t olen;

	read_all(fd, &olen, sizeof(olen));
	CHECK(olen <= sizeof(other));
	read_all(fd, other, olen);

	if (first) {
		CHECK_OK(pm_peer_insert(ctx, other, olen, &peer));
		CHECK_EQ(peer, 1);
		CHECK_EQ(pm_size(ctx), 2);
		/* Sent before the child knows us: its packets are dropped. */
		send_msg(ctx, peer, 100, 1);
		write_all(fd, &go, 1);
	} else {
		uint64_t before = drops(ctx), end = check_now_ns() + BUDGET_NS;
		struct pm_msg m;

		read_all(fd, &go, 1);
		while (!shm && drops(ctx) == before) {
			CHECK_MSG(check_now_ns() < end, "the early packet was never dropped");
			CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);
			pm_wait(ctx, 10);
		}
		/* On shm it is in our segment already, but not ours to see
		 * before its sender is our peer; and nothing was dropped. */
		CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);
		int w = pm_wait(ctx, 50);

		CHECK(w == 0 || w == -ETIMEDOUT);
		CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);
		if (shm)
			CHECK_EQ(drops(ctx), before);
		CHECK_OK(pm_peer_insert(ctx, other, olen, &peer));
		CHECK_EQ(peer, 1);
	}
	/* The same peer again, and itself: numbers given before. */
	int again = -1;

	CHECK_OK(pm_peer_insert(ctx, other, olen, &again));
	CHECK_EQ(again, 1);
	CHECK_OK(pm_peer_insert(ctx, me, len, &again));
	CHECK_EQ(again, 0);
	CHECK_EQ(pm_size(ctx), 2);
	CHECK(strcmp(pm_peer_device(ctx, 1), shm ? "shm" : "udp") == 0);

	struct pm_msg m;

	if (!first) {
		/* The early message, resent once we inserted its sender. */
		recv_msg(ctx, &m);
		CHECK_EQ(m.peer, 1);
		CHECK_EQ(m.len, 100);
		CHECK_PATTERN(m.data, m.len, 1);
		CHECK_OK(pm_release(ctx, &m));
	}

	/* Ping-pong of every size up to the largest, both ways: the parent
	 * sends, the child checks and answers with its own pattern. */
	size_t max = pm_max_message(ctx, 1);

	CHECK(max >= 65536);
	for (unsigned r = 0; r < ROUNDS; r++) {
		size_t n = r == ROUNDS - 1 ? max : (size_t)r * r * 31 % max;

		if (first) {
			send_msg(ctx, 1, n, 100 + r);
			recv_msg(ctx, &m);
			CHECK_EQ(m.len, (long long)n);
			CHECK_PATTERN(m.data, m.len, 1000 + r);
		} else {
			recv_msg(ctx, &m);
			CHECK_EQ(m.len, (long long)n);
			CHECK_PATTERN(m.data, m.len, 100 + r);
			send_msg(ctx, 1, n, 1000 + r);
		}
		CHECK_EQ(m.peer, 1);
		CHECK_OK(pm_release(ctx, &m));
	}

	/* A remote read: the child exposes a region and sends its key; the
	 * parent reads it whole and says so. */
	static uint8_t region[200000], copy[sizeof(region)];

	if (first) {
		uint64_t key;
		struct pm_op op;
		uint64_t end = check_now_ns() + BUDGET_NS;

		recv_msg(ctx, &m);
		CHECK_EQ(m.len, sizeof(key));
		memcpy(&key, m.data, sizeof(key));
		CHECK_OK(pm_release(ctx, &m));
		CHECK_OK(pm_read(ctx, 1, copy, sizeof(copy), key, 0, &op));
		while (!pm_test(ctx, &op)) {
			CHECK_MSG(check_now_ns() < end, "the read never completed");
			pm_wait(ctx, 10);
		}
		CHECK_OK(op.status);
		CHECK_PATTERN(copy, sizeof(copy), MAGIC_REGION);
		/* The reader served nothing. */
		CHECK_EQ(pm_requests_served(ctx), 0);
		send_msg(ctx, 1, 8, 7);
	} else {
		pm_mr_t *mr;
		uint64_t key;
		void *buf;

		check_fill(region, sizeof(region), MAGIC_REGION);
		CHECK_OK(pm_mr_register(ctx, region, sizeof(region), &mr));
		key = pm_mr_key(mr);
		CHECK_OK(pm_send_buffer(ctx, 1, sizeof(key), &buf));
		memcpy(buf, &key, sizeof(key));
		uint64_t served = pm_requests_served(ctx);

		CHECK_OK(pm_send(ctx, 1, sizeof(key)));
		recv_msg(ctx, &m);      /* the reader is done */
		CHECK_PATTERN(m.data, m.len, 7);
		/* Its read request, taken in and answered inside PM (over
		 * udp); on shm the reader copied by itself. */
		if (shm)
			CHECK_EQ(pm_requests_served(ctx), served);
		else
			CHECK(pm_requests_served(ctx) > served);
		CHECK_OK(pm_release(ctx, &m));
		CHECK_OK(pm_mr_deregister(ctx, mr));
	}
	/* Both done before either closes: nothing is left to resend. */
	write_all(fd, &go, 1);
	read_all(fd, &go, 1);
	CHECK_OK(pm_close(ctx));
}

static void test_two_processes(const char *device)
{
	int sv[2];

	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	fflush(NULL);
	child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		close(sv[0]);
		run(sv[1], false, device);
		_exit(0);
	}
	close(sv[1]);
	run(sv[0], true, device);

	int status = 0;
	uint64_t end = check_now_ns() + BUDGET_NS;

	while (waitpid(child, &status, WNOHANG) == 0) {
		CHECK_MSG(check_now_ns() < end, "the child never ended");
		usleep(10000);
	}
	child = -1;
	CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed (status %d)",
		  status);
	close(sv[0]);
}

static void test_bad_addresses(void)
{
	pm_context_t *a = open_detached("udp"), *b = open_detached("udp"), *job;
	unsigned char addr[PM_ADDRESS_MAX], bad[PM_ADDRESS_MAX], jaddr[PM_ADDRESS_MAX];
	size_t len = sizeof(addr), jlen = sizeof(jaddr);
	int peer = -1;

	check_set_tag("addresses");
	CHECK_OK(pm_address(b, addr, &len));
	CHECK(len < PM_ADDRESS_MAX);            /* room for the padding case */

	/* Malformed: short, unknown kind, no NIC or too many, padding that
	 * is not zero, no port, no address. */
	CHECK_ERR(pm_peer_insert(a, addr, 10, &peer), -EINVAL);
	CHECK_ERR(pm_peer_insert(a, addr, len - 1, &peer), -EINVAL);
	CHECK_ERR(pm_peer_insert(a, NULL, len, &peer), -EINVAL);
	memcpy(bad, addr, len);
	bad[A_KIND] = 9;
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EINVAL);
	memcpy(bad, addr, len);
	bad[A_NICS] = 0;
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EINVAL);
	bad[A_NICS] = 4;
	CHECK_ERR(pm_peer_insert(a, bad, PM_ADDRESS_MAX, &peer), -EINVAL);
	memset(bad, 0, sizeof(bad));
	memcpy(bad, addr, len);
	bad[len] = 1;
	CHECK_ERR(pm_peer_insert(a, bad, len + 1, &peer), -EINVAL);
	memcpy(bad, addr, len);
	memset(bad + A_NIC0 + 4, 0, 2);
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EINVAL);
	memcpy(bad, addr, len);
	memset(bad + A_NIC0, 0, 4);
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EINVAL);
	/* No context has id 0, and no pid is above 2^31 - 1. */
	memcpy(bad, addr, len);
	memset(bad + A_ID, 0, 4);
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EINVAL);
	memcpy(bad, addr, len);
	bad[A_PID + 3] = 0x80;
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EINVAL);
	/* Zero padding up to PM_ADDRESS_MAX is fine (the provider's names). */
	memset(bad, 0, sizeof(bad));
	memcpy(bad, addr, len);
	CHECK_OK(pm_peer_insert(a, bad, PM_ADDRESS_MAX, &peer));
	CHECK_EQ(peer, 1);
	CHECK_EQ(pm_size(a), 2);

	/* A known context's socket and id with another key is not it. */
	memcpy(bad, addr, len);
	bad[A_KEY] ^= 1;
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -EADDRNOTAVAIL);
	/* A network this context is not on. */
	memcpy(bad, addr, len);
	bad[A_ID] ^= 1;
	bad[A_NIC0] = 10;
	bad[A_NIC0 + 1] = 255;
	CHECK_ERR(pm_peer_insert(a, bad, len, &peer), -ENETUNREACH);
	CHECK_EQ(pm_size(a), 2);

	/* A launcher's job and a detached context are strangers both ways. */
	unsetenv("PM_DEVICE");
	CHECK_OK(pm_open(&job, NULL));
	CHECK_OK(pm_address(job, jaddr, &jlen));
	CHECK_ERR(pm_peer_insert(a, jaddr, jlen, &peer), -EADDRNOTAVAIL);
	CHECK_ERR(pm_peer_insert(job, addr, len, &peer), -EADDRNOTAVAIL);
	CHECK_OK(pm_close(job));

	CHECK_OK(pm_close(a));
	CHECK_OK(pm_close(b));
}

/*
 * The key is what lets a packet in: one without it, or with it but from a
 * socket the context never inserted, is dropped and counted, never
 * delivered.
 */
static void test_foreign_packets(void)
{
	pm_context_t *ctx = open_detached("udp");
	unsigned char addr[PM_ADDRESS_MAX];
	size_t len = sizeof(addr);
	uint64_t key;
	uint32_t id;
	struct sockaddr_in to = { .sin_family = AF_INET };
	uint8_t pkt[WIRE_HDR_BYTES + WIRE_MSG_HDR_BYTES + 8] = { 0 };
	struct pm_msg m;

	check_set_tag("foreign");
	CHECK_OK(pm_address(ctx, addr, &len));
	memcpy(&id, addr + A_ID, 4);
	memcpy(&key, addr + A_KEY, 8);
	memcpy(&to.sin_addr.s_addr, addr + A_NIC0, 4);
	memcpy(&to.sin_port, addr + A_NIC0 + 4, 2);

	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	CHECK(fd >= 0);
	uint64_t before = drops(ctx);

	for (int k = 0; k < 2; k++) {
		struct wire_hdr h = {
			.version = WIRE_VERSION, .type = WIRE_DATA,
			.flags = WIRE_F_FIRST | WIRE_F_LAST,
			.len = WIRE_MSG_HDR_BYTES + 8,
			.jobkey = k == 0 ? key ^ 0x1 : key, /* wrong key, then the right one */
			.src = 12345, .dst = id, .seq = 1,
		};
		struct wire_msg_hdr mh = { .total = 8, .kind = WIRE_KIND_MSG };

		wire_encode(&h, pkt);
		wire_encode_msg(&mh, pkt + WIRE_HDR_BYTES);
		CHECK_EQ(sendto(fd, pkt, sizeof(pkt), 0, (struct sockaddr *)&to, sizeof(to)),
			 (long long)sizeof(pkt));
	}
	uint64_t end = check_now_ns() + BUDGET_NS;

	while (drops(ctx) < before + 2) {
		CHECK_MSG(check_now_ns() < end, "foreign packets were not dropped");
		CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);
		pm_wait(ctx, 10);
	}
	CHECK_EQ(drops(ctx), before + 2);
	CHECK_ERR(pm_recv(ctx, &m), -EAGAIN);
	close(fd);
	CHECK_OK(pm_close(ctx));
}

/* Insert each of two contexts into the other: their numbers for each other. */
static void pair(pm_context_t *a, pm_context_t *b, int *a_to_b, int *b_to_a)
{
	unsigned char aa[PM_ADDRESS_MAX], ba[PM_ADDRESS_MAX];
	size_t alen = sizeof(aa), blen = sizeof(ba);

	CHECK_OK(pm_address(a, aa, &alen));
	CHECK_OK(pm_address(b, ba, &blen));
	CHECK_OK(pm_peer_insert(a, ba, blen, a_to_b));
	CHECK_OK(pm_peer_insert(b, aa, alen, b_to_a));
}

/* A message of len bytes from one context of this process to another,
 * progressing both (a udp receiver must acknowledge), within the budget. */
static void pass(pm_context_t *from, int to_peer, pm_context_t *to, int from_peer, size_t len,
		 uint64_t seed)
{
	uint64_t end = check_now_ns() + BUDGET_NS;
	struct pm_msg m;
	void *buf;
	int err;

	while ((err = pm_send_buffer(from, to_peer, len, &buf)) == -EAGAIN) {
		CHECK_MSG(check_now_ns() < end, "no send space");
		pm_wait(to, 0);
	}
	CHECK_OK(err);
	check_fill(buf, len, seed);
	CHECK_OK(pm_send(from, to_peer, len));
	while ((err = pm_recv(to, &m)) == -EAGAIN) {
		CHECK_MSG(check_now_ns() < end, "no message came");
		pm_wait(from, 0);
		pm_wait(to, 1);
	}
	CHECK_OK(err);
	CHECK_EQ(m.peer, from_peer);
	CHECK_EQ(m.len, (long long)len);
	CHECK_PATTERN(m.data, m.len, seed);
	CHECK_OK(pm_release(to, &m));
}

/*
 * Three contexts of one process: two composite ones reach each other
 * through shm, and either reaches a udp-only one (its address names no
 * process) over udp, both ways.  Inserting again gives the same numbers.
 */
static void test_same_process(void)
{
	pm_context_t *a = open_detached(NULL), *b = open_detached("composite");
	pm_context_t *u = open_detached("udp");
	int ab, ba, au, ua, again;

	check_set_tag("one process");
	pair(a, b, &ab, &ba);
	CHECK_EQ(ab, 1);
	CHECK_EQ(ba, 1);
	CHECK(strcmp(pm_peer_device(a, ab), "shm") == 0);
	CHECK(strcmp(pm_peer_device(b, ba), "shm") == 0);
	pair(a, u, &au, &ua);
	CHECK_EQ(au, 2);
	CHECK_EQ(ua, 1);
	CHECK(strcmp(pm_peer_device(a, au), "udp") == 0);
	CHECK(strcmp(pm_peer_device(u, ua), "udp") == 0);
	pair(a, b, &again, &ba);
	CHECK_EQ(again, ab);
	CHECK_EQ(pm_size(a), 3);

	for (unsigned r = 0; r < 8; r++) {
		size_t n = 1 + r * 4099;

		pass(a, ab, b, ba, n, 10 + r);
		pass(b, ba, a, ab, n, 20 + r);
		pass(a, au, u, ua, n, 30 + r);
		pass(u, ua, a, au, n, 40 + r);
	}
	/* A remote write into b's region through shm. */
	static uint8_t region[65536], src[sizeof(region)];
	pm_mr_t *mr;
	struct pm_op op;

	CHECK_OK(pm_mr_register(b, region, sizeof(region), &mr));
	check_fill(src, sizeof(src), 77);
	CHECK_OK(pm_write(a, ab, src, sizeof(src), pm_mr_key(mr), 0, &op));
	while (!pm_test(a, &op))
		pm_wait(a, 1);
	CHECK_OK(op.status);
	CHECK_PATTERN(region, sizeof(region), 77);
	CHECK_OK(pm_mr_deregister(b, mr));

	/* Over udp: a read started right after a write, without waiting for
	 * it, sees it (one peer's remote operations take effect in order). */
	static uint8_t back[sizeof(region)];
	struct pm_op wop, rop;
	uint64_t end = check_now_ns() + BUDGET_NS;

	memset(region, 0, sizeof(region));
	check_fill(src, sizeof(src), 78);
	CHECK_OK(pm_mr_register(u, region, sizeof(region), &mr));
	CHECK_OK(pm_write(a, au, src, sizeof(src), pm_mr_key(mr), 0, &wop));
	CHECK_OK(pm_read(a, au, back, sizeof(back), pm_mr_key(mr), 0, &rop));
	while (!pm_test(a, &rop) || !pm_test(a, &wop)) {
		CHECK_MSG(check_now_ns() < end, "the write and read never completed");
		pm_wait(u, 0);
		pm_wait(a, 1);
	}
	CHECK_OK(wop.status);
	CHECK_OK(rop.status);
	CHECK_PATTERN(back, sizeof(back), 78);
	CHECK_OK(pm_mr_deregister(u, mr));

	CHECK_OK(pm_close(u));
	CHECK_OK(pm_close(b));
	CHECK_OK(pm_close(a));
}

static void test_open_errors(void)
{
	struct pm_open_attr attr = { .flags = PM_OPEN_DETACHED };
	pm_context_t *ctx = NULL;

	check_set_tag("open");
	attr.device = "shm";
	CHECK_ERR(pm_open(&ctx, &attr), -ENOTSUP);
	attr.device = "nonesuch";
	CHECK_ERR(pm_open(&ctx, &attr), -ENODEV);
	CHECK(ctx == NULL);
	attr.device = NULL;
	attr.flags = 0x80;
	CHECK_ERR(pm_open(&ctx, &attr), -EINVAL);
	/* PM_DEVICE chooses too: composite and udp are the ones. */
	setenv("PM_DEVICE", "shm", 1);
	attr.flags = PM_OPEN_DETACHED;
	CHECK_ERR(pm_open(&ctx, &attr), -ENOTSUP);
	setenv("PM_DEVICE", "udp", 1);
	CHECK_OK(pm_open(&ctx, &attr));
	CHECK(strcmp(pm_peer_device(ctx, 0), "udp") == 0);
	CHECK_OK(pm_close(ctx));
	setenv("PM_DEVICE", "composite", 1);
	CHECK_OK(pm_open(&ctx, &attr));
	CHECK(strcmp(pm_peer_device(ctx, 0), "shm") == 0);
	CHECK_OK(pm_close(ctx));
	unsetenv("PM_DEVICE");
}

int main(void)
{
	check_unset_pmix();
	dir = check_tmp_dir_make("detached");
	setenv("PM_STATS_DIR", dir, 1);
	unsetenv("PM_DEVICE");
	/* Loopback only: the test must not depend on the machine's NICs. */
	setenv("PM_UDP_NICS", "127.0.0.1", 1);
	atexit(kill_child);

	test_open_errors();
	test_bad_addresses();
	test_foreign_packets();
	test_same_process();
	test_two_processes("udp");
	test_two_processes(NULL);
	printf("detached: ok\n");
	return 0;
}
