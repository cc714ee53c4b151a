/* SPDX-License-Identifier: MIT */
/*
 * pageset.h - a set of page numbers: a bitmap that remembers the range of
 * words it touched (clearing and walking cost what was set, not the heap's
 * size), and its wire form, runs of (u32 first, u32 count) little-endian.
 * Pure: no I/O, no protocol.
 */
#ifndef DSM_PAGESET_H
#define DSM_PAGESET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pageset {
	uint64_t *bits;
	uint32_t npages, count;
	uint32_t lo, hi;        /* words [lo, hi) may hold bits */
};

#define PAGESET_NONE UINT32_MAX
#define PAGESET_RUN_BYTES 8u

int pageset_init(struct pageset *s, uint32_t npages);
void pageset_fini(struct pageset *s);
void pageset_clear(struct pageset *s);
/* true if page was not in the set (page < npages) */
bool pageset_add(struct pageset *s, uint32_t page);
/* Remove page (the range of touched words stays: clear resets it). */
void pageset_del(struct pageset *s, uint32_t page);
bool pageset_has(const struct pageset *s, uint32_t page);
void pageset_union(struct pageset *dst, const struct pageset *src);
/* The first page >= from in the set, or PAGESET_NONE. */
uint32_t pageset_next(const struct pageset *s, uint32_t from);

/* Write runs of the set's pages from *from on into buf (cap bytes, at least
 * one run); returns the bytes written and moves *from past what was
 * written (PAGESET_NONE when all was). */
size_t pageset_encode(const struct pageset *s, uint32_t *from, uint8_t *buf, size_t cap);
/* Add the runs of buf to s.  -EINVAL: a partial run or a page beyond
 * npages (nothing of a malformed buffer is added). */
int pageset_decode(struct pageset *s, const uint8_t *buf, size_t len);
/* Take the runs of buf out of s; -EINVAL as pageset_decode. */
int pageset_decode_del(struct pageset *s, const uint8_t *buf, size_t len);

#endif /* DSM_PAGESET_H */
