/* SPDX-License-Identifier: MIT */
/*
 * diff.h - what a rank changed in a page since it made the page's twin.
 *
 * A diff is a sequence of runs, each (u16 offset, u16 length, length
 * bytes), little-endian, of exactly the bytes that differ: a byte nobody
 * here wrote is never carried, so several ranks writing disjoint bytes of
 * one page (false sharing) merge at the home without loss.  Pure.
 */
#ifndef DSM_DIFF_H
#define DSM_DIFF_H

#include <stddef.h>
#include <stdint.h>

#define DIFF_PAGE 4096u
/* Worst case: every other byte changed. */
#define DIFF_MAX (DIFF_PAGE / 2u * 5u)

/* Write the diff of page against twin into out (DIFF_MAX bytes); returns
 * its length, 0 when nothing changed. */
size_t dsm_diff_make(const uint8_t *page, const uint8_t *twin, uint8_t *out);

/* Apply a diff to page.  -EINVAL when it is malformed (a run past the
 * page's end, a truncated run): then nothing is applied. */
int dsm_diff_apply(uint8_t *page, const uint8_t *diff, size_t len);

/*
 * A batch: the diffs of several pages for one home, in one message.  Each
 * entry is (u32 page, u32 length, length bytes of diff), little-endian,
 * back to back, at any byte offset.
 */
#define DIFF_ENTRY_HDR 8u
#define DIFF_ENTRY_MAX (DIFF_ENTRY_HDR + DIFF_MAX)

/* Append the diff of page (number pageno) against twin to the batch at
 * out (DIFF_ENTRY_MAX bytes free); returns the bytes appended, 0 when
 * nothing changed (nothing appended). */
size_t dsm_diff_entry_make(uint32_t pageno, const uint8_t *page, const uint8_t *twin,
			   uint8_t *out);

/* The same, and twin becomes equal to page (the bytes of each run copied
 * into it): the baseline of the page's next diff, for a page that stays
 * writable after the release (uffd-async), without copying the page
 * whole. */
size_t dsm_diff_entry_make_sync(uint32_t pageno, const uint8_t *page, uint8_t *twin,
				uint8_t *out);

/* The entry at *off of a batch of len bytes: its page, diff and diff
 * length; *off moves past it.  1 an entry, 0 the end, -EINVAL a truncated
 * entry (the rest of the batch is unusable). */
int dsm_diff_entry_next(const uint8_t *batch, size_t len, size_t *off, uint32_t *pageno,
			const uint8_t **diff, size_t *diff_len);

#endif /* DSM_DIFF_H */
