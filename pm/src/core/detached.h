/* SPDX-License-Identifier: MIT */
/*
 * detached.h - the address of a detached context (PM_OPEN_DETACHED), the
 * one layout every device of such a context reads: its identity (context
 * id, key, host and process) for any device, its receive ring, buffers and
 * NICs for the network device.  Byte layout: docs/pm/wire.md, "Detached
 * contexts".  The core owns it so that no device copies another's offsets.
 */
#ifndef PM_DETACHED_H
#define PM_DETACHED_H

#include <stddef.h>
#include <stdint.h>

#define PM_DADDR_KIND     2     /* a job's context is 1 (core/context.c) */
#define PM_DADDR_HDR      24
#define PM_DADDR_NIC      8
#define PM_DADDR_NICS_MAX 3

struct pm_daddr_nic {
	uint32_t addr;          /* IPv4, network byte order as in sockaddr_in */
	uint16_t port;          /* network byte order */
	uint16_t mtu;
};

struct pm_daddr {
	uint32_t id;            /* context id: public, random, never 0 */
	uint64_t key;           /* secret: packets to the context carry it */
	uint32_t host;          /* pm_host_id() of its host */
	uint32_t pid;           /* its process when shm can reach it, else 0 */
	uint32_t ring_bytes;    /* its network receive ring per peer */
	uint32_t rcvbuf;        /* its sockets' receive buffer (0: unknown) */
	uint32_t nnics;         /* 1..PM_DADDR_NICS_MAX */
	struct pm_daddr_nic nic[PM_DADDR_NICS_MAX];
};

/* The address of d into out (PM_ADDRESS_MAX bytes); returns its length.
 * ring_bytes and rcvbuf are rounded down to powers of two. */
size_t pm_daddr_encode(const struct pm_daddr *d, uint8_t *out);

/* An address checked to its last byte (anything after the NICs must be
 * zero).  -EINVAL malformed, -EADDRNOTAVAIL a context of a launcher's job. */
int pm_daddr_decode(const void *addr, size_t len, struct pm_daddr *d);

/*
 * 32 bits that two processes share when they run under one kernel (boot
 * id), with one host name and one PID namespace: then a pid in the address
 * names the same process for both, and shm can reach it.
 */
uint32_t pm_host_id(void);

#endif /* PM_DETACHED_H */
