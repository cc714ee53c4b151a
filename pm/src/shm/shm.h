/* SPDX-License-Identifier: MIT */
/* shm.h - the shm device (shm.c), for the device table. */
#ifndef PM_SHM_H
#define PM_SHM_H

#include "core/pm_internal.h"

/* The processes of a job on one node: rings in shared memory. */
extern const struct pm_device_ops pm_shm_ops;

#endif /* PM_SHM_H */
