/* SPDX-License-Identifier: MIT */
/*
 * devices.c - the device table: every device libpm is built with, each
 * through its own header.  The one file that names them all; the core and
 * composite look devices up here by name (pm_device_find).  A new device
 * is a folder of its own and a line here.
 */
#include "composite/composite.h"
#include "shm/shm.h"
#include "udp/device.h"

#include <stddef.h>

const struct pm_device_ops *const pm_devices[] = {
	&pm_composite_ops,
	&pm_shm_ops,
	&pm_udp_ops,
	&pm_eth_ops,
	NULL,
};
