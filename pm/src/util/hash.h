/* SPDX-License-Identifier: MIT */
/* hash.h - hashing names. */
#ifndef PM_UTIL_HASH_H
#define PM_UTIL_HASH_H

#include <stdint.h>

/* FNV-1a 64 of a string: stable across builds and machines, which the job
 * key (docs/pm/wire.md) must be. */
uint64_t pm_hash64(const char *s);

#endif /* PM_UTIL_HASH_H */
