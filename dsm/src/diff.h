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

#endif /* DSM_DIFF_H */
