/* SPDX-License-Identifier: MIT */
/*
 * stats.h - the statistics page a context publishes in shared memory.
 *
 * Each open context maps one file, PM_STATS_DIR/pm-stats.PID.SEQ (default
 * directory /dev/shm), holding this structure; the owner updates the
 * counters in place, readers (pminfo, scored's agent) map it read-only.
 * The byte layout is specified in docs/pm/stats.md; bump the version when
 * it changes.
 */
#ifndef PM_STATS_H
#define PM_STATS_H

#include "pm.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PM_STATS_MAGIC   "PMSTATS1"
#define PM_STATS_VERSION 3u
/* The oldest version readers accept: a page of version 2 (a process linked
 * with an older libpm) is the first PM_STATS_V2_BYTES of version 3, without
 * the layer area. */
#define PM_STATS_VERSION_MIN 2u
#define PM_STATS_V2_BYTES 1000u

/* Sizes of the layer area's names, NUL included (pm_stats_layer(), pm.h). */
#define PM_STATS_LAYER_NAME   16
#define PM_STATS_COUNTER_NAME 32

/*
 * The counters of struct pm_stats (pm.h), in their order: the one list that
 * pminfo, the tests and scored's generated layout (scored/crates/scored/
 * build.rs) are made from.  stats.c checks that it covers the structure.
 */
#define PM_STATS_COUNTERS(X)                                                   \
	X(msgs_sent) X(bytes_sent) X(msgs_recv) X(bytes_recv) X(send_eagain)  \
	X(rma_writes) X(rma_reads) X(rma_bytes) X(regcache_hits)             \
	X(regcache_misses) X(regcache_evictions) X(waits_blocked)            \
	X(retransmits) X(drops) X(stops) X(gos) X(loses) X(quiesces)         \
	X(quiesce_ns) X(rto_polls) X(dups) X(refused_resends)

/* Values of the control word, written by scored's agent (docs/pm/control.md). */
enum pm_stats_control {
	PM_CONTROL_RUN = 0,
	PM_CONTROL_QUIESCE = 1,
};

enum pm_stats_state {
	PM_STATS_OPEN = 1,
	PM_STATS_QUIESCED = 2,
	PM_STATS_CLOSED = 3,
};

/* Per-NIC counters of the udp device. */
struct pm_stats_nic {
	char name[16];                  /*  0 interface name */
	uint32_t addr;                  /* 16 IPv4, network byte order */
	uint32_t rx_dropped;            /* 20 frames the kernel dropped for want
					   of room in our receive ring (eth) */
	uint64_t tx_packets;            /* 24 */
	uint64_t rx_packets;            /* 32 */
	uint64_t tx_bytes;              /* 40 */
	uint64_t rx_bytes;              /* 48 */
};

/*
 * The counters of the layer above PM that published them (pm_stats_layer():
 * libpmdsm, ...).  Everything is written before count, with a release
 * store; count is 0 until then, and stays 0 if no layer publishes.
 */
struct pm_stats_layer {                  /* offset in the area, in the page */
	char name[PM_STATS_LAYER_NAME];  /*    0 1000 the layer, NUL-terminated */
	_Atomic uint32_t count;          /*   16 1016 counters, 0 to PM_STATS_LAYER_MAX */
	uint32_t _pad;                   /*   20 1020 */
	char names[PM_STATS_LAYER_MAX][PM_STATS_COUNTER_NAME];
					 /*   24 1024 each NUL-terminated */
	uint64_t values[PM_STATS_LAYER_MAX];
					 /* 1048 2048 the counters, in the names' order */
};

struct pm_stats_page {
	char magic[8];                  /*   0 */
	uint32_t version;               /*   8 */
	uint32_t page_bytes;            /*  12 sizeof(struct pm_stats_page) */
	int32_t pid;                    /*  16 */
	int32_t rank;                   /*  20 */
	int32_t size;                   /*  24 */
	int32_t nlocal;                 /*  28 */
	char job[256];                  /*  32 NUL-terminated */
	char device[16];                /* 288 NUL-terminated */
	uint64_t start_ns;              /* 304 CLOCK_REALTIME at open */
	_Atomic uint32_t state;         /* 312 enum pm_stats_state */
	_Atomic uint32_t control;       /* 316 reserved for scored */
	uint64_t reserved[6];           /* 320 */
	struct pm_stats stats;          /* 368 */
	uint32_t nnics;                 /* 544 NICs of the udp device */
	uint32_t _pad;                  /* 548 */
	struct pm_stats_nic nics[8];    /* 552 */
	struct pm_stats_layer layer;    /* 1000 version 3 */
};

/* Create and map the page of ctx, a new file of mode 0600 (O_EXCL,
 * O_NOFOLLOW: a name already taken is skipped); sets ctx->page and
 * ctx->stats. */
int pm_stats_publish(struct pm_context *ctx, const char *device);
/* Mark closed, unmap and remove it. */
void pm_stats_unpublish(struct pm_context *ctx);

/* A name of the layer area: 1 to max characters of [a-z0-9_], NUL within
 * max + 1 bytes (what pm_stats_layer() writes, what readers accept). */
bool pm_stats_name_ok(const char *name, size_t max);
/* The layer counters of a mapped page: how many a reader may read (0 for
 * none and for a page of version 2), at most PM_STATS_LAYER_MAX. */
unsigned pm_stats_layer_count(const struct pm_stats_page *page);

/* The directory pages live in (PM_STATS_DIR or /dev/shm). */
const char *pm_stats_dir(void);

/*
 * Map a page read-only for inspection; 0 and *page on success, -EPROTO if
 * the file is not a stats page of a version from PM_STATS_VERSION_MIN to
 * PM_STATS_VERSION of the size that version has (or not a regular file of
 * one link: a link is never followed).  Unmap with pm_stats_unmap().
 */
int pm_stats_map(const char *path, const struct pm_stats_page **page);
void pm_stats_unmap(const struct pm_stats_page *page);

#endif /* PM_STATS_H */
