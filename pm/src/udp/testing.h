/* SPDX-License-Identifier: MIT */
/*
 * testing.h - a udp protocol endpoint with no device around it: no socket,
 * no context.  For the unit tests and the fuzzer; not part of libpm.
 *
 * Rank r is at 127.0.0.1+r, port 20000+r, reached over one path on NIC 0
 * with 1500-byte packets; every rank of the job, itself included, is a
 * peer.  With conf->cap the endpoint is a detached one (docs/pm/wire.md,
 * "Detached contexts") whose peers all carry the job key, rank r with
 * context id r.  The caller drives it as the device does: sets now_ns, hands it
 * datagrams (udp_proto_input), runs its timers and flushes its output
 * queue into conf->drain.
 */
#ifndef PM_UDP_TESTING_H
#define PM_UDP_TESTING_H

#include "udp.h"

/* The address rank has. */
struct sockaddr_in udp_testing_addr(uint32_t rank);

/* udp_proto_init and every peer opened; undone by udp_proto_fini. */
int udp_testing_open(struct udp_proto *u, const struct udp_proto_conf *conf);

#endif /* PM_UDP_TESTING_H */
