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

static struct {
	pthread_mutex_t lock;
	pm_context_t *pm;
	int refs;
	bool ep_live;           /* one endpoint at a time (design §3) */
} proc = { .lock = PTHREAD_MUTEX_INITIALIZER };

int pmfi_proc_get(pm_context_t **pm)
{
	int err = 0;

	pthread_mutex_lock(&proc.lock);
	if (!proc.pm) {
		err = pm_open(&proc.pm, NULL);
		if (err) {
			PMFI_WARN("pm_open: %s", pm_strerror(err));
			proc.pm = NULL;
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

int pmfi_proc_ep_claim(void)
{
	int err = 0;

	pthread_mutex_lock(&proc.lock);
	if (proc.ep_live)
		err = -FI_EBUSY;
	proc.ep_live = true;
	pthread_mutex_unlock(&proc.lock);
	return err;
}

void pmfi_proc_ep_release(void)
{
	pthread_mutex_lock(&proc.lock);
	proc.ep_live = false;
	pthread_mutex_unlock(&proc.lock);
}
