/* SPDX-License-Identifier: MIT */
/*
 * atomic.h - how PM's atomics are done wherever they run (pm_atomic()).
 *
 * A window's words may be changed by three kinds of executor: the owner's
 * own thread (a peer that is itself), shm peers reading and writing it
 * with process_vm_readv/writev, and the owner's udp progress answering a
 * network peer.  None of them can use one CPU instruction for all, so they
 * take turns under one lock per context: a word in the owner's shm segment
 * where it has one (peers on the node map it), else in the context.
 */
#ifndef PM_ATOMIC_H
#define PM_ATOMIC_H

#include "pm.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* One of enum pm_atomic_op, with or without PM_ATOMIC_32. */
bool pm_atomic_op_valid(uint32_t op);

/* The bytes of the word op works on: 8, or 4 with PM_ATOMIC_32. */
static inline size_t pm_atomic_width(uint32_t op)
{
	return op & PM_ATOMIC_32 ? 4 : 8;
}

/* The word's new value (pure; a 32-bit one in the low bits). */
uint64_t pm_atomic_compute(uint32_t op, uint64_t old, uint64_t operand, uint64_t compare);

/*
 * Take and give back a context's atomics lock.  The word holds the
 * holder's process id, so that a holder that died (killed between its
 * read and its write) does not block the others forever: a waiter that
 * finds the holder gone takes the lock over.
 */
void pm_atomic_lock(_Atomic uint32_t *lock);
void pm_atomic_unlock(_Atomic uint32_t *lock);

/*
 * op on the word at `at` in this process, under lock: its old value in
 * *old.  -EINVAL when `at` is not aligned to the word's width or op is
 * unknown.
 */
int pm_atomic_here(_Atomic uint32_t *lock, void *at, uint32_t op, uint64_t operand,
		   uint64_t compare, uint64_t *old);

/* A word of op's width in memory (host order), as a 64-bit value, and
 * back: what a peer reads and writes with process_vm_*, and a caller's
 * result. */
static inline uint64_t pm_atomic_load(uint32_t op, const void *at)
{
	if (op & PM_ATOMIC_32) {
		uint32_t w;

		memcpy(&w, at, sizeof(w));
		return w;
	}

	uint64_t w;

	memcpy(&w, at, sizeof(w));
	return w;
}

static inline void pm_atomic_store(uint32_t op, void *at, uint64_t v)
{
	if (op & PM_ATOMIC_32) {
		uint32_t w = (uint32_t)v;

		memcpy(at, &w, sizeof(w));
	} else {
		memcpy(at, &v, sizeof(v));
	}
}

#endif /* PM_ATOMIC_H */
