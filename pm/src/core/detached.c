/* SPDX-License-Identifier: MIT */
/*
 * detached.c - a detached context's address, to bytes and back.
 *
 * {kind 2, NICs, log2 ring, log2 rcvbuf, context id, key, host id, pid,
 * each NIC's IPv4 address, port and MTU}, little-endian but for the
 * address and port, which are in network order as in a sockaddr_in.
 */
#include "detached.h"
#include "pm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(PM_DADDR_HDR + PM_DADDR_NICS_MAX * PM_DADDR_NIC == PM_ADDRESS_MAX,
	       "three NICs fill an address");

static unsigned log2_floor(uint32_t v)
{
	unsigned l = 0;

	while (v >>= 1)
		l++;
	return l;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes; i-- > 0;)
		v = v << 8 | p[i];
	return v;
}

size_t pm_daddr_encode(const struct pm_daddr *d, uint8_t *a)
{
	uint32_t n = d->nnics < PM_DADDR_NICS_MAX ? d->nnics : PM_DADDR_NICS_MAX;
	size_t used = PM_DADDR_HDR + (size_t)n * PM_DADDR_NIC;

	memset(a, 0, PM_ADDRESS_MAX);
	a[0] = PM_DADDR_KIND;
	a[1] = (uint8_t)n;
	a[2] = (uint8_t)log2_floor(d->ring_bytes);
	a[3] = (uint8_t)(d->rcvbuf ? log2_floor(d->rcvbuf) : 0);
	put_le(a + 4, d->id, 4);
	put_le(a + 8, d->key, 8);
	put_le(a + 16, d->host, 4);
	put_le(a + 20, d->pid, 4);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = a + PM_DADDR_HDR + i * PM_DADDR_NIC;

		memcpy(e, &d->nic[i].addr, 4);
		memcpy(e + 4, &d->nic[i].port, 2);
		put_le(e + 6, d->nic[i].mtu, 2);
	}
	return used;
}

int pm_daddr_decode(const void *addr, size_t len, struct pm_daddr *d)
{
	const uint8_t *a = addr;

	if (len >= 1 && a[0] == 1)
		return -EADDRNOTAVAIL;  /* a context of a launcher's job */
	if (len < PM_DADDR_HDR || a[0] != PM_DADDR_KIND)
		return -EINVAL;

	uint32_t n = a[1];
	size_t used = PM_DADDR_HDR + (size_t)n * PM_DADDR_NIC;

	/* A ring is a power of two of 4 KiB and up (core/ring.h). */
	if (n == 0 || n > PM_DADDR_NICS_MAX || len < used || a[2] < 12 || a[2] > 31 ||
	    a[3] > 31)
		return -EINVAL;
	for (size_t i = used; i < len; i++)     /* zero padding, nothing else */
		if (a[i])
			return -EINVAL;
	memset(d, 0, sizeof(*d));
	d->nnics = n;
	d->ring_bytes = 1u << a[2];
	d->rcvbuf = a[3] ? 1u << a[3] : 0;
	d->id = (uint32_t)get_le(a + 4, 4);
	d->key = get_le(a + 8, 8);
	d->host = (uint32_t)get_le(a + 16, 4);
	d->pid = (uint32_t)get_le(a + 20, 4);
	if (d->id == 0 || d->pid > INT32_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *e = a + PM_DADDR_HDR + i * PM_DADDR_NIC;
		struct pm_daddr_nic *nic = &d->nic[i];

		memcpy(&nic->addr, e, 4);
		memcpy(&nic->port, e + 4, 2);
		nic->mtu = (uint16_t)get_le(e + 6, 2);
		if (nic->addr == 0 || nic->port == 0 || nic->mtu < 576)
			return -EINVAL;
	}
	return 0;
}

static uint32_t fnv1a(uint32_t h, const char *s)
{
	for (const unsigned char *c = (const unsigned char *)s; *c; c++)
		h = (h ^ *c) * 16777619u;
	return h;
}

uint32_t pm_host_id(void)
{
	char buf[128] = "";
	uint32_t h = 2166136261u;
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
	struct stat st;

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = '\0';
		fclose(f);
	}
	h = fnv1a(h, buf);
	if (gethostname(buf, sizeof(buf) - 1) < 0)
		buf[0] = '\0';
	buf[sizeof(buf) - 1] = '\0';
	h = fnv1a(h, buf);
	/* The PID namespace: a pid means the same process only inside one. */
	if (stat("/proc/self/ns/pid", &st) == 0) {
		snprintf(buf, sizeof(buf), "/%llu:%llu", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
		h = fnv1a(h, buf);
	}
	return h;
}
