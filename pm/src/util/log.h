/* SPDX-License-Identifier: MIT */
/* log.h - libpm's diagnostics. */
#ifndef PM_UTIL_LOG_H
#define PM_UTIL_LOG_H

/* A line on stderr, prefixed "pm[rank]:" (rank -1 before the bootstrap
 * gave one), unless PM_VERBOSE=0.  Safe in the preemption procedure, which
 * may run in a signal handler (log.c). */
void pm_log(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* PM_UTIL_LOG_H */
