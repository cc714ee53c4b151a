/* SPDX-License-Identifier: MIT */
/*
 * mpi_second_ep.c - a second libfabric endpoint of provider pm in an MPI
 * process whose MPI traffic already goes through pm (Open MPI's mtl ofi
 * holds endpoint 0): both share the process's PM context, as Open MPI's
 * btl ofi and mtl ofi do.  Every rank opens its own fabric, domain, AV, CQ
 * and endpoint, checks that its name carries endpoint index 1, exchanges
 * names with MPI_Allgather, and then sends tagged messages (eager and
 * rendezvous sizes, 0 bytes included; every other round with
 * FI_DELIVERY_COMPLETE) to its next neighbour while MPI collectives run
 * through endpoint 0 between the posts and the waits: each endpoint gets
 * only its own messages, whichever endpoint's progress took them from PM.
 * Sources are checked with fi_cq_readfrom, payloads byte by byte.
 * Then FI_RMA on that endpoint: each rank registers a window for remote
 * access (mr_mode VIRT_ADDR | ALLOCATED | PROV_KEY), writes into its next
 * neighbour's with fi_write/fi_writemsg and reads it back with
 * fi_read/fi_readmsg, both checked byte by byte by reader and owner; a
 * counter bound for FI_READ | FI_WRITE counts them; a bad key and an
 * address past the window end give error completions.
 * Then endpoint 1 closes and MPI goes on through endpoint 0 with more
 * than a ring's worth of messages (PM_SHM_RING_KIB, PM_UDP_RING_KIB: 512
 * KiB by default) from every peer, checked byte by byte: a message that
 * endpoint 1's progress took and did not release at its close would hold
 * its sender's ring, which would then wait for room for ever.
 * Prints "mpi_second_ep: N ranks passed" from rank 0.
 *
 *   cc: mpicc mpi_second_ep.c -lfabric
 */
#include <mpi.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_LEN 64
#define ROUNDS 20
#define MSGS 4
#define WLEN (1024 * 1024 + 4093)   /* an RMA window: odd length, odd place */
#define AFTER_BLOCK 4096        /* bytes to each peer per MPI_Alltoall */
#define AFTER_ROUNDS 512        /* 2 MiB from each peer: four rings' worth */

static const size_t sizes[MSGS] = { 0, 64, 8192, 1 << 20 };
static int rank;

#define DIE(...) do { \
	fprintf(stderr, "mpi_second_ep: rank %d: line %d: ", rank, __LINE__); \
	fprintf(stderr, __VA_ARGS__); \
	fputc('\n', stderr); \
	MPI_Abort(MPI_COMM_WORLD, 1); \
} while (0)

#define OK(call) do { \
	long _r = (long)(call); \
	if (_r) \
		DIE("%s: %s", #call, fi_strerror((int)-_r)); \
} while (0)

static unsigned char fill(int from, int round, int m, size_t i)
{
	return (unsigned char)(from * 31 + round * 7 + m * 3 + i * 13);
}

/* Wait for n completions on cq, sources into src; with_mpi: MPI
 * progressing too, else endpoint 1's progress alone. */
static void wait_cq(struct fid_cq *cq, int n, fi_addr_t *src, bool with_mpi)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (n > 0) {
		struct fi_cq_tagged_entry e;
		fi_addr_t from = FI_ADDR_NOTAVAIL;
		ssize_t r = fi_cq_readfrom(cq, &e, 1, &from);

		if (r == 1) {
			if (src && (e.flags & FI_RECV))
				src[e.tag % MSGS] = from;
			n--;
			continue;
		}
		if (r != -FI_EAGAIN) {
			struct fi_cq_err_entry err = { 0 };

			fi_cq_readerr(cq, &err, 0);
			DIE("completion error %d (%s)", err.err, fi_strerror(err.err));
		}
		/* Endpoint 0's progress (MPI's) may be the one that takes our
		 * messages from PM: keep it turning too. */
		int flag;

		if (with_mpi)
			MPI_Iprobe(MPI_ANY_SOURCE, 12345, MPI_COMM_WORLD, &flag,
				   MPI_STATUS_IGNORE);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 60)
			DIE("no completion within 60 s (%d missing)", n);
	}
}

/* Endpoint 1's last progress pass takes a message from PM before it
 * closes: two tagged exchanges around the ring with nothing of MPI in
 * between.  The first may reach a rank still in the barrier before, where
 * endpoint 0's progress takes it; the second is sent only after the
 * first came, so it comes to a rank where endpoint 1 alone progresses. */
static void last_messages(struct fid_ep *ep, struct fid_cq *cq, fi_addr_t to, fi_addr_t from,
			  int prev)
{
	for (uint64_t k = 0; k < 2; k++) {
		unsigned char in = 0, out = (unsigned char)(rank + k);
		struct fi_context2 rctx, sctx;

		OK(fi_trecv(ep, &in, 1, NULL, from, 100 + k, 0, &rctx));
		OK(fi_tsend(ep, &out, 1, NULL, to, 100 + k, &sctx));
		wait_cq(cq, 2, NULL, false);
		if (in != (unsigned char)(prev + k))
			DIE("last message %d from rank %d: got %u", (int)k, prev, in);
	}
}

/* MPI traffic once endpoint 1 is closed (see the top): AFTER_ROUNDS
 * all-to-alls of AFTER_BLOCK bytes, each block naming its sender and round. */
static void traffic_after_close(int size)
{
	size_t n = (size_t)size * AFTER_BLOCK;
	unsigned char *out = malloc(n), *in = malloc(n);

	if (!out || !in)
		DIE("no memory for the traffic after the close");
	for (int r = 0; r < AFTER_ROUNDS; r++) {
		for (int p = 0; p < size; p++)
			memset(out + (size_t)p * AFTER_BLOCK, (rank * 31 + r + p) & 0xff, AFTER_BLOCK);
		if (MPI_Alltoall(out, AFTER_BLOCK, MPI_BYTE, in, AFTER_BLOCK, MPI_BYTE,
				 MPI_COMM_WORLD) != MPI_SUCCESS)
			DIE("MPI_Alltoall %d after the close failed", r);
		for (int p = 0; p < size; p++)
			for (size_t i = 0; i < AFTER_BLOCK; i++)
				if (in[(size_t)p * AFTER_BLOCK + i] != ((p * 31 + r + rank) & 0xff))
					DIE("round %d after the close: byte %zu from rank %d is %u",
					    r, i, p, in[(size_t)p * AFTER_BLOCK + i]);
	}
	free(out);
	free(in);
}

int main(int argc, char **argv)
{
	int size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);

	struct fi_info *hints = fi_allocinfo(), *info = NULL;

	hints->caps = FI_TAGGED | FI_SOURCE | FI_RMA;
	hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
	hints->ep_attr->type = FI_EP_RDM;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->fabric_attr->prov_name = strdup("pm");
	OK(fi_getinfo(FI_VERSION(1, 5), NULL, NULL, 0, hints, &info));

	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_NONE };
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };

	OK(fi_fabric(info->fabric_attr, &fabric, NULL));
	OK(fi_domain(fabric, info, &domain, NULL));
	OK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	OK(fi_av_open(domain, &av_attr, &av, NULL));
	OK(fi_endpoint(domain, info, &ep, NULL));
	OK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	OK(fi_ep_bind(ep, &av->fid, 0));

	struct fid_cntr *cntr;
	struct fi_cntr_attr cntr_attr = { .events = FI_CNTR_EVENTS_COMP };

	OK(fi_cntr_open(domain, &cntr_attr, &cntr, NULL));
	OK(fi_ep_bind(ep, &cntr->fid, FI_READ | FI_WRITE));
	OK(fi_enable(ep));

	unsigned char name[NAME_LEN];
	size_t len = sizeof(name);

	OK(fi_getname(&ep->fid, name, &len));
	if (len != NAME_LEN)
		DIE("name of %zu bytes", len);
	/* Bytes 6-7: the endpoint's index in its process; MPI's is 0. */
	if (name[6] != 1 || name[7] != 0)
		DIE("second endpoint named index %u", name[6] | name[7] << 8);

	unsigned char *names = malloc((size_t)size * NAME_LEN);
	fi_addr_t *addrs = malloc((size_t)size * sizeof(*addrs));

	MPI_Allgather(name, NAME_LEN, MPI_BYTE, names, NAME_LEN, MPI_BYTE, MPI_COMM_WORLD);
	if (fi_av_insert(av, names, (size_t)size, addrs, 0, NULL) != size)
		DIE("fi_av_insert");

	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	unsigned char *sbuf[MSGS], *rbuf[MSGS];
	struct fi_context2 sctx[MSGS], rctx[MSGS];

	for (int m = 0; m < MSGS; m++) {
		sbuf[m] = malloc(sizes[m] + 1);
		rbuf[m] = malloc(sizes[m] + 1);
	}
	for (int round = 0; round < ROUNDS; round++) {
		fi_addr_t src[MSGS];

		for (int m = 0; m < MSGS; m++) {
			for (size_t i = 0; i < sizes[m]; i++)
				sbuf[m][i] = fill(rank, round, m, i);
			memset(rbuf[m], 0xee, sizes[m]);
			src[m] = FI_ADDR_NOTAVAIL;
			OK(fi_trecv(ep, rbuf[m], sizes[m], NULL, addrs[prev], (uint64_t)m, 0,
				    &rctx[m]));
		}
		/* Our receives are posted everywhere before anyone sends. */
		MPI_Barrier(MPI_COMM_WORLD);
		for (int m = 0; m < MSGS; m++) {
			/* Odd rounds ask for delivery completion (a rendezvous
			 * at every size, the empty message included). */
			struct iovec iov = { .iov_base = sbuf[m], .iov_len = sizes[m] };
			struct fi_msg_tagged msg = {
				.msg_iov = &iov, .iov_count = 1, .addr = addrs[next],
				.tag = (uint64_t)m, .context = &sctx[m],
			};
			ssize_t r;

			while ((r = round % 2 ?
				    fi_tsendmsg(ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE) :
				    fi_tsend(ep, sbuf[m], sizes[m], NULL, addrs[next],
					     (uint64_t)m, &sctx[m])) == -FI_EAGAIN)
				wait_cq(cq, 0, NULL, true);
			OK(r);
		}
		/* MPI traffic through endpoint 0 while ours is in flight. */
		int one = 1, sum = 0;

		MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
		if (sum != size)
			DIE("allreduce gave %d", sum);
		wait_cq(cq, 2 * MSGS, src, true);
		for (int m = 0; m < MSGS; m++) {
			if (src[m] != addrs[prev])
				DIE("round %d message %d: source %llu, not %llu", round, m,
				    (unsigned long long)src[m], (unsigned long long)addrs[prev]);
			for (size_t i = 0; i < sizes[m]; i++)
				if (rbuf[m][i] != fill(prev, round, m, i))
					DIE("round %d message %d: byte %zu is %u", round, m, i,
					    rbuf[m][i]);
		}
	}
	/* ---- FI_RMA ---- */
	unsigned char *alloc = malloc(WLEN + 64), *win = alloc + 7;
	unsigned char *local = malloc(WLEN);
	struct fid_mr *mr;
	struct { uint64_t addr, key; } mine, *wins = malloc((size_t)size * sizeof(*wins));

	memset(alloc, 0xcc, WLEN + 64);
	OK(fi_mr_reg(domain, win, WLEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL));
	mine.addr = (uint64_t)(uintptr_t)win;
	mine.key = fi_mr_key(mr);
	MPI_Allgather(&mine, sizeof(mine), MPI_BYTE, wins, sizeof(mine), MPI_BYTE,
		      MPI_COMM_WORLD);

	uint64_t ops = 0;

	for (int round = 0; round < 3; round++) {
		size_t off = 50 + (size_t)round, len = WLEN - 100;
		struct fi_context2 c;

		for (size_t i = 0; i < len; i++)
			local[i] = fill(rank, round + 100, 0, i);
		if (round == 1) {
			struct iovec iov = { local, len };
			struct fi_rma_iov riov = { wins[next].addr + off, len, wins[next].key };
			struct fi_msg_rma msg = { .msg_iov = &iov, .iov_count = 1, .addr = addrs[next],
						  .rma_iov = &riov, .rma_iov_count = 1, .context = &c };

			OK(fi_writemsg(ep, &msg, FI_COMPLETION | FI_DELIVERY_COMPLETE));
		} else {
			OK(fi_write(ep, local, len, NULL, addrs[next], wins[next].addr + off,
				    wins[next].key, &c));
		}
		wait_cq(cq, 1, NULL, true);
		/* The write completed at the target: it checks at once. */
		MPI_Barrier(MPI_COMM_WORLD);
		for (size_t i = 0; i < len; i++)
			if (win[off + i] != fill(prev, round + 100, 0, i))
				DIE("round %d: window byte %zu is %u", round, off + i, win[off + i]);
		for (int i = 0; i < 7; i++)
			if (alloc[i] != 0xcc)
				DIE("a write landed before the window");
		for (size_t i = 7 + WLEN; i < WLEN + 64; i++)
			if (alloc[i] != 0xcc)
				DIE("a write landed after the window");
		MPI_Barrier(MPI_COMM_WORLD);
		memset(local, 0, WLEN);
		if (round == 1) {
			struct iovec iov = { local, len };
			struct fi_rma_iov riov = { wins[next].addr + off, len, wins[next].key };
			struct fi_msg_rma msg = { .msg_iov = &iov, .iov_count = 1, .addr = addrs[next],
						  .rma_iov = &riov, .rma_iov_count = 1, .context = &c };

			OK(fi_readmsg(ep, &msg, FI_COMPLETION));
		} else {
			OK(fi_read(ep, local, len, NULL, addrs[next], wins[next].addr + off,
				   wins[next].key, &c));
		}
		wait_cq(cq, 1, NULL, true);
		for (size_t i = 0; i < len; i++)
			if (local[i] != fill(rank, round + 100, 0, i))
				DIE("round %d: byte %zu read back is %u", round, i, local[i]);
		ops += 2;
	}
	if (fi_cntr_read(cntr) != ops)
		DIE("counter %llu, expected %llu", (unsigned long long)fi_cntr_read(cntr),
		    (unsigned long long)ops);

	/* A bad key, and a range past the window: error completions. */
	struct fi_context2 bc;

	for (int bad = 0; bad < 2; bad++) {
		uint64_t key = bad ? wins[next].key : wins[next].key ^ (1ull << 40);
		uint64_t at = bad ? wins[next].addr + WLEN - 4 : wins[next].addr;
		struct timespec t0, t;

		OK(fi_read(ep, local, 8, NULL, addrs[next], at, key, &bc));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (;;) {
			struct fi_cq_tagged_entry e;
			ssize_t r = fi_cq_read(cq, &e, 1);

			if (r == -FI_EAVAIL) {
				struct fi_cq_err_entry err = { 0 };

				if (fi_cq_readerr(cq, &err, 0) != 1 || err.op_context != &bc ||
				    !(err.flags & FI_READ) || err.err == 0)
					DIE("error completion of a bad read: %d", err.err);
				break;
			}
			if (r == 1)
				DIE("a read with a bad %s completed", bad ? "range" : "key");
			if (r != -FI_EAGAIN)
				DIE("fi_cq_read: %zd", r);
			clock_gettime(CLOCK_MONOTONIC, &t);
			if (t.tv_sec - t0.tv_sec > 30)
				DIE("no completion for a bad read");
		}
	}
	if (fi_cntr_readerr(cntr) != 2)
		DIE("error counter %llu, expected 2", (unsigned long long)fi_cntr_readerr(cntr));

	/* Nobody closes while a neighbour may still read its buffers. */
	MPI_Barrier(MPI_COMM_WORLD);
	last_messages(ep, cq, addrs[next], addrs[prev], prev);
	OK(fi_close(&mr->fid));
	free(alloc);
	free(local);
	free(wins);
	OK(fi_close(&ep->fid));
	OK(fi_close(&cntr->fid));
	OK(fi_close(&av->fid));
	OK(fi_close(&cq->fid));
	OK(fi_close(&domain->fid));
	OK(fi_close(&fabric->fid));
	fi_freeinfo(info);
	fi_freeinfo(hints);
	for (int m = 0; m < MSGS; m++) {
		free(sbuf[m]);
		free(rbuf[m]);
	}
	free(names);
	free(addrs);
	traffic_after_close(size);
	if (rank == 0)
		printf("mpi_second_ep: %d ranks passed\n", size);
	MPI_Finalize();
	return 0;
}
