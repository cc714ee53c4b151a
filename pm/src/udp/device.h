/* SPDX-License-Identifier: MIT */
/* device.h - the udp device (device.c), for the device table. */
#ifndef PM_UDP_DEVICE_H
#define PM_UDP_DEVICE_H

#include "core/pm_internal.h"

/* PM/Ethernet: the processes of a job on any nodes, over UDP (with
 * PM_DEVICE_REMOTE_ONLY, those on other nodes). */
extern const struct pm_device_ops pm_udp_ops;

/* The same protocol in raw Ethernet frames (eth/link.h): processes on
 * other nodes only, CAP_NET_RAW. */
extern const struct pm_device_ops pm_eth_ops;

#endif /* PM_UDP_DEVICE_H */
