/* SPDX-License-Identifier: MIT */
/*
 * fault.c - page faults, and write detection the SIGSEGV way: a page the
 * rank may not read is PROT_NONE, one it has not written since the last
 * release PROT_READ; the first access that needs the protocol faults and
 * the handler brings the page up to date or starts its write (a twin
 * unless the page is homed here), then the access is retried.
 *
 * The handler (installed when the library loads) runs on the application
 * thread, synchronously with the faulting access, never inside the library
 * (the library touches shared pages only through the alias); a fetch is
 * posted to the service thread, which alone uses PM (comm.c).  A fault
 * that continues a sequential sweep fetches the pages after it too
 * (read-ahead, read_ahead() below).
 */
#include "dsm_internal.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

static struct sigaction previous;

/* Whether the faulting access was a write, where the CPU says so
 * (FAULT_KIND_KNOWN).  Else the answer is "read": a write to a page made
 * readable faults again and is then a write, at the cost of one more
 * fault. */
#if defined(__x86_64__)
#define FAULT_KIND_KNOWN 1
#else
#define FAULT_KIND_KNOWN 0
#endif
static bool fault_was_write(const void *uc)
{
#if defined(__x86_64__)
	const ucontext_t *u = uc;

	return (u->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#else
	(void)uc;
	return false;
#endif
}

/* A fetch the application waits for: pages [first, first + n). */
struct fetch {
	uint32_t first, n;
};

static int fetch_call(struct dsm *d, void *arg)
{
	const struct fetch *f = arg;

	dsm_fetch(d, f->first, f->n);
	return 0;
}

/* Whether a remote operation has completed, from its status alone (pm.h:
 * 1 pending).  The callers look between progress passes (dsm_wait_until,
 * and the service loop's dsm_progress before dsm_prefetch_poll): a
 * pm_test() would progress PM again, one more receive system call per
 * look on a network device. */
static bool op_landed(const struct pm_op *op)
{
	return op->status != 1;
}

static bool op_done(struct dsm *d, const void *op)
{
	(void)d;
	return op_landed(op);
}

/* A remote operation on pages [first, first + n) of their home, started
 * (waiting while PM says -EAGAIN: quiesced by gang scheduling, or too many
 * operations in flight), or the end of the rank. */
static void start_op(struct dsm *d, const char *what, bool write, uint32_t first, uint32_t n,
		     void *local, size_t len, uint64_t rkey, uint64_t roffset, struct pm_op *op)
{
	int home = d->home[first], err;

	while ((err = write ? pm_write(d->pm, home, local, len, rkey, roffset, op)
			    : pm_read(d->pm, home, local, len, rkey, roffset, op)) == -EAGAIN) {
		dsm_progress(d);
		dsm_pm_wait(d, 10);
	}
	if (err == -EPIPE)
		dsm_peer_gone(d, err);
	if (err)
		dsm_fatal("%s pages %u..%u, homed at rank %d: %s", what, first, first + n - 1,
			  home, pm_strerror(err));
}

static void finish_op(struct dsm *d, const char *what, uint32_t first, uint32_t n,
		      struct pm_op *op)
{
	dsm_wait_until(d, op_done, op);
	if (op->status == -EPIPE || op->status == -ECONNRESET)
		dsm_peer_gone(d, op->status);
	if (op->status)
		dsm_fatal("%s pages %u..%u, homed at rank %d: %s", what, first, first + n - 1,
			  d->home[first], pm_strerror(op->status));
}

/* The byte of each page in its home's `copied` table (sync.c,
 * share_home_pages). */
static const uint8_t copied_bytes[DSM_READ_AHEAD_MAX] = {
	[0 ... DSM_READ_AHEAD_MAX - 1] = 1,
};

/*
 * The first fetch of a page from its home asks the home to watch it, and
 * waits for the answer (home.c), then tells the home's table that a copy
 * exists here, before the read: PM applies one peer's remote operations in
 * order, so the table says so before the copy is taken (for a home that
 * had not allocated the page when it answered).  Both operations go out at
 * once; the read's answer comes after the write's.
 */
static void fetch_start(struct dsm *d, struct dsm_fetch_op *f)
{
	int home = d->home[f->first];

	f->tell = false;
	for (uint32_t p = f->first; p < f->first + f->n; p++) {
		if (!pageset_has(&d->told, p)) {
			pageset_add(&d->told, p);
			f->tell = true;
		}
	}
	if (f->tell)
		dsm_watch_ask(d, f->first, f->n);
	if (f->tell)
		start_op(d, "telling the home of a copy of", true, f->first, f->n,
			 (void *)copied_bytes, f->n, d->copied_keys[home], f->first, &f->told);
	start_op(d, "fetching", false, f->first, f->n, dsm_page_alias(d, f->first),
		 (size_t)f->n << DSM_PAGE_SHIFT, d->rkeys[home],
		 (uint64_t)f->first << DSM_PAGE_SHIFT, &f->op);
}

static void fetch_finish(struct dsm *d, struct dsm_fetch_op *f)
{
	if (f->tell)
		finish_op(d, "telling the home of a copy of", f->first, f->n, &f->told);
	finish_op(d, "fetching", f->first, f->n, &f->op);
	d->st->pages_fetched += f->n;
	d->st->fetch_bytes += (uint64_t)f->n << DSM_PAGE_SHIFT;
}

void dsm_fetch(struct dsm *d, uint32_t first, uint32_t n)
{
	uint64_t t0 = dsm_now_ns();
	struct dsm_fetch_op f = { .first = first, .n = n };

	fetch_start(d, &f);
	fetch_finish(d, &f);
	d->st->read_ahead_pages += n - 1;
	d->st->fetch_ns += dsm_now_ns() - t0;
}

/* A prefetch that has landed (or, waited for, lands now): its pages
 * PREFETCHED.  The application reads a page's state without the service
 * thread's lock (there is none): the release store publishes the page's
 * bytes, written into the alias by PM on this thread, with its state. */
static void prefetch_landed(struct dsm *d, struct dsm_fetch_op *f)
{
	fetch_finish(d, f);
	dsm_prefetched_valid(d, f->first, f->n);
	d->st->prefetched_pages += f->n;
}

void dsm_prefetched_valid(struct dsm *d, uint32_t first, uint32_t n)
{
	if (d->prefetch_open) {
		dsm_pages_valid(d, first, n);
		d->st->prefetch_opened += n;
		return;
	}
	for (uint32_t p = first; p < first + n; p++)
		__atomic_store_n(&d->state[p], PAGE_PREFETCHED, __ATOMIC_RELEASE);
}

/*
 * Started in batches of DSM_PREFETCH_RUNS runs of consecutive pages of one
 * home, at most a read-ahead window each (DSM_READ_AHEAD_MAX), each batch
 * waited for before the next.  With PMDSM_PREFETCH_OVERLAP the last batch
 * is not: it stays in flight when the barrier returns, its pages INFLIGHT,
 * so that the application computes while the reads cross the network (a
 * stencil that computes the rows that read its neighbours' last).  As its
 * read lands a page opens (READ: the application finds it valid, with no
 * fault), except at one departure in DSM_PREFETCH_PROBE, whose pages stay
 * closed until touched: a page touched becomes valid at a local fault (no
 * fetch; a fault on one still in flight waits for its read) and is
 * fetched again at the next barrier that drops it; one never touched is
 * not.  So a page the program stopped reading is fetched again at most
 * DSM_PREFETCH_PROBE times (dsm_internal.h: why it is prime).
 */
void dsm_prefetch(struct dsm *d, const uint32_t *pages, uint32_t n)
{
	uint64_t t0 = dsm_now_ns();
	uint32_t i = 0;

	while (i < n) {
		uint32_t nops = 0;

		while (i < n && nops < DSM_PREFETCH_RUNS) {
			uint32_t run = 1;

			while (i + run < n && pages[i + run] == pages[i] + run &&
			       d->home[pages[i + run]] == d->home[pages[i]] &&
			       run < DSM_READ_AHEAD_MAX)
				run++;
			d->inflight[nops] = (struct dsm_fetch_op){ .first = pages[i], .n = run };
			fetch_start(d, &d->inflight[nops]);
			memset(d->state + pages[i], PAGE_INFLIGHT, run);
			nops++;
			i += run;
		}
		d->ninflight = d->nslots = nops;
		if (i < n || !d->prefetch_overlap)
			dsm_prefetch_drain(d);
	}
	for (uint32_t k = 0; k < d->nslots; k++)
		d->st->prefetch_overlapped += d->inflight[k].n;
	d->st->fetch_ns += dsm_now_ns() - t0;
}

/* The ops stay where they were started (PM keeps their address until
 * they complete): a landed one is only marked so (n = 0), and the slots
 * are free again when none is left in flight. */
static void prefetch_slot_done(struct dsm *d, struct dsm_fetch_op *f)
{
	prefetch_landed(d, f);
	f->n = 0;
	if (--d->ninflight == 0)
		d->nslots = 0;
}

void dsm_prefetch_poll(struct dsm *d)
{
	for (uint32_t k = 0; k < d->nslots; k++) {
		struct dsm_fetch_op *f = &d->inflight[k];

		if (f->n && op_landed(&f->op) && (!f->tell || op_landed(&f->told)))
			prefetch_slot_done(d, f);
	}
}

void dsm_prefetch_drain(struct dsm *d)
{
	/* The last one landed frees the slots (nslots 0), which ends it. */
	for (uint32_t k = 0; k < d->nslots; k++)
		if (d->inflight[k].n)
			prefetch_slot_done(d, &d->inflight[k]);
}

/* The application touched a page whose prefetch is in flight: its read,
 * waited for (the others stay in flight). */
static int prefetch_wait_call(struct dsm *d, void *arg)
{
	uint32_t page = *(const uint32_t *)arg;

	for (uint32_t k = 0; k < d->nslots; k++) {
		struct dsm_fetch_op *f = &d->inflight[k];

		if (f->n && page >= f->first && page < f->first + f->n) {
			uint64_t t0 = dsm_now_ns();

			prefetch_slot_done(d, f);
			d->st->prefetch_waits++;
			d->st->fetch_ns += dsm_now_ns() - t0;
			break;
		}
	}
	return 0;
}

void dsm_start_write(struct dsm *d, uint32_t page)
{
	if (d->home[page] != d->rank) {
		dsm_make_twin(d, page);
		d->st->twins++;
	}
	d->state[page] = PAGE_WRITE;
	pageset_add(&d->dirty, page);
	d->st->write_faults++;
}

/* segv's first write to a valid page: started, and the page opened. */
static void start_write(struct dsm *d, uint32_t page)
{
	dsm_start_write(d, page);
	dsm_protect(d, page, 1, PROT_READ | PROT_WRITE);
}

void dsm_watch(struct dsm *d, uint32_t first, uint32_t n)
{
	if (dsm_segv(d))
		dsm_protect(d, first, n, PROT_READ);
	else
		dsm_wp_arm(d, first, n);
}

/* Pages [first, first + n), just fetched, become valid: READ, readable.
 * With uffd-async no fault will announce their first write, so each gets
 * its twin now and is opened read-write (the kernel write-protects it and
 * records the write).  With uffd-wp they are armed (a write since their
 * last arming unprotected them) and opened read-write: the first write
 * faults to the thread.  The faulted page and the pages read ahead beside
 * it all go through here, so a page read ahead is exactly what it would
 * have been had it faulted itself. */
void dsm_pages_valid(struct dsm *d, uint32_t first, uint32_t n)
{
	if (dsm_uffd(d)) {
		for (uint32_t p = first; p < first + n; p++)
			dsm_make_twin(d, p);
		d->st->twins += n;
	}
	if (dsm_uffd_wp(d))
		dsm_wp_arm(d, first, n);
	dsm_protect(d, first, n, dsm_segv(d) ? PROT_READ : PROT_READ | PROT_WRITE);
	/* Last, published: the service thread opens a landed prefetch while
	 * the application runs, and an access that faulted on the page closed
	 * must find it valid only once it is open (fault.c, on_segv;
	 * wp_uffd.c, wp_fault). */
	for (uint32_t p = first; p < first + n; p++)
		__atomic_store_n(&d->state[p], PAGE_READ, __ATOMIC_RELEASE);
}

/*
 * Read-ahead: how many pages to fetch for a fault on page, from page on.
 *
 * The window adapts as Linux's readahead does: a fault on the page right
 * after the previous fetch (a sequential sweep) doubles it, up to ra_max
 * pages; any other fault starts again at 1, so that random access costs
 * one page per fault as without read-ahead.  The pages fetched beside the
 * faulted one are the next ones that are INVALID (so not UNUSED: inside
 * allocations, where the alias may keep a diff for a page this rank has
 * not allocated yet; not valid already, so nothing cached or written here
 * is overwritten) and homed where page is (one remote read): the run stops
 * at the first page that is not.
 *
 * Why it is coherent (HLRC, docs/dsm/design.md "Read-ahead"): a page that
 * is INVALID here and fetched early gets the home's copy as it is at the
 * fetch.  That copy holds every diff released before this rank's last
 * acquire (a release completes only when its homes have acknowledged its
 * diffs, before the acquire that follows it can), which is all the model
 * requires of a page read after that acquire; it may hold later writes
 * too, as a page faulted in at that moment would.  From then on the page
 * is an ordinary valid page: the write notices of the next acquire that
 * names it invalidate it, and a write to it makes its twin from the
 * fetched copy (at the fetch with uffd-async, at the write fault with
 * segv), so its diff carries this rank's bytes only.
 */
static uint32_t read_ahead(struct dsm *d, uint32_t page)
{
	uint32_t want = 1;

	if (d->ra_max > 1 && page == d->ra_next && d->ra_window) {
		want = d->ra_window * 2;
		if (want > d->ra_max)
			want = d->ra_max;
	}

	uint32_t n = 1;
	uint16_t home = d->home[page];

	while (n < want && page + n < d->npages && d->state[page + n] == PAGE_INVALID &&
	       d->home[page + n] == home)
		n++;
	d->ra_window = want;
	d->ra_next = page + n;
	return n;
}

/* A first-touch page whose home this rank does not know yet; the service
 * thread, as a page's manager, may be setting it (home.c). */
static bool home_unknown(const struct dsm *d, uint32_t page)
{
	return __atomic_load_n(&d->home[page], __ATOMIC_RELAXED) == DSM_UNHOMED;
}

/* The first fault here on a first-touch page: its manager says who homes
 * it, this rank if nobody touched it before.  True when it is this rank's:
 * then it is valid at once (zero, or what the home wrote: nobody else
 * could) and open, like a page homed here by an allocation. */
static bool claim_home(struct dsm *d, uint32_t page)
{
	struct dsm_home_query q = { .page = page, .claim = true };

	if (dsm_call(d, dsm_home_resolve, &q) != d->rank)
		return false;
	d->state[page] = PAGE_OWN;
	d->nown++;
	dsm_protect(d, page, 1, PROT_READ | PROT_WRITE);
	return true;
}

/* Not ours: what would have happened without the DSM. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
	if (previous.sa_flags & SA_SIGINFO && previous.sa_sigaction) {
		previous.sa_sigaction(sig, si, uc);
	} else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
		previous.sa_handler(sig);
	} else {
		/* Returning retries the access, which faults again and now
		 * kills the process as it would have. */
		signal(SIGSEGV, SIG_DFL);
	}
}

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	struct dsm *d = dsm_ctx;
	uintptr_t a = (uintptr_t)si->si_addr;

	if (a < DSM_HEAP_BASE || a >= DSM_HEAP_BASE + DSM_HEAP_MAX) {
		pass_on(sig, si, uc);
		return;
	}
	if (!d || !d->base)
		dsm_fatal("access to shared memory at %p outside pmdsm_init()..pmdsm_finalize()",
			  si->si_addr);
	if (a >= (uintptr_t)d->base + d->heap_size)
		dsm_fatal("access at %p, beyond the shared heap's %zu bytes", si->si_addr,
			  d->heap_size);

	uint32_t page = (uint32_t)((a - (uintptr_t)d->base) >> DSM_PAGE_SHIFT);
	uint64_t t0 = dsm_now_ns();
	bool write = fault_was_write(uc);

	/* Acquire: the service thread may have just made it PREFETCHED
	 * (dsm_prefetch_poll). */
	switch (__atomic_load_n(&d->state[page], __ATOMIC_ACQUIRE)) {
	case PAGE_UNUSED:
		dsm_fatal("access to shared memory at %p, which no allocation holds "
			  "(freed, or never allocated)", si->si_addr);
	case PAGE_INVALID: {
		if (home_unknown(d, page) && claim_home(d, page))
			break;

		struct fetch f = { .first = page, .n = read_ahead(d, page) };

		dsm_call(d, fetch_call, &f);
		d->st->read_faults++;
		if (write && dsm_segv(d)) {
			/* Opened for the write at once (one fault, not two). */
			start_write(d, page);
			if (f.n > 1)
				dsm_pages_valid(d, page + 1, f.n - 1);
		} else {
			dsm_pages_valid(d, page, f.n);
		}
		break;
	}
	case PAGE_INFLIGHT:
		/* Its read lands first: then it is PREFETCHED, or open (READ),
		 * and the retry succeeds. */
		dsm_call(d, prefetch_wait_call, &page);
		if (__atomic_load_n(&d->state[page], __ATOMIC_ACQUIRE) != PAGE_PREFETCHED)
			break;
		/* fallthrough */
	case PAGE_PREFETCHED:
		/* Its copy is here already (dsm_prefetch). */
		d->st->prefetch_used++;
		if (write && dsm_segv(d)) {
			d->state[page] = PAGE_READ;
			start_write(d, page);
		} else {
			dsm_pages_valid(d, page, 1);
		}
		break;
	case PAGE_READ:
		/* segv: the page's first write since the release.  Or an
		 * access that faulted on it closed, in flight, and found it
		 * opened by the service thread as its read landed
		 * (dsm_prefetched_valid): the retry succeeds.  Only that with
		 * uffd, whose READ pages never fault here otherwise. */
		if (dsm_segv(d) && (write || !FAULT_KIND_KNOWN))
			start_write(d, page);
		break;
	case PAGE_COLD:
		/* uffd-async: readable, so this is a write. */
		dsm_wp_warm(d, page);
		break;
	default:
		/* PAGE_WRITE: already open (the retry succeeds). */
		break;
	}
	d->st->fault_ns += dsm_now_ns() - t0;
}

/* Installed when the library is loaded, and kept: an access to the shared
 * range before pmdsm_init() or after pmdsm_finalize() gets a message, not
 * a bare segmentation fault.  Faults elsewhere go where they went before. */
__attribute__((constructor)) static void install_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_segv;
	/* SA_NODEFER: a fault inside the handler (a bug) is not held. */
	sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGSEGV, &sa, &previous);
}

int dsm_fault_install(struct dsm *d)
{
	struct sigaction now;

	(void)d;
	/* The program may have installed its own handler since: ours goes
	 * first again, theirs gets what is not ours. */
	if (sigaction(SIGSEGV, NULL, &now) < 0)
		return -errno;
	if (!(now.sa_flags & SA_SIGINFO) || now.sa_sigaction != on_segv)
		install_handler();
	return 0;
}
