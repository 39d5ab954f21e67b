/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Event counters of scx_latcfs: one per-CPU slot per enum latcfs_stat
 * (intf.h), summed over CPUs by the loader. Per CPU so that counting never
 * bounces a cache line between CPUs.
 *
 * Limits: the loader reads the slots while CPUs write them, so a snapshot
 * is not atomic across counters: ratios over one interval (the hit rates)
 * can be off by the events of that instant. Counters are 64 bits and only
 * grow, and the loader reports differences; but for cg_active, a level
 * that any CPU moves by one either way, whose per-CPU slots mean nothing
 * alone: only their sum is reported.
 */
#ifndef __LATCFS_STATS_BPF_H
#define __LATCFS_STATS_BPF_H

#include <scx/common.bpf.h>
#include "intf.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(key_size, sizeof(u32));
	__uint(value_size, sizeof(u64));
	__uint(max_entries, LATCFS_NR_STATS);
} stats SEC(".maps");

static __always_inline void stat_add(u32 idx, s64 delta)
{
	u64 *cnt = bpf_map_lookup_elem(&stats, &idx);

	if (cnt)
		*cnt += delta;
}

static __always_inline void stat_inc(u32 idx)
{
	stat_add(idx, 1);
}

#endif /* __LATCFS_STATS_BPF_H */
