/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Weighted vruntime accounting for scx_latcfs.
 *
 * Every task carries a virtual time in p->scx.dsq_vtime. While it runs, its
 * vtime advances by the wall time it used scaled by the inverse of its weight:
 *
 *	vtime += delta_exec * LATCFS_WEIGHT_DFL / p->scx.weight
 *
 * so a nice 0 task (weight 100) ages at wall-clock speed, and a nice 10 task
 * (weight ~10) ages ten times faster and is served a tenth as often. A task
 * in a cgroup other than the root is charged with the effective weight its
 * cgroup's share gives it instead (cgroup.bpf.h). The
 * shared DSQ is ordered by vtime, so the most under-served task runs next:
 * this is weighted fair queueing, as CFS does it.
 *
 * vtime_now follows the vtime of the tasks being started, i.e. the front of
 * the queue. A task that sleeps stops ageing; when it wakes, it may start at
 * most slice_lag_ns of weighted time behind vtime_now (the sleeper credit),
 * just as EEVDF clamps a waking entity's lag. Without the bound, a task that
 * slept for minutes would own a CPU until it had "caught up".
 */
#ifndef __LATCFS_VRUNTIME_BPF_H
#define __LATCFS_VRUNTIME_BPF_H

#include "task.bpf.h"
#include "cgroup.bpf.h"

/* Base time slice a task gets each time it is dispatched (--slice-us). */
const volatile u64 slice_ns = 3ULL * 1000 * 1000;

/*
 * Sleeper credit bound (--slice-lag-us): how far, in weighted ns, a waking
 * task's vtime may lag behind vtime_now.
 */
const volatile u64 slice_lag_ns = 3ULL * 1000 * 1000;

/* vtime of the most recently started task: the queue's current vtime. */
static u64 vtime_now;

/*
 * Most weighted time a task may run ahead of vtime_now. Weighted fairness
 * alone would let a nice 19 task (weight 1) that ran one 3 ms slice wait
 * until nice -20 hogs (weight 8668) had run 300 ms of weighted time each:
 * half a minute and more, past the sched_ext watchdog. The cap keeps every
 * wait bounded; it only bites beyond a weight ratio of about 33 at the
 * default slice (nice 0 against nice 15), where the lowest-weight task
 * therefore gets a little more than its share.
 */
#define VTIME_MAX_LEAD_NS	(100ULL * 1000 * 1000)

/* Weighted vtime that @delta_ns of wall time is worth to @p. */
static __always_inline u64 scale_by_weight_inverse(struct task_struct *p, struct task_ctx *tctx,
						   u64 delta_ns)
{
	u64 eff = cg_task_weight(p, tctx);

	if (!eff)
		return delta_ns * LATCFS_WEIGHT_DFL / p->scx.weight;
	return (delta_ns * LATCFS_WEIGHT_DFL << CG_HW_SHIFT) / eff;
}

/*
 * Bound the sleeper credit of waking task @p: if it slept long enough to
 * fall more than slice_lag_ns behind vtime_now, it restarts exactly that far
 * behind. Returns true when the bound applied.
 */
static __always_inline bool vtime_bound_lag(struct task_struct *p)
{
	u64 floor = vtime_now > slice_lag_ns ? vtime_now - slice_lag_ns : 0;

	if (!time_before(p->scx.dsq_vtime, floor))
		return false;
	p->scx.dsq_vtime = floor;
	return true;
}

static __always_inline void vtime_start(struct task_struct *p, struct task_ctx *tctx)
{
	if (time_before(vtime_now, p->scx.dsq_vtime))
		vtime_now = p->scx.dsq_vtime;
	tctx->last_run_at = scx_bpf_now();
}

/*
 * @p's vtime including the time it has run since vtime_start() and not yet
 * been charged for.
 */
static __always_inline u64 vtime_current(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = scx_bpf_now();

	if (!tctx->last_run_at || now <= tctx->last_run_at)
		return p->scx.dsq_vtime;
	return p->scx.dsq_vtime + scale_by_weight_inverse(p, tctx, now - tctx->last_run_at);
}

/*
 * Charge the time @p ran since vtime_start(). This spans slice refills: a
 * task that kept its CPU through several slices pays for all of them.
 */
static __always_inline void vtime_charge(struct task_struct *p, struct task_ctx *tctx)
{
	u64 vtime = vtime_current(p, tctx);

	if (time_before(vtime_now + VTIME_MAX_LEAD_NS, vtime))
		vtime = vtime_now + VTIME_MAX_LEAD_NS;
	p->scx.dsq_vtime = vtime;
	tctx->last_run_at = 0;
}

#endif /* __LATCFS_VRUNTIME_BPF_H */
