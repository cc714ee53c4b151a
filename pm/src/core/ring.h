/* SPDX-License-Identifier: MIT */
/*
 * ring.h - single-producer single-consumer message ring in shared memory.
 *
 * The ring lives in the *receiver's* segment; the sender maps it and writes
 * messages straight into it (PM's zero-copy hand-off).  Positions are
 * absolute 64-bit byte counts, so they never wrap in practice; the offset in
 * the data area is position & (size - 1).
 *
 * Layout (see docs/pm/design.md, "Rings"):
 *   [0, 64)     head: bytes published by the producer (the producer's own
 *               record of it; the consumer does not read it)
 *   [64, 128)   tail: bytes released by the consumer
 *   [128, ...)  data: records, each 64-byte aligned:
 *               u32 len (payload bytes) | u32 flags | u64 mark | payload
 *
 * A record is published by its mark: its position + 1, stored last.  The
 * consumer polls the mark of the record at its read position, which a small
 * message shares a cache line with, instead of a head index on a line of
 * its own: one cache line moves from the producer's core per message, not
 * two in turn.
 *
 * A record that would straddle the end of the data area is preceded by a
 * PAD record that fills the rest of it.  The consumer may release records in
 * any order; the tail advances over the released prefix.
 */
#ifndef PM_RING_H
#define PM_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_HDR_BYTES   128u
#define RING_REC_HDR     16u
#define RING_ALIGN       64u
#define RING_MIN_BYTES   4096u

struct ring_shared {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
};

/* A record's header, at a 64-byte aligned position of the data area. */
struct ring_rec {
	uint32_t len;
	uint32_t flags;
	_Atomic uint64_t mark;  /* position + 1 once published */
};

/* The record header at position pos of a data area of size bytes. */
static inline struct ring_rec *rec_at(uint8_t *data, uint64_t size, uint64_t pos)
{
	return (struct ring_rec *)(data + (pos & (size - 1)));
}

/* The producer's private view (lives in the sender's memory). */
struct ring_producer {
	struct ring_shared *sh;
	uint8_t *data;
	uint64_t size;          /* data bytes, a power of two */
	uint64_t head;          /* our copy of sh->head */
	uint64_t cached_tail;   /* last tail we read; refreshed only when full */
	uint64_t clean_to;      /* slots after the head and before this have clear marks */
	uint64_t reserved_pos;  /* position of the outstanding record */
	uint32_t reserved_len;
	bool outstanding;
};

/* The consumer's private view (lives in the receiver's memory). */
struct ring_consumer {
	struct ring_shared *sh;
	uint8_t *data;
	uint64_t size;
	uint64_t read;          /* next record to deliver */
	uint64_t tail;          /* our copy of sh->tail */
};

/* Bytes of shared memory one ring of data_bytes needs (header included). */
size_t ring_footprint(uint64_t data_bytes);

/* Largest payload one message may carry in a ring of data_bytes. */
size_t ring_max_message(uint64_t data_bytes);

/* true when data_bytes is a valid ring size (power of two, >= 4 KiB). */
bool ring_size_valid(uint64_t data_bytes);

/* Initialise a ring in fresh (zeroed or not) memory; done by its owner. */
void ring_init(void *mem, uint64_t data_bytes);

void ring_producer_attach(struct ring_producer *p, void *mem, uint64_t data_bytes);
void ring_consumer_attach(struct ring_consumer *c, void *mem, uint64_t data_bytes);

/*
 * Reserve room for a len-byte message.  0 and *buf on success; -EAGAIN when
 * the consumer has not released enough; -EMSGSIZE; -EBUSY if a reservation
 * is already outstanding.
 */
int ring_reserve(struct ring_producer *p, size_t len, void **buf);

/* Publish the outstanding reservation with its final length (<= reserved). */
int ring_publish(struct ring_producer *p, size_t len);

/* Free bytes the producer could use now, refreshing its view of the tail. */
uint64_t ring_free_bytes(struct ring_producer *p);

/*
 * Next unread message: 0 with *data, *len and *cookie; -EAGAIN when none;
 * -EPROTO when the record is malformed (the ring is then unusable).
 */
int ring_peek(struct ring_consumer *c, const void **data, size_t *len,
	      uint64_t *cookie);

/* Release a message taken with ring_peek(); -EINVAL on a bad cookie. */
int ring_release(struct ring_consumer *c, uint64_t cookie);

static inline bool ring_readable(const struct ring_consumer *c)
{
	/* Acquire: the record's header and payload are seen as published. */
	return atomic_load_explicit(&rec_at(c->data, c->size, c->read)->mark,
				    memory_order_acquire) == c->read + 1;
}

#endif /* PM_RING_H */
