/* SPDX-License-Identifier: MIT */
/* ring.c - the single-producer single-consumer message ring (see ring.h). */
#include "ring.h"

#include <errno.h>
#include <string.h>

enum {
	REC_PAD = 1u << 0,      /* filler up to the end of the data area */
	REC_RELEASED = 1u << 1, /* set by the consumer when it is done */
};

struct ring_rec {
	uint32_t len;
	uint32_t flags;
	uint64_t reserved;
};

_Static_assert(sizeof(struct ring_rec) == RING_REC_HDR, "record header size");
_Static_assert(sizeof(struct ring_shared) <= RING_HDR_BYTES, "ring header size");

static inline uint64_t rec_bytes(uint64_t len)
{
	return (RING_REC_HDR + len + RING_ALIGN - 1) & ~(uint64_t)(RING_ALIGN - 1);
}

static inline struct ring_rec *rec_at(uint8_t *data, uint64_t size, uint64_t pos)
{
	return (struct ring_rec *)(data + (pos & (size - 1)));
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

	(void)data_bytes; /* the size is the caller's to remember */
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

static void write_pad(struct ring_producer *p, uint64_t pad)
{
	struct ring_rec *r = rec_at(p->data, p->size, p->head);

	r->len = (uint32_t)(pad - RING_REC_HDR);
	r->flags = REC_PAD;
	p->head += pad;
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
			if (pad && free >= pad) {
				write_pad(p, pad);
				atomic_store_explicit(&p->sh->head, p->head,
						      memory_order_release);
			}
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
	p->head = p->reserved_pos + rec_bytes(len);
	p->outstanding = false;
	atomic_store_explicit(&p->sh->head, p->head, memory_order_release);
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
		uint64_t head = atomic_load_explicit(&c->sh->head, memory_order_acquire);
		uint64_t avail = head - c->read;

		if (avail == 0)
			return -EAGAIN;

		/* The producer is another process: check before trusting. */
		uint64_t off = c->read & (c->size - 1);
		struct ring_rec *r = rec_at(c->data, c->size, c->read);
		uint32_t rlen = r->len, flags = r->flags;
		uint64_t rec = rec_bytes(rlen);

		if (avail > c->size || avail % RING_ALIGN || rec > avail ||
		    off + rec > c->size || (flags & ~(uint32_t)REC_PAD))
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
