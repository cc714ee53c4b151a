/* SPDX-License-Identifier: MIT */
/*
 * prov.c - the provider's entry point: fi_prov_ini, its struct fi_provider
 * and its tunables.  libfabric dlopen()s libpm-fi.so from FI_PROVIDER_PATH
 * and calls fi_prov_ini() once.
 */
#include "pmfi.h"

#include <limits.h>
#include <string.h>

struct pmfi_params pmfi_params;

struct fi_provider pmfi_prov = {
	.version = PMFI_PROV_VERSION,
	.fi_version = PMFI_API_VERSION,
	.name = PMFI_NAME,
	.getinfo = pmfi_getinfo,
	.fabric = pmfi_fabric_open,
	.cleanup = NULL,
};

/* Every domain's endpoints drive the process's one PM context: the
 * domains that lock share one lock, so that two FI_THREAD_SAFE domains
 * (Open MPI's mtl and btl under MPI_THREAD_MULTIPLE) never call PM at once. */
void pmfi_lock(struct pmfi_domain *d)
{
	if (d->locking)
		pthread_mutex_lock(&pmfi_pm_lock);
}

void pmfi_unlock(struct pmfi_domain *d)
{
	if (d->locking)
		pthread_mutex_unlock(&pmfi_pm_lock);
}

const char *pmfi_strerror(int prov_errno, char *buf, size_t len)
{
	const char *s = pm_strerror(-prov_errno);

	if (buf && len) {
		strncpy(buf, s, len - 1);
		buf[len - 1] = '\0';
	}
	return s;
}

int pmfi_errno(int pm_err)
{
	switch (pm_err) {
	case 0: return 0;
	case -EAGAIN: return -FI_EAGAIN;
	case -ENOMEM: return -FI_ENOMEM;
	case -EMSGSIZE: return -FI_EMSGSIZE;
	case -EINVAL: return -FI_EINVAL;
	case -EPIPE: return -FI_EIO;
	case -ENOENT: return -FI_ENOENT;
	case -ERANGE: return -FI_EINVAL;
	case -ENOTSUP: return -FI_EOPNOTSUPP;
	default: return -FI_EIO;
	}
}

/* Eager thresholds when FI_PM_EAGER_MAX is not set, by PM device, measured
 * with NetPIPE streams (docs/mpi/bench.md): within a node the read-based
 * rendezvous (one copy by process_vm_readv) beats two copies from 16 KiB
 * on; over udp its round trip costs more than sending 64 KiB eagerly. */
size_t pmfi_eager_default(const char *device)
{
	return device && strcmp(device, "udp") == 0 ? 65536 : 16384;
}

FI_EXT_INI
{
	size_t eager;

	fi_param_define(&pmfi_prov, "eager_max", FI_PARAM_SIZE_T,
			"Largest message sent eagerly (copied at the receiver); larger ones "
			"are read by the receiver from the sender's memory (default: 16384 "
			"within a node, 65536 over udp)");
	if (fi_param_get_size_t(&pmfi_prov, "eager_max", &eager) == 0)
		pmfi_params.eager_max = eager;

	char *addressing = NULL;

	fi_param_define(&pmfi_prov, "addressing", FI_PARAM_STRING,
			"How the process's PM context finds its peers: 'job' (a PMIx "
			"launcher's job, ranks by PMIx), 'detached' (no job: peers are the "
			"names given to fi_av_insert, e.g. fi_pingpong, MPICH under hydra), "
			"or 'auto' (default: detached when no PMIx server is present)");
	if (fi_param_get_str(&pmfi_prov, "addressing", &addressing) == 0 && addressing) {
		if (strcmp(addressing, "detached") == 0)
			pmfi_params.addressing = PMFI_ADDR_DETACHED;
		else if (strcmp(addressing, "job") == 0)
			pmfi_params.addressing = PMFI_ADDR_JOB;
		else if (strcmp(addressing, "auto") != 0)
			PMFI_WARN("FI_PM_ADDRESSING=%s: not auto, job or detached; auto",
				  addressing);
	}
	return &pmfi_prov;
}
