/* SPDX-License-Identifier: MIT */
/*
 * atomic.c - the operation of pm_atomic() and the lock its executors share
 * (atomic.h).
 */
#include "atomic.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

/* Failed tries between looks at whether the holder still lives. */
#define LOCK_LIVENESS_EVERY 1024u

bool pm_atomic_op_valid(uint32_t op)
{
	uint32_t base = op & ~PM_ATOMIC_32;

	return base >= PM_ATOMIC_ADD && base <= PM_ATOMIC_XOR;
}

uint64_t pm_atomic_compute(uint32_t op, uint64_t old, uint64_t operand, uint64_t compare)
{
	uint64_t mask = op & PM_ATOMIC_32 ? UINT32_MAX : UINT64_MAX;
	uint64_t v;

	old &= mask;
	switch (op & ~PM_ATOMIC_32) {
	case PM_ATOMIC_ADD:
		v = old + operand;
		break;
	case PM_ATOMIC_SWAP:
		v = operand;
		break;
	case PM_ATOMIC_CSWAP:
		v = old == (compare & mask) ? operand : old;
		break;
	case PM_ATOMIC_AND:
		v = old & operand;
		break;
	case PM_ATOMIC_OR:
		v = old | operand;
		break;
	case PM_ATOMIC_XOR:
		v = old ^ operand;
		break;
	default:                /* PM_ATOMIC_READ */
		v = old;
		break;
	}
	return v & mask;
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
	if (!pm_atomic_op_valid(op) || ((uintptr_t)at & (pm_atomic_width(op) - 1)))
		return -EINVAL;
	pm_atomic_lock(lock);
	/* Peers read and write the word with process_vm_*: a plain copy, not
	 * a typed access the compiler could keep in a register. */
	*old = pm_atomic_load(op, at);

	uint64_t v = pm_atomic_compute(op, *old, operand, compare);

	if (v != *old)
		pm_atomic_store(op, at, v);
	pm_atomic_unlock(lock);
	return 0;
}
