/* SPDX-License-Identifier: MIT */
/* ring.c - the single-producer single-consumer message ring (see ring.h). */
#include "ring.h"

#include <errno.h>
#include <string.h>

enum {
	REC_PAD = 1u << 0,      /* filler up to the end of the data area */
	REC_RELEASED = 1u << 1, /* set by the consumer when it is done */
};

_Static_assert(sizeof(struct ring_rec) == RING_REC_HDR, "record header size");
_Static_assert(sizeof(struct ring_shared) <= RING_HDR_BYTES, "ring header size");

static inline uint64_t rec_bytes(uint64_t len)
{
	return (RING_REC_HDR + len + RING_ALIGN - 1) & ~(uint64_t)(RING_ALIGN - 1);
}

bool ring_size_valid(uint64_t data_bytes)
{
	return data_bytes >= RING_MIN_BYTES && (data_bytes & (data_bytes - 1)) == 0 &&
	       data_bytes <= (1ull << 31);
}

size_t ring_footprint(uint64_t data_bytes)
{
	return RING_HDR_BYTES + data_bytes;
}

size_t ring_max_message(uint64_t data_bytes)
{
	/* A quarter keeps several messages in flight and guarantees that a
	 * record plus its padding always fits in an empty ring. */
	return data_bytes / 4;
}

void ring_init(void *mem, uint64_t data_bytes)
{
	struct ring_shared *sh = mem;
	struct ring_rec *first = rec_at((uint8_t *)mem + RING_HDR_BYTES, data_bytes, 0);

	/* Only the first record's mark must be clear: every later one is
	 * cleared by the publication of the record before it (publish()). */
	atomic_store_explicit(&first->mark, 0, memory_order_relaxed);
	atomic_store_explicit(&sh->head, 0, memory_order_relaxed);
	atomic_store_explicit(&sh->tail, 0, memory_order_release);
}

void ring_producer_attach(struct ring_producer *p, void *mem, uint64_t data_bytes)
{
	memset(p, 0, sizeof(*p));
	p->sh = mem;
	p->data = (uint8_t *)mem + RING_HDR_BYTES;
	p->size = data_bytes;
	p->head = atomic_load_explicit(&p->sh->head, memory_order_relaxed);
	p->clean_to = p->head;  /* the head's own slot is clear (ring_init, publish) */
	p->cached_tail = atomic_load_explicit(&p->sh->tail, memory_order_acquire);
}

void ring_consumer_attach(struct ring_consumer *c, void *mem, uint64_t data_bytes)
{
	memset(c, 0, sizeof(*c));
	c->sh = mem;
	c->data = (uint8_t *)mem + RING_HDR_BYTES;
	c->size = data_bytes;
	c->tail = atomic_load_explicit(&c->sh->tail, memory_order_relaxed);
	c->read = c->tail;
}

uint64_t ring_free_bytes(struct ring_producer *p)
{
	p->cached_tail = atomic_load_explicit(&p->sh->tail, memory_order_acquire);
	return p->size - (p->head - p->cached_tail);
}

/* How far ahead of the head the producer keeps the slots' marks clear: the
 * slot after the next.  A pmbench shm ping-pong measured 128 bytes as fast
 * as clearing only the next slot on two cores that share no cache, and
 * 1 KiB slower; on two that share one, clearing before the mark was the
 * slower (git log of this file). */
#define RING_CLEAR_AHEAD (2u * RING_ALIGN)

static void clear_mark(struct ring_producer *p, uint64_t pos)
{
	atomic_store_explicit(&rec_at(p->data, p->size, pos)->mark, 0, memory_order_relaxed);
}

/*
 * Publish the record of `bytes` at pos, whose header and payload are
 * written.
 *
 * The slot after it, where the consumer looks next, may hold a word of an
 * old payload that reads as that slot's mark.  So every slot from the head
 * up to p->clean_to has had its mark cleared since the producer last wrote
 * there; the slot after the record is cleared now, before the mark, if it
 * is not one of them and is free space.  When it is not free (the ring is
 * full up to it), it holds the header of the oldest unreleased record, a
 * lap behind, whose mark cannot match.
 *
 * The slots ahead are cleared after the mark: on x86 a store is seen only
 * after every store before it, so a clear of a line not in this core's
 * cache, made before the mark, would hold the message back by the time it
 * takes to fetch that line.
 */
static void publish(struct ring_producer *p, uint64_t pos, uint64_t bytes)
{
	uint64_t next = pos + bytes;
	uint64_t free_end = p->cached_tail + p->size;   /* stale: never too far */

	if (next >= p->clean_to) {
		if (next < free_end)
			clear_mark(p, next);
		p->clean_to = next + RING_ALIGN;
	}
	atomic_store_explicit(&rec_at(p->data, p->size, pos)->mark, pos + 1,
			      memory_order_release);
	p->head = next;
	atomic_store_explicit(&p->sh->head, next, memory_order_relaxed);

	uint64_t ahead = next + RING_CLEAR_AHEAD < free_end ? next + RING_CLEAR_AHEAD : free_end;

	for (; p->clean_to < ahead; p->clean_to += RING_ALIGN)
		clear_mark(p, p->clean_to);
}

/* A PAD from the head to the end of the data area, published at once: the
 * consumer skips it whenever it gets there. */
static void write_pad(struct ring_producer *p, uint64_t pad)
{
	struct ring_rec *r = rec_at(p->data, p->size, p->head);

	r->len = (uint32_t)(pad - RING_REC_HDR);
	r->flags = REC_PAD;
	publish(p, p->head, pad);
}

int ring_reserve(struct ring_producer *p, size_t len, void **buf)
{
	if (p->outstanding)
		return -EBUSY;
	if (len > ring_max_message(p->size))
		return -EMSGSIZE;

	uint64_t rec = rec_bytes(len);
	uint64_t off = p->head & (p->size - 1);
	uint64_t pad = off + rec > p->size ? p->size - off : 0;

	if (p->size - (p->head - p->cached_tail) < pad + rec) {
		uint64_t free = ring_free_bytes(p);

		if (free < pad + rec) {
			/* Publish the padding alone when it fits: the consumer then
			 * skips it and the record can start at offset 0 later.
			 * Without this an empty ring could refuse a large record. */
			if (pad && free >= pad)
				write_pad(p, pad);
			return -EAGAIN;
		}
	}
	if (pad)
		write_pad(p, pad);

	struct ring_rec *r = rec_at(p->data, p->size, p->head);

	r->len = (uint32_t)len;
	r->flags = 0;
	p->reserved_pos = p->head;
	p->reserved_len = (uint32_t)len;
	p->outstanding = true;
	*buf = r + 1;
	return 0;
}

int ring_publish(struct ring_producer *p, size_t len)
{
	if (!p->outstanding)
		return -EINVAL;
	if (len > p->reserved_len)
		return -EMSGSIZE;

	rec_at(p->data, p->size, p->reserved_pos)->len = (uint32_t)len;
	p->outstanding = false;
	publish(p, p->reserved_pos, rec_bytes(len));
	return 0;
}

/* Move the shared tail over the released prefix of records. */
static void advance_tail(struct ring_consumer *c)
{
	uint64_t tail = c->tail;

	while (tail != c->read) {
		struct ring_rec *r = rec_at(c->data, c->size, tail);
		uint64_t rec = rec_bytes(r->len);

		/* The length is read again from shared memory: a producer may
		 * have rewritten it since ring_peek() checked it.  Never move
		 * the tail past what was delivered (that would hand the
		 * producer space still holding unreleased messages). */
		if (!(r->flags & REC_RELEASED) || rec > c->read - tail)
			break;
		tail += rec;
	}
	if (tail != c->tail) {
		c->tail = tail;
		atomic_store_explicit(&c->sh->tail, tail, memory_order_release);
	}
}

int ring_peek(struct ring_consumer *c, const void **data, size_t *len,
	      uint64_t *cookie)
{
	for (;;) {
		if (!ring_readable(c))
			return -EAGAIN;

		struct ring_rec *r = rec_at(c->data, c->size, c->read);

		/* The producer is another process: check before trusting. */
		uint64_t off = c->read & (c->size - 1);
		uint32_t rlen = r->len, flags = r->flags;
		uint64_t rec = rec_bytes(rlen);

		if (off + rec > c->size || (flags & ~(uint32_t)REC_PAD))
			return -EPROTO;
		if (flags & REC_PAD) {
			if (off + rec != c->size)
				return -EPROTO;
			r->flags = REC_PAD | REC_RELEASED;
			c->read += rec;
			advance_tail(c);
			continue;
		}
		if (rlen > ring_max_message(c->size))
			return -EPROTO;
		*data = r + 1;
		*len = rlen;
		*cookie = c->read;
		c->read += rec;
		/* The next record's header is on a line the producer wrote
		 * last (a mark it cleared ahead), so reading it is a transfer
		 * from the producer's core.  A caller that drains looks at it
		 * right after handling this message, before it can answer:
		 * ask for the line now, so the transfer overlaps that work. */
		__builtin_prefetch(rec_at(c->data, c->size, c->read), 0, 3);
		return 0;
	}
}

int ring_release(struct ring_consumer *c, uint64_t cookie)
{
	if (cookie - c->tail >= c->read - c->tail || cookie % RING_ALIGN)
		return -EINVAL;

	struct ring_rec *r = rec_at(c->data, c->size, cookie);

	if (r->flags & REC_RELEASED)
		return -EINVAL;
	r->flags |= REC_RELEASED;
	if (cookie == c->tail)
		advance_tail(c);
	return 0;
}
