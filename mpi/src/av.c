/* SPDX-License-Identifier: MIT */
/*
 * av.c - the address vector: fi_addr_t is the insertion index (FI_AV_MAP
 * behaves as FI_AV_TABLE, as libfabric 2.x asks of providers); each entry
 * holds the PM peer and endpoint index that a 64-byte name designates.
 */
#include "pmfi.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool pmfi_name_valid(const void *name, size_t len)
{
	struct pmfi_name n;

	if (!name || len != sizeof(n))
		return false;
	memcpy(&n, name, sizeof(n));
	return le32toh(n.magic) == PMFI_NAME_MAGIC && n.version == PMFI_NAME_VERSION &&
	       le16toh(n.ep) < PMFI_MAX_EPS;
}

fi_addr_t pmfi_av_source(const struct pmfi_av *av, int peer, uint16_t ep)
{
	if (peer < 0 || peer >= av->npeers)
		return FI_ADDR_NOTAVAIL;

	fi_addr_t a = av->by_peer[peer];

	if (a == FI_ADDR_NOTAVAIL || av->tab[a].ep == ep)
		return a;
	/* The AV holds several endpoints of that process (rare: MPI's AVs
	 * hold one per peer): look for the one that sent. */
	for (size_t i = 0; i < av->count; i++)
		if (av->tab[i].peer == peer && av->tab[i].ep == ep)
			return i;
	return FI_ADDR_NOTAVAIL;
}

/* The PM peer a name designates, or a negative FI error.  A detached
 * context's first insertion of a name makes the peer (PM allocates its
 * queues here, never on the data path). */
static int name_to_peer(pm_context_t *pm, const void *addr, struct pmfi_av_entry *out)
{
	struct pmfi_name n;
	int peer;

	if (!pmfi_name_valid(addr, sizeof(n)))
		return -FI_EINVAL;
	memcpy(&n, addr, sizeof(n));
	int before = pm_size(pm);
	int err = pm_peer_insert(pm, n.pm, sizeof(n.pm), &peer);

	switch (err) {
	case 0:
		break;
	case -EADDRNOTAVAIL: return -FI_EADDRNOTAVAIL;
	case -ENETUNREACH: return -FI_ENETUNREACH;
	case -ENOSPC: return -FI_ENOSPC;
	case -ENOMEM: return -FI_ENOMEM;
	default: return -FI_EINVAL;
	}
	if (peer >= before)     /* new to a detached context: say how it goes */
		PMFI_INFO("PM peer %d: through PM's %s device", peer, pm_peer_device(pm, peer));
	out->peer = peer;
	out->ep = le16toh(n.ep);
	return 0;
}

static int grow(struct pmfi_av *av, size_t need)
{
	if (need <= av->cap)
		return 0;

	size_t cap = av->cap ? av->cap : 64;

	while (cap < need)
		cap *= 2;

	struct pmfi_av_entry *t = realloc(av->tab, cap * sizeof(*t));

	if (!t)
		return -FI_ENOMEM;
	av->tab = t;

	unsigned char (*n)[PMFI_NAME_LEN] = realloc(av->names, cap * sizeof(*n));

	if (!n)
		return -FI_ENOMEM;
	av->names = n;
	av->cap = cap;
	return 0;
}

static int av_insert(struct fid_av *fid, const void *addr, size_t count, fi_addr_t *fi_addr,
		     uint64_t flags, void *context)
{
	struct pmfi_av *av = pmfi_container_of(fid, struct pmfi_av, fid);
	int *errs = (flags & FI_SYNC_ERR) ? context : NULL;
	int inserted = 0;

	if (flags & ~FI_SYNC_ERR)
		return -FI_EINVAL;
	if (count && !addr)
		return -FI_EINVAL;
	pmfi_lock(av->dom);
	int err = grow(av, av->count + count);

	if (err) {
		pmfi_unlock(av->dom);
		return err;
	}
	for (size_t i = 0; i < count; i++) {
		struct pmfi_av_entry e;
		int rc = name_to_peer(av->pm, (const char *)addr + i * PMFI_NAME_LEN, &e);

		if (errs)
			errs[i] = rc;
		if (rc) {
			PMFI_WARN("fi_av_insert: name %zu refused: %s", i, fi_strerror(-rc));
			if (fi_addr)
				fi_addr[i] = FI_ADDR_NOTAVAIL;
			continue;
		}
		fi_addr_t a = av->count++;

		av->tab[a] = e;
		memcpy(av->names[a], (const char *)addr + i * PMFI_NAME_LEN, PMFI_NAME_LEN);
		if (av->by_peer[e.peer] == FI_ADDR_NOTAVAIL)
			av->by_peer[e.peer] = a;
		if (fi_addr)
			fi_addr[i] = a;
		inserted++;
	}
	pmfi_unlock(av->dom);
	return inserted;
}

static int av_insertsvc(struct fid_av *av, const char *node, const char *service,
			fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	(void)av; (void)node; (void)service; (void)fi_addr; (void)flags; (void)context;
	return -FI_ENOSYS;
}

static int av_insertsym(struct fid_av *av, const char *node, size_t nodecnt,
			const char *service, size_t svccnt, fi_addr_t *fi_addr,
			uint64_t flags, void *context)
{
	(void)av; (void)node; (void)nodecnt; (void)service; (void)svccnt; (void)fi_addr;
	(void)flags; (void)context;
	return -FI_ENOSYS;
}

static int av_remove(struct fid_av *fid, fi_addr_t *fi_addr, size_t count, uint64_t flags)
{
	struct pmfi_av *av = pmfi_container_of(fid, struct pmfi_av, fid);

	(void)flags;
	pmfi_lock(av->dom);
	for (size_t i = 0; i < count; i++) {
		fi_addr_t a = fi_addr[i];

		if (a >= av->count || av->tab[a].peer < 0)
			continue;
		if (av->by_peer[av->tab[a].peer] == a)
			av->by_peer[av->tab[a].peer] = FI_ADDR_NOTAVAIL;
		av->tab[a].peer = -1;
	}
	pmfi_unlock(av->dom);
	return 0;
}

static int av_lookup(struct fid_av *fid, fi_addr_t fi_addr, void *addr, size_t *addrlen)
{
	struct pmfi_av *av = pmfi_container_of(fid, struct pmfi_av, fid);
	int err = 0;

	pmfi_lock(av->dom);
	if (fi_addr >= av->count || av->tab[fi_addr].peer < 0)
		err = -FI_ENOENT;
	else
		memcpy(addr, av->names[fi_addr], *addrlen < PMFI_NAME_LEN ? *addrlen : PMFI_NAME_LEN);
	pmfi_unlock(av->dom);
	*addrlen = PMFI_NAME_LEN;
	return err;
}

/* pm://rank@tag/ep for a context of a launcher's job; pm://id@a.b.c.d:port/ep
 * for a detached one (its context id and first NIC: never its key, which
 * its name carries as a secret). */
static const char *av_straddr(struct fid_av *fid, const void *addr, char *buf, size_t *len)
{
	struct pmfi_name n;
	char s[64];
	int w;

	(void)fid;
	memcpy(&n, addr, sizeof(n));
	uint32_t rank;
	uint64_t tag;

	memcpy(&rank, n.pm + 4, sizeof(rank));
	memcpy(&tag, n.pm + 8, sizeof(tag));
	if (n.pm[0] == 2) {
		const uint8_t *ip = n.pm + 24;  /* docs/pm/wire.md, "Addresses" */

		w = snprintf(s, sizeof(s), "pm://%08" PRIx32 "@%u.%u.%u.%u:%u/%u", le32toh(rank),
			     ip[0], ip[1], ip[2], ip[3], (unsigned)(ip[4] << 8 | ip[5]),
			     (unsigned)le16toh(n.ep));
	} else {
		w = snprintf(s, sizeof(s), "pm://%" PRIu32 "@%016" PRIx64 "/%u", le32toh(rank),
			     le64toh(tag), (unsigned)le16toh(n.ep));
	}

	if (buf && *len) {
		strncpy(buf, s, *len - 1);
		buf[*len - 1] = '\0';
	}
	*len = (size_t)w + 1;
	return buf;
}

static int av_close(struct fid *fid)
{
	struct pmfi_av *av = pmfi_container_of(fid, struct pmfi_av, fid.fid);

	if (av->refs)
		return -FI_EBUSY;
	av->dom->refs--;
	free(av->tab);
	free(av->names);
	free(av->by_peer);
	free(av);
	pmfi_proc_put();
	return 0;
}

static struct fi_ops av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = av_close,
	.bind = pmfi_no_bind,
	.control = pmfi_no_control,
	.ops_open = pmfi_no_ops_open,
};

static struct fi_ops_av av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = av_insert,
	.insertsvc = av_insertsvc,
	.insertsym = av_insertsym,
	.remove = av_remove,
	.lookup = av_lookup,
	.straddr = av_straddr,
};

int pmfi_av_open(struct fid_domain *domain, struct fi_av_attr *attr, struct fid_av **out,
		 void *context)
{
	struct pmfi_domain *d = pmfi_container_of(domain, struct pmfi_domain, fid);

	if (attr && (attr->name || (attr->flags & ~(uint64_t)FI_SYMMETRIC) || attr->rx_ctx_bits))
		return -FI_ENOSYS;
	if (attr && attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP &&
	    attr->type != FI_AV_TABLE)
		return -FI_EINVAL;

	struct pmfi_av *av = calloc(1, sizeof(*av));

	if (!av)
		return -FI_ENOMEM;
	int err = pmfi_proc_get(&av->pm);

	if (err) {
		free(av);
		return err;
	}
	av->npeers = pmfi_proc_max_peers(av->pm);
	av->by_peer = malloc((size_t)av->npeers * sizeof(*av->by_peer));
	if (!av->by_peer || grow(av, attr && attr->count ? attr->count : 64)) {
		free(av->by_peer);
		free(av->tab);
		free(av->names);
		free(av);
		pmfi_proc_put();
		return -FI_ENOMEM;
	}
	for (int i = 0; i < av->npeers; i++)
		av->by_peer[i] = FI_ADDR_NOTAVAIL;
	av->dom = d;
	av->fid.fid.fclass = FI_CLASS_AV;
	av->fid.fid.context = context;
	av->fid.fid.ops = &av_fi_ops;
	av->fid.ops = &av_ops;
	d->refs++;
	*out = &av->fid;
	return 0;
}
