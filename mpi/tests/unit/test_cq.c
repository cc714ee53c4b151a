/* SPDX-License-Identifier: MIT */
/*
 * test_cq.c - the completion queue (mpi/src/cq.c, design §7) on its own:
 * when a read runs a progress pass and when it does not.
 *
 * cq.c is linked alone (with fid.c, the common answers of its fi_ops).
 * The progress pass it calls (pmfi_progress) is this
 * file's: it counts the passes and, as the real one takes a message from
 * PM, writes one completion for each message the test made "arrive".  So
 * the rules are checked without PM or a network:
 *   - a read with completions waiting takes them without a pass;
 *   - an empty read runs a pass, except the read right after one that
 *     emptied the CQ (Open MPI's mtl ofi reads until -FI_EAGAIN after every
 *     completion: that read would poll the network again on the way from a
 *     message to the reply); the read after it runs one;
 *   - fi_cq_sread never skips its pass.
 */
#include "check.h"
#include "pmfi.h"

#include <stdlib.h>

/* ---- what cq.c needs of the rest of the provider ---- */

struct fi_provider pmfi_prov = { .name = "pm" };

static int passes;      /* progress passes run */
static int arrived;     /* messages waiting for a pass to take them */
static struct pmfi_cq *the_cq;

void pmfi_progress(struct pmfi_ep *ep)
{
	(void)ep;
	passes++;
	for (; arrived > 0 && pmfi_cq_room(the_cq, 1); arrived--) {
		struct fi_cq_tagged_entry e = { .flags = FI_TAGGED | FI_RECV, .len = 8 };

		pmfi_cq_write(the_cq, &e, 0);
	}
}

void pmfi_lock(struct pmfi_domain *d)
{
	(void)d;
}

void pmfi_unlock(struct pmfi_domain *d)
{
	(void)d;
}

int pm_wait(pm_context_t *ctx, int timeout_ms)
{
	(void)ctx; (void)timeout_ms;
	return 0;
}

const char *pmfi_strerror(int prov_errno, char *buf, size_t len)
{
	(void)prov_errno; (void)buf; (void)len;
	return "test";
}

/* ---- the tests ---- */

static struct pmfi_domain dom;
static struct pmfi_ep ep;
static struct fid_cq *cq;
static struct fi_cq_tagged_entry got[4];

static void open_cq(void)
{
	struct fi_cq_attr attr = { .format = FI_CQ_FORMAT_TAGGED };

	CHECK_EQ(pmfi_cq_open(&dom.fid, &attr, &cq, NULL), 0);
	the_cq = pmfi_container_of(cq, struct pmfi_cq, fid);
	CHECK_EQ(pmfi_cq_bind_ep(the_cq, &ep), 0);
	passes = arrived = 0;
}

static void close_cq(void)
{
	pmfi_cq_unbind_ep(the_cq, &ep);
	CHECK_EQ(fi_close(&cq->fid), 0);
	CHECK_EQ(dom.refs, 0);
}

/* An empty CQ's read polls; a message the pass brings completes in it. */
static void test_empty_read_polls(void)
{
	open_cq();
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAGAIN);
	CHECK_EQ(passes, 1);
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAGAIN);
	CHECK_EQ(passes, 2);
	arrived = 1;
	CHECK_EQ(fi_cq_read(cq, got, 4), 1);
	CHECK_EQ(passes, 3);
	CHECK_EQ(got[0].flags, FI_TAGGED | FI_RECV);
	close_cq();
}

/* The read after the one that emptied the CQ answers -FI_EAGAIN without a
 * pass, even with a message waiting; the read after it takes the message. */
static void test_read_after_emptying_skips_one_pass(void)
{
	open_cq();
	arrived = 1;
	CHECK_EQ(fi_cq_read(cq, got, 4), 1);
	CHECK_EQ(passes, 1);
	arrived = 1;
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAGAIN);
	CHECK_EQ(passes, 1);
	CHECK_EQ(fi_cq_read(cq, got, 4), 1);
	CHECK_EQ(passes, 2);
	/* Only one read is skipped: then every empty read polls again. */
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAGAIN);
	CHECK_EQ(passes, 2);
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAGAIN);
	CHECK_EQ(passes, 3);
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAGAIN);
	CHECK_EQ(passes, 4);
	close_cq();
}

/* A read that leaves completions behind did not empty the CQ: the next
 * read takes them without a pass, and the skip follows the read that took
 * the last one. */
static void test_partial_read_does_not_skip(void)
{
	open_cq();
	arrived = 3;
	CHECK_EQ(fi_cq_read(cq, got, 2), 2);
	CHECK_EQ(passes, 1);
	CHECK_EQ(fi_cq_readfrom(cq, got, 2, (fi_addr_t[2]){ 0 }), 1);
	CHECK_EQ(passes, 1);
	arrived = 1;
	CHECK_EQ(fi_cq_readfrom(cq, got, 2, (fi_addr_t[2]){ 0 }), -FI_EAGAIN);
	CHECK_EQ(passes, 1);
	CHECK_EQ(fi_cq_readfrom(cq, got, 2, (fi_addr_t[2]){ 0 }), 1);
	CHECK_EQ(passes, 2);
	close_cq();
}

/* fi_cq_sread after an emptying read runs its pass at once: it would
 * otherwise go to sleep on a pass it did not run. */
static void test_sread_never_skips(void)
{
	open_cq();
	arrived = 1;
	CHECK_EQ(fi_cq_read(cq, got, 4), 1);
	arrived = 1;
	CHECK_EQ(fi_cq_sread(cq, got, 4, NULL, 0), 1);
	CHECK_EQ(passes, 2);
	close_cq();
}

/* An error completion is reported whatever the skip: it is in the CQ. */
static void test_error_after_emptying(void)
{
	struct fi_cq_tagged_entry e = { .flags = FI_TAGGED | FI_RECV };
	struct fi_cq_err_entry err = { 0 };

	open_cq();
	arrived = 1;
	CHECK_EQ(fi_cq_read(cq, got, 4), 1);
	CHECK_EQ(pmfi_cq_write_err(the_cq, &e, FI_ETRUNC, 0, 4), 0);
	CHECK_EQ(fi_cq_read(cq, got, 4), -FI_EAVAIL);
	CHECK_EQ(fi_cq_readerr(cq, &err, 0), 1);
	CHECK_EQ(err.err, FI_ETRUNC);
	CHECK_EQ(err.olen, 4);
	CHECK_EQ(passes, 1);
	close_cq();
}

int main(void)
{
	dom.fid.fid.fclass = FI_CLASS_DOMAIN;
	test_empty_read_polls();
	test_read_after_emptying_skips_one_pass();
	test_partial_read_does_not_skip();
	test_sread_never_skips();
	test_error_after_emptying();
	printf("cq tests passed\n");
	return 0;
}
