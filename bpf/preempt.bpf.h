/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Wakeup preemption for scx_latcfs.
 *
 * sched_ext notices that a slice ran out only at a tick, so a task woken
 * while every CPU it may use is busy waits for the next tick past the
 * running task's slice: up to slice_ns plus a tick (3 + 4 ms at HZ=250).
 * CFS/EEVDF preempts instead when the wakee deserves the CPU more than the
 * task running there. So do we, for every task, gated the EEVDF way. A
 * waking task that found no idle CPU preempts a running task when
 *
 *  - it would be served next anyway: its key is no later than the first
 *    key of either DSQ, so the preemption does not put it ahead of tasks
 *    that are owed the CPU before it (preempting for a wakee that would
 *    queue behind the head is what halved `perf bench sched messaging` in
 *    scx_eevdf); and
 *  - its key beats the running task's key, brought up to date, by more
 *    than wakeup_gran_ns.
 *
 * Keys are vruntime.bpf.h's (vtime + time awake since the last wakeup,
 * at most a slice), with each side's latency offset added in full: a
 * latency-sensitive wakee preempts more readily, and a task at a positive
 * latency nice yields more readily and preempts less. A task that has run
 * for a while since it woke carries up to a slice more in its key than a
 * task that just woke, so a short sleeper preempts it once it has run
 * wakeup_gran_ns or so longer; two tasks that keep waking each other
 * (pipes, hackbench) are both short of that and do not preempt each other.
 *
 * Victims: the wakee's own CPU (task_cpu, where select_cpu left it) first,
 * then one other CPU it may use, chosen at random, as scx_lavd picks
 * between two. A victim is preempted only if the test above holds, so no
 * IPI is sent for a preemption that cannot win the pick: the wakee goes to
 * the head of the victim's local DSQ (SCX_ENQ_PREEMPT).
 *
 * Limits: the running task's key is computed from what its CPU noted at
 * its last charge (task.bpf.h's cpu_ctx), read without a lock; a race with
 * its CPU switching tasks can, rarely, preempt a task that just started.
 * Only the two candidates are looked at.
 */
#ifndef __LATCFS_PREEMPT_BPF_H
#define __LATCFS_PREEMPT_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "vruntime.bpf.h"
#include "latency.bpf.h"

/*
 * How far a waking task's key must beat another's before it preempts it,
 * or before a latency DSQ task is served ahead of the fair head
 * (--wakeup-gran-us, default 1000 µs), in weighted ns.
 */
const volatile u64 wakeup_gran_ns = 1ULL * 1000 * 1000;

/* The key of the task running on the CPU of @cctx, brought up to @now. */
static __always_inline u64 preempt_curr_key(struct cpu_ctx *cctx, u64 now)
{
	u64 w = 0, awake;

	if (cctx->curr_started_at && now > cctx->curr_started_at)
		w = vt_mul_div(now - cctx->curr_started_at, cctx->curr_scale, 1ULL << 20);
	awake = w >= slice_ns || cctx->curr_awake + w > slice_ns ? slice_ns : cctx->curr_awake + w;
	return cctx->curr_vtime + w + awake + cctx->curr_lat_offset;
}

/* Would waking @p, with preemption key @key, win @cpu from its current task? */
static __always_inline bool preempt_wins(struct task_struct *p, s32 cpu, u64 key, u64 now)
{
	struct cpu_ctx *cctx;

	if (cpu < 0 || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || !(cctx = cpu_ctx_of(cpu)) ||
	    !cctx->curr_valid)
		return false;
	return time_before(key + wakeup_gran_ns, preempt_curr_key(cctx, now));
}

/*
 * Waking @p found no idle CPU: preempt a running task for it if it wins
 * (see above). @qkey is the key it would be queued by, @slice its slice.
 * Returns true if @p was placed on a CPU.
 */
static bool wakeup_preempt(struct task_struct *p, struct task_ctx *tctx, u64 qkey, u64 slice,
			   u64 enq_flags)
{
	struct task_struct *head;
	s32 cpu = scx_bpf_task_cpu(p);
	u64 now, key;

	head = __COMPAT_scx_bpf_dsq_peek(LATCFS_SHARED_DSQ);
	if (head && time_before(head->scx.dsq_vtime, qkey))
		return false;
	if (nr_lat_tasks) {
		head = __COMPAT_scx_bpf_dsq_peek(LATCFS_LAT_DSQ);
		if (head && time_before(head->scx.dsq_vtime, qkey))
			return false;
	}
	now = scx_bpf_now();
	/* the queue key has the negative latency offset; a positive one counts here */
	key = qkey + (tctx->lat_offset > 0 ? tctx->lat_offset : 0);
	if (!preempt_wins(p, cpu, key, now)) {
		if (p->nr_cpus_allowed < 2)
			return false;
		cpu = bpf_cpumask_any_distribute(p->cpus_ptr);
		if (cpu == scx_bpf_task_cpu(p) || !preempt_wins(p, cpu, key, now))
			return false;
		stat_inc(LATCFS_STAT_PREEMPT_OTHER);
	}
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, slice, enq_flags | SCX_ENQ_PREEMPT);
	stat_inc(LATCFS_STAT_PREEMPT);
	if (tctx->lat_offset < 0)
		stat_inc(LATCFS_STAT_LAT_PREEMPT);
	return true;
}

#endif /* __LATCFS_PREEMPT_BPF_H */
