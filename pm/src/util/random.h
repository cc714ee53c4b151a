/* SPDX-License-Identifier: MIT */
/* random.h - secrets from the kernel. */
#ifndef PM_UTIL_RANDOM_H
#define PM_UTIL_RANDOM_H

#include <stdint.h>

/* 64 random bits from getrandom(2): 0, or a negative errno. */
int pm_random_u64(uint64_t *out);

#endif /* PM_UTIL_RANDOM_H */
