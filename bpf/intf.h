/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the BPF scheduler and the Rust loader share. bindgen turns this file
 * into src/bpf_intf.rs at build time, so it holds only plain C: constants
 * and enums, no kernel types.
 */
#ifndef __LATCFS_INTF_H
#define __LATCFS_INTF_H

enum latcfs_consts {
	/* nice 0 weight, as in the kernel's sched_prio_to_weight[] scaled to scx */
	LATCFS_WEIGHT_DFL	= 100,
	/* id of the vtime-ordered DSQ that runnable tasks wait in */
	LATCFS_SHARED_DSQ	= 0,
};

/*
 * Per-CPU event counters, indexes into the BPF "stats" map. The loader sums
 * them over CPUs and prints the per-interval deltas.
 */
enum latcfs_stat {
	/* ops.enqueue() calls: tasks that went through the scheduler's queue path */
	LATCFS_STAT_ENQUEUE,
	/* ops.runnable() with SCX_ENQ_WAKEUP: tasks waking up */
	LATCFS_STAT_WAKEUP,
	/* tasks inserted straight into an idle CPU's local DSQ from select_cpu */
	LATCFS_STAT_DIRECT,
	/* tasks moved from the shared vtime DSQ to a CPU's local DSQ */
	LATCFS_STAT_SHARED,
	/* dispatches that found nothing queued and let the running task go on */
	LATCFS_STAT_KEEP,
	/* wakeups whose vtime was clamped by the sleeper-credit bound */
	LATCFS_STAT_LAG_CLAMP,
	LATCFS_NR_STATS,
};

#endif /* __LATCFS_INTF_H */
