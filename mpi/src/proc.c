/* SPDX-License-Identifier: MIT */
/*
 * proc.c - the process's one PM context.
 *
 * Under a launcher pm_open() is collective (PMIx fences), so the provider
 * opens a single context per process, when the first endpoint or address
 * vector needs it, and closes it with the last (design §3).  This is the
 * provider's only process-wide state; the mutex covers threads that open
 * objects of different domains at once.
 */
#include "pmfi.h"

#include <stdlib.h>

static struct {
	pthread_mutex_t lock;
	pm_context_t *pm;
	int refs;
	struct pmfi_ep *eps[PMFI_MAX_EPS]; /* live endpoints by index (design §3) */
	bool detached;          /* the context is a detached one */
} proc = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* A PMIx server announces itself to its clients through these (as PM's
 * own bootstrap looks for them, core/boot.c). */
static bool pmix_server_present(void)
{
	static const char *const vars[] = {
		"PMIX_NAMESPACE", "PMIX_SERVER_URI41", "PMIX_SERVER_URI4",
		"PMIX_SERVER_URI3", "PMIX_SERVER_URI21", "PMIX_SERVER_URI2",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			return true;
	return false;
}

/*
 * Without a PMIx server there is no job to join: a process started by
 * hand (fi_pingpong), or by a launcher that speaks only PMI (MPICH's
 * hydra), opens a detached context, whose peers come from fi_av_insert of
 * the names the application exchanged itself (design §3, "Addresses").
 */
static bool want_detached(void)
{
	switch (pmfi_params.addressing) {
	case PMFI_ADDR_DETACHED:
		return true;
	case PMFI_ADDR_JOB:
		return false;
	default:
		return !pmix_server_present();
	}
}

/* A job's context knows its peers from the start: say, at info level, how
 * each is reached (as av.c does for a detached context's insertions), the
 * first PEERS_LOGGED of them. */
#define PEERS_LOGGED 64

static void log_peer_devices(pm_context_t *pm)
{
	int size = pm_size(pm), me = pm_rank(pm);

	for (int peer = 0; peer < size && peer < PEERS_LOGGED; peer++)
		if (peer != me)
			PMFI_INFO("PM peer %d: through PM's %s device", peer,
				  pm_peer_device(pm, peer));
	if (size > PEERS_LOGGED)
		PMFI_INFO("(%d more peers)", size - PEERS_LOGGED);
}

int pmfi_proc_get(pm_context_t **pm)
{
	int err = 0;

	pthread_mutex_lock(&proc.lock);
	if (!proc.pm) {
		struct pm_open_attr attr = { 0 };

		proc.detached = want_detached();
		if (proc.detached)
			attr.flags = PM_OPEN_DETACHED;
		err = pm_open(&proc.pm, &attr);
		if (err) {
			PMFI_WARN("pm_open%s: %s", proc.detached ? " (detached)" : "",
				  pm_strerror(err));
			proc.pm = NULL;
		} else {
			PMFI_INFO("PM context opened %s", proc.detached ?
				  "detached (peers by fi_av_insert)" : "in the launcher's job");
			if (!proc.detached)
				log_peer_devices(proc.pm);
		}
	}
	if (!err) {
		proc.refs++;
		*pm = proc.pm;
	}
	pthread_mutex_unlock(&proc.lock);
	return err ? pmfi_errno(err) : 0;
}

void pmfi_proc_put(void)
{
	pthread_mutex_lock(&proc.lock);
	if (proc.refs > 0 && --proc.refs == 0) {
		pm_close(proc.pm);
		proc.pm = NULL;
	}
	pthread_mutex_unlock(&proc.lock);
}

pthread_mutex_t pmfi_pm_lock = PTHREAD_MUTEX_INITIALIZER;

int pmfi_proc_ep_claim(struct pmfi_ep *ep)
{
	int index = -FI_EBUSY;

	pthread_mutex_lock(&proc.lock);
	/* The lowest free index: a process that opens one endpoint at a time
	 * always names it 0, as before endpoints shared the context. */
	for (int i = 0; i < PMFI_MAX_EPS; i++)
		if (!proc.eps[i]) {
			proc.eps[i] = ep;
			index = i;
			break;
		}
	pthread_mutex_unlock(&proc.lock);
	return index;
}

void pmfi_proc_ep_release(int index)
{
	pthread_mutex_lock(&proc.lock);
	if (index >= 0 && index < PMFI_MAX_EPS)
		proc.eps[index] = NULL;
	pthread_mutex_unlock(&proc.lock);
}

struct pmfi_ep *pmfi_proc_ep(int index)
{
	struct pmfi_ep *ep = NULL;

	pthread_mutex_lock(&proc.lock);
	if (index >= 0 && index < PMFI_MAX_EPS)
		ep = proc.eps[index];
	pthread_mutex_unlock(&proc.lock);
	return ep;
}

bool pmfi_proc_detached(void)
{
	pthread_mutex_lock(&proc.lock);
	bool d = proc.pm && proc.detached;

	pthread_mutex_unlock(&proc.lock);
	return d;
}

int pmfi_proc_max_peers(pm_context_t *pm)
{
	return pmfi_proc_detached() ? PM_DETACHED_MAX : pm_size(pm);
}
