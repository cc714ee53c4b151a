/* SPDX-License-Identifier: MIT */
/*
 * atomic.c - the operation of pm_atomic() and the lock its executors share
 * (atomic.h).
 */
#include "atomic.h"
#include "pm.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* Failed tries between looks at whether the holder still lives. */
#define LOCK_LIVENESS_EVERY 1024u

bool pm_atomic_op_valid(uint32_t op)
{
	return op >= PM_ATOMIC_ADD && op <= PM_ATOMIC_XOR;
}

uint64_t pm_atomic_compute(uint32_t op, uint64_t old, uint64_t operand, uint64_t compare)
{
	switch (op) {
	case PM_ATOMIC_ADD:
		return old + operand;
	case PM_ATOMIC_SWAP:
		return operand;
	case PM_ATOMIC_CSWAP:
		return old == compare ? operand : old;
	case PM_ATOMIC_AND:
		return old & operand;
	case PM_ATOMIC_OR:
		return old | operand;
	case PM_ATOMIC_XOR:
		return old ^ operand;
	default:                /* PM_ATOMIC_READ */
		return old;
	}
}

static bool holder_gone(uint32_t holder)
{
	return kill((pid_t)holder, 0) < 0 && errno == ESRCH;
}

void pm_atomic_lock(_Atomic uint32_t *lock)
{
	uint32_t me = (uint32_t)getpid();
	int saved = errno;

	for (uint32_t tries = 1;; tries++) {
		uint32_t holder = 0;

		if (atomic_compare_exchange_strong_explicit(lock, &holder, me, memory_order_acquire,
							    memory_order_relaxed))
			break;
		/* Held for two system calls at most: yield rather than spin,
		 * the holder may be waiting for this very core. */
		if (tries % LOCK_LIVENESS_EVERY == 0 && holder != 0 && holder != me &&
		    holder_gone(holder) &&
		    atomic_compare_exchange_strong_explicit(lock, &holder, me, memory_order_acquire,
							    memory_order_relaxed))
			break;
		sched_yield();
	}
	errno = saved;
}

void pm_atomic_unlock(_Atomic uint32_t *lock)
{
	atomic_store_explicit(lock, 0, memory_order_release);
}

int pm_atomic_here(_Atomic uint32_t *lock, void *at, uint32_t op, uint64_t operand,
		   uint64_t compare, uint64_t *old)
{
	uint64_t v;

	if (!pm_atomic_op_valid(op) || ((uintptr_t)at & 7u))
		return -EINVAL;
	pm_atomic_lock(lock);
	/* The word may be read and written by peers with process_vm_*:
	 * memcpy, not a typed access the compiler could keep in a register. */
	memcpy(&v, at, sizeof(v));
	*old = v;
	v = pm_atomic_compute(op, v, operand, compare);
	if (v != *old)
		memcpy(at, &v, sizeof(v));
	pm_atomic_unlock(lock);
	return 0;
}
