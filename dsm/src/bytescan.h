/* SPDX-License-Identifier: MIT */
/*
 * bytescan.h - finding the next byte of a table that is, or is not, of a
 * class, eight bytes at a time.  The DSM keeps a byte per page (its state,
 * and whether another rank copies it); a release looks for the few pages
 * of interest among a whole heap's, and a byte at a time that walk costs
 * more than the rest of the release.  Pure.
 */
#ifndef DSM_BYTESCAN_H
#define DSM_BYTESCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first i in [from, end) for which ((t[i] & mask) == value) is `in`;
 * end if there is none. */
size_t bytescan_find(const uint8_t *t, size_t from, size_t end, uint8_t mask, uint8_t value,
		     bool in);

#endif /* DSM_BYTESCAN_H */
