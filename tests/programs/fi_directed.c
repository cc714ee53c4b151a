/* SPDX-License-Identifier: MIT */
/*
 * fi_directed.c - libfabric API 2.x's directed receives over provider pm,
 * between three processes of one host started by this program (no
 * launcher: the provider opens detached PM contexts; names go through
 * pipes, as fi_getname/fi_av_insert users exchange them).
 *
 *   fi_directed tagged|exact|endpoints
 *
 * tagged: the endpoints ask FI_TAGGED | FI_TAGGED_DIRECTED_RECV at API 2.5
 * (not FI_DIRECTED_RECV).  The receiver posts a tagged receive from sender
 * 2; sender 1 sends first with the same tag, and its message must not
 * match (nothing completes while it waits); then sender 2 sends and the
 * receive gets its payload; a receive from any source then gets sender 1's.
 * exact: FI_EXACT_DIRECTED_RECV: a receive from FI_ADDR_UNSPEC is refused
 * (-FI_EINVAL), a directed one works.
 * endpoints: as tagged, but senders 1 and 2 are two endpoints of one
 * process (one PM context): an address names an endpoint, not a process.
 * Prints "fi_directed: MODE passed"; exits 1 with a message otherwise.
 *
 *   cc fi_directed.c -lfabric   (run under a libfabric of 2.0 or later)
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* libfabric 2.x's values (fabric.h of v2.5.1); this builds with 1.x headers. */
#define TAGGED_DIRECTED_RECV (1ULL << 45)
#define EXACT_DIRECTED_RECV (1ULL << 48)
#define NAME_LEN 64
#define TAG 7

#define OK(call)                                                                  \
	do {                                                                      \
		int ret_ = (int)(call);                                           \
		if (ret_) {                                                       \
			fprintf(stderr, "fi_directed[%d]: %s: %s\n", (int)getpid(), \
				#call, fi_strerror(-ret_));                       \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

static void fail(const char *what)
{
	fprintf(stderr, "fi_directed[%d]: %s\n", (int)getpid(), what);
	exit(1);
}

struct node {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	char name[NAME_LEN];
};

static void open_node(struct node *n, uint64_t caps)
{
	struct fi_info *hints = fi_allocinfo();

	if (!hints)
		fail("fi_allocinfo");
	hints->caps = caps;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->av_type = FI_AV_TABLE;
	OK(fi_getinfo(FI_VERSION(2, 5), NULL, NULL, 0, hints, &n->info));
	fi_freeinfo(hints);
	if ((n->info->caps & caps) != caps)
		fail("the provider's answer lacks a capability asked");
	OK(fi_fabric(n->info->fabric_attr, &n->fabric, NULL));
	OK(fi_domain(n->fabric, n->info, &n->domain, NULL));

	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };

	OK(fi_av_open(n->domain, &av_attr, &n->av, NULL));
	OK(fi_cq_open(n->domain, &cq_attr, &n->cq, NULL));
	OK(fi_endpoint(n->domain, n->info, &n->ep, NULL));
	OK(fi_ep_bind(n->ep, &n->av->fid, 0));
	OK(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
	OK(fi_enable(n->ep));

	size_t len = sizeof(n->name);

	memset(n->name, 0, sizeof(n->name));
	OK(fi_getname(&n->ep->fid, n->name, &len));
}

/* A second endpoint of n's domain, with its own CQ, on n's AV. */
static void open_second_ep(const struct node *n, struct node *m)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	size_t len = sizeof(m->name);

	*m = *n;
	OK(fi_cq_open(m->domain, &cq_attr, &m->cq, NULL));
	OK(fi_endpoint(m->domain, m->info, &m->ep, NULL));
	OK(fi_ep_bind(m->ep, &m->av->fid, 0));
	OK(fi_ep_bind(m->ep, &m->cq->fid, FI_TRANSMIT | FI_RECV));
	OK(fi_enable(m->ep));
	memset(m->name, 0, sizeof(m->name));
	OK(fi_getname(&m->ep->fid, m->name, &len));
	if (memcmp(m->name, n->name, sizeof(m->name)) == 0)
		fail("two endpoints of one domain have the same name");
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* One completion of n's CQ within seconds (reading drives progress): 1,
 * or 0 when none came. */
static int completion(struct node *n, double seconds, struct fi_cq_tagged_entry *e)
{
	double end = now() + seconds;

	while (now() < end) {
		ssize_t r = fi_cq_read(n->cq, e, 1);

		if (r == 1)
			return 1;
		if (r != -FI_EAGAIN) {
			struct fi_cq_err_entry err = { 0 };

			fi_cq_readerr(n->cq, &err, 0);
			fprintf(stderr, "fi_directed: CQ error %s\n", fi_strerror(err.err));
			exit(1);
		}
	}
	return 0;
}

static void xread(int fd, void *buf, size_t len)
{
	if (read(fd, buf, len) != (ssize_t)len)
		fail("a pipe closed early");
}

static void xwrite(int fd, const void *buf, size_t len)
{
	if (write(fd, buf, len) != (ssize_t)len)
		fail("a pipe write failed");
}

/* A sender process with the endpoints of senders first..last (one, or
 * two of one domain): each index and name up, the receiver's name down;
 * then on a byte i down, sender i sends "i" and, once the send completed,
 * says so up; a 0 byte down: the receiver is done. */
static int sender(int first, int last, uint64_t caps, int up, int down)
{
	struct node n[3];
	char peer[NAME_LEN], msg[1 + NAME_LEN], go;
	fi_addr_t to;
	struct fi_cq_tagged_entry e;

	open_node(&n[first], caps);
	if (last > first)
		open_second_ep(&n[first], &n[last]);
	for (int i = first; i <= last; i++) {
		msg[0] = (char)i;
		memcpy(msg + 1, n[i].name, NAME_LEN);
		xwrite(up, msg, sizeof(msg));
	}
	xread(down, peer, NAME_LEN);
	/* One AV for both endpoints: one insertion. */
	if (fi_av_insert(n[first].av, peer, 1, &to, 0, NULL) != 1)
		fail("fi_av_insert of the receiver");
	for (xread(down, &go, 1); go; xread(down, &go, 1)) {
		char payload = (char)('0' + go);

		if (go < first || go > last)
			fail("asked to send from an endpoint this process has not");
		OK(fi_tsend(n[(int)go].ep, &payload, 1, NULL, to, TAG, NULL));
		if (!completion(&n[(int)go], 10, &e))
			fail("no send completion");
		xwrite(up, &payload, 1);
	}
	return 0;
}

/* A tagged receive of one byte from src, posted; what it got, or fail. */
static char receive(struct node *n, fi_addr_t src, const char *what)
{
	char buf = 0;
	struct fi_cq_tagged_entry e;

	OK(fi_trecv(n->ep, &buf, 1, NULL, src, TAG, 0, NULL));
	if (!completion(n, 10, &e))
		fail(what);
	return buf;
}

int main(int argc, char **argv)
{
	const char *mode = argc == 2 ? argv[1] : "";

	if (strcmp(mode, "tagged") && strcmp(mode, "exact") && strcmp(mode, "endpoints")) {
		fprintf(stderr, "usage: %s tagged|exact|endpoints\n", argv[0]);
		return 2;
	}
	bool exact = strcmp(mode, "exact") == 0;
	bool one_process = strcmp(mode, "endpoints") == 0;
	uint64_t caps = FI_TAGGED | (exact ? EXACT_DIRECTED_RECV : TAGGED_DIRECTED_RECV);
	/* Which sender process (its down pipe) hosts sender i. */
	int host[3] = { 0, 1, one_process ? 1 : 2 }, nprocs = one_process ? 1 : 2;
	int up[2], down[3][2];
	pid_t pids[3];

	if (pipe(up))
		fail("pipe");
	for (int p = 1; p <= nprocs; p++) {
		if (pipe(down[p]))
			fail("pipe");
		pids[p] = fork();
		if (pids[p] < 0)
			fail("fork");
		if (pids[p] == 0) {
			/* Only the receiver writes down: a receiver that
			 * failed and exited ends the sender's reads. */
			close(down[p][1]);
			close(up[0]);
			return one_process ? sender(1, 2, caps, up[1], down[p][0])
					   : sender(p, p, caps, up[1], down[p][0]);
		}
		close(down[p][0]);
	}

	struct node n;
	char names[3][NAME_LEN], msg[1 + NAME_LEN], stop = 0, sent, buf = 0;
	fi_addr_t addrs[3];
	struct fi_cq_tagged_entry e;

	open_node(&n, caps);
	for (int k = 0; k < 2; k++) {
		xread(up[0], msg, sizeof(msg));
		if (msg[0] != 1 && msg[0] != 2)
			fail("a sender's index is wrong");
		memcpy(names[(int)msg[0]], msg + 1, NAME_LEN);
	}
	for (int p = 1; p <= nprocs; p++)
		xwrite(down[p][1], n.name, NAME_LEN);
	for (int i = 1; i <= 2; i++)
		if (fi_av_insert(n.av, names[i], 1, &addrs[i], 0, NULL) != 1)
			fail("fi_av_insert of a sender");
	if (addrs[1] == addrs[2])
		fail("the two senders got one address");
	if (exact && fi_trecv(n.ep, &buf, 1, NULL, FI_ADDR_UNSPEC, TAG, 0, NULL) != -FI_EINVAL)
		fail("FI_EXACT_DIRECTED_RECV took a receive from FI_ADDR_UNSPEC");

	/* A receive from sender 2; sender 1's message, with the same tag,
	 * comes first and must not match it. */
	OK(fi_trecv(n.ep, &buf, 1, NULL, addrs[2], TAG, 0, NULL));
	char go = 1;

	xwrite(down[host[1]][1], &go, 1);
	xread(up[0], &sent, 1);
	if (sent != '1')
		fail("sender 1 did not say it sent");
	if (completion(&n, 0.3, &e))
		fail("a receive directed at sender 2 took sender 1's message");
	go = 2;
	xwrite(down[host[2]][1], &go, 1);
	if (!completion(&n, 10, &e))
		fail("the receive directed at sender 2 never completed");
	if (buf != '2')
		fail("the receive directed at sender 2 got another's message");
	char other = receive(&n, exact ? addrs[1] : FI_ADDR_UNSPEC,
			     "sender 1's message never came to a later receive");

	if (other != '1')
		fail("the later receive got the wrong message");
	xread(up[0], &sent, 1);
	for (int p = 1; p <= nprocs; p++)
		xwrite(down[p][1], &stop, 1);
	for (int p = 1; p <= nprocs; p++) {
		int status;

		if (waitpid(pids[p], &status, 0) != pids[p] || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			fail("a sender failed");
	}
	printf("fi_directed: %s passed\n", mode);
	return 0;
}
