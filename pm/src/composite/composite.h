/* SPDX-License-Identifier: MIT */
/* composite.h - the composite device (composite.c), for the device table. */
#ifndef PM_COMPOSITE_H
#define PM_COMPOSITE_H

#include "core/pm_internal.h"

/* Each peer through the device that reaches it best: shm on this node,
 * udp for the others. */
extern const struct pm_device_ops pm_composite_ops;

#endif /* PM_COMPOSITE_H */
