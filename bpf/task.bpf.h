/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-task and per-CPU state of scx_latcfs.
 *
 * struct task_ctx (in intf.h, so that `scx_latcfs latency-nice get` can read
 * it) lives in BPF task storage: created in ops.init_task() for every task,
 * freed with the task.
 *
 * struct cpu_ctx is per CPU and written by its own CPU (by the ops that
 * run there), with one exception: a wakeup that preempts this CPU's task,
 * now or by timer, notes that in the defer_ and resume_ fields from the
 * CPU it runs on (preempt.bpf.h). Other CPUs read it: the vtime reference
 * reads every CPU's current vtime (vruntime.bpf.h), and wakeup preemption
 * reads the candidate victims'. Those accesses do pull its cache line across.
 *
 * Limits: task storage is allocated in ops.init_task(), which fails when
 * it cannot be: a fork then fails with -ENOMEM, and at attach time the
 * kernel disables the scheduler ("ops.init_task() failed"), which the
 * loader reports as its exit reason. A cpu_ctx read by another
 * CPU may be a moment old: readers take it as a hint (a victim's key, a
 * CPU's running vtime), and a stale one costs a preemption that was not
 * needed or a reference left a little behind, never a task.
 */
#ifndef __LATCFS_TASK_BPF_H
#define __LATCFS_TASK_BPF_H

#include <scx/common.bpf.h>
#include "intf.h"

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctx_stor SEC(".maps");

static __always_inline struct task_ctx *lookup_task_ctx(const struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctx_stor, (struct task_struct *)p, 0, 0);
}

struct cpu_ctx {
	/*
	 * The sched_ext task running here, as of its last charge
	 * (vtime_note_curr()): its vtime and awake_vt, when that was, how fast
	 * its vtime ages (weighted ns per 2^20 ns), and its latency offset in
	 * the flattened scale (for its key) and as set (for the protection,
	 * arith.h's preempt_protect()).
	 */
	u64	curr_vtime;
	u64	curr_awake;
	u64	curr_started_at;
	u64	curr_scale;
	s64	curr_lat_offset;
	s64	curr_lat_own;
	/* a sched_ext task runs here (the curr_ fields are valid) */
	bool	curr_valid;
	/* the wait bound's last walk here, and whether it found a task (bound.bpf.h) */
	u64	rescue_walk_at;
	bool	rescue_pending;
	/* which DSQ the next walk visits first: they take turns */
	bool	rescue_lat_first;
	/*
	 * When the running task's slice ends (0: nothing of ours runs), and
	 * when the slice timer is armed to fire (0: not armed) (slice.bpf.h)
	 */
	u64	slice_end;
	u64	timer_at;
	/*
	 * A deferred wakeup preemption of the running task (preempt.bpf.h):
	 * when its timer fires (0: not armed), and the curr_started_at of the
	 * slice it is for
	 */
	u64	defer_at;
	u64	defer_slice;
	/*
	 * The running task was preempted for a wakee (preempt.bpf.h): the
	 * curr_started_at of the run that was preempted (0: none) and the
	 * rest of its slice, for its resumption
	 */
	u64	resume_run;
	u64	resume_left;
	/* tasks the current DSQ walk has visited */
	u32	scan_seen;
	/* when this CPU last looked at other domains' queues (domain.bpf.h) */
	u64	steal_check_at;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cpu_ctx);
} cpu_ctx_stor SEC(".maps");

/* This CPU's cpu_ctx. */
static __always_inline struct cpu_ctx *this_cpu_ctx(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&cpu_ctx_stor, &zero);
}

/*
 * @cpu's cpu_ctx. Other CPUs only read it, but for the deferred-preemption
 * and resume notes (defer_*, resume_*), which wakeups write from any CPU.
 */
static __always_inline struct cpu_ctx *cpu_ctx_of(s32 cpu)
{
	u32 zero = 0;

	return bpf_map_lookup_percpu_elem(&cpu_ctx_stor, &zero, cpu);
}

#endif /* __LATCFS_TASK_BPF_H */
