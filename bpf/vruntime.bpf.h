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
 * cgroup's share gives it instead (cgroup.bpf.h). The shared DSQ is ordered
 * by vtime, so the most under-served task runs next: this is weighted fair
 * queueing, as CFS does it. The arithmetic is in arith.h, overflow-free.
 *
 * The reference, vtime_ref, is CFS' min_vruntime for our one queue: the
 * least vtime at the queue's front, i.e. among the head of the shared DSQ
 * and the tasks running on the CPUs, and it only moves forward. It is
 * updated whenever a task starts, or is charged to keep its CPU
 * (vtime_update_ref()). The latency DSQ, local DSQs and tasks between a
 * DSQ and a CPU are not looked at, so it is the front as far as that goes. Because
 * it is a minimum, a task started out of vtime order (straight onto an idle
 * CPU, pinned, the only task a CPU may run) cannot push it: a low-weight task
 * charged far ahead, or a pinned hog alone on its CPU, stays ahead of the
 * reference instead of dragging it along. Were it the maximum, tasks woken
 * onto other CPUs would be clamped near that runaway value and wait behind
 * every task there until it caught up, for as long as the runaway lasts.
 *
 * Two clamps keep every vtime near the reference:
 *  - sleeper credit: a waking task starts at most slice_lag_ns behind it,
 *    as EEVDF clamps a waking entity's lag, so a long sleeper gets a CPU
 *    soon but cannot monopolise it until it has "caught up";
 *  - lead cap: a charge leaves a task at most VTIME_MAX_LEAD_NS ahead of
 *    it, so that one slice of a nice 19 task (weight 1) is not worth 300 ms
 *    of everybody else's turns.
 * The lead cap bounds weighted time, not wall time: how long a capped task
 * waits depends on its competitors' weights. The wall-clock bound on every
 * wait is bound.bpf.h's.
 *
 * A task keeps its lag (vtime - reference, within the clamps) when it leaves
 * sched_ext for another class and gets it back when it returns, so a
 * priority-inheritance boost or a sched_setscheduler() round trip neither
 * forgives its debt nor takes its credit.
 *
 * Limits: computing the front reads every CPU's cpu_ctx when the reference
 * would move, O(nr_cpus) per start; fine for the machines this queue
 * design serves (one shared DSQ), and the reason the reference is a
 * function of one queue, ready to be kept per queue.
 */
#ifndef __LATCFS_VRUNTIME_BPF_H
#define __LATCFS_VRUNTIME_BPF_H

#include "arith.h"
#include "task.bpf.h"
#include "cgroup.bpf.h"

/* Base time slice a task gets each time it is dispatched (--slice-us, default 3000 µs). */
const volatile u64 slice_ns = 3ULL * 1000 * 1000;

/*
 * Sleeper credit bound (--slice-lag-us, default 3000 µs): how far, in
 * weighted ns, a waking task's vtime may lag behind the reference.
 */
const volatile u64 slice_lag_ns = 3ULL * 1000 * 1000;

/* Most weighted time, in ns, a charge may leave a task ahead of the reference. */
#define VTIME_MAX_LEAD_NS	(100ULL * 1000 * 1000)

/* The queue's reference vtime (see above): monotonic. */
static u64 vtime_ref;

/* Weighted vtime that @delta_ns of wall time is worth to @p. */
static __always_inline u64 scale_by_weight_inverse(struct task_struct *p, struct task_ctx *tctx,
						   u64 delta_ns)
{
	u64 eff = cg_task_weight(p, tctx);

	if (!eff)
		return vt_scale_inv(delta_ns, LATCFS_WEIGHT_DFL, p->scx.weight, 0);
	return vt_scale_inv(delta_ns, LATCFS_WEIGHT_DFL, eff, CG_HW_SHIFT);
}

/*
 * Move the reference to the queue's front, if that is ahead of it: the least
 * of @cand (the vtime of a task starting or just charged here), the shared
 * DSQ's head and what the CPUs run. The scan runs only when the reference
 * would move, and a lost race leaves it a little behind, never ahead.
 */
static void vtime_update_ref(u64 cand)
{
	u64 ref = READ_ONCE(vtime_ref);
	struct task_struct *head;
	struct cpu_ctx *cctx;
	u32 cpu, nr = scx_bpf_nr_cpu_ids();

	if (!vt_before(ref, cand))
		return;
	head = __COMPAT_scx_bpf_dsq_peek(LATCFS_SHARED_DSQ);
	if (head && vt_before(head->scx.dsq_vtime, cand))
		cand = head->scx.dsq_vtime;
	bpf_for(cpu, 0, nr) {
		if (cpu >= LATCFS_MAX_CPUS)
			break;
		cctx = cpu_ctx_of(cpu);
		if (cctx && cctx->curr_valid && vt_before(cctx->curr_vtime, cand))
			cand = cctx->curr_vtime;
	}
	if (vt_before(ref, cand))
		__sync_val_compare_and_swap(&vtime_ref, ref, vt_advance(ref, cand));
}

/*
 * Bound the sleeper credit of waking task @p (see above). Returns true when
 * the bound applied.
 */
static __always_inline bool vtime_bound_lag(struct task_struct *p)
{
	u64 vtime = vt_floor(p->scx.dsq_vtime, READ_ONCE(vtime_ref), slice_lag_ns);

	if (vtime == p->scx.dsq_vtime)
		return false;
	p->scx.dsq_vtime = vtime;
	return true;
}

/* Note @p's vtime as this CPU's current one. */
static __always_inline void vtime_note_curr(struct cpu_ctx *cctx, struct task_struct *p)
{
	cctx->curr_vtime = p->scx.dsq_vtime;
	cctx->curr_valid = true;
}

/* @p starts running on this CPU. */
static __always_inline void vtime_start(struct task_struct *p, struct task_ctx *tctx)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	tctx->last_run_at = scx_bpf_now();
	if (cctx)
		vtime_note_curr(cctx, p);
	vtime_update_ref(p->scx.dsq_vtime);
}

/*
 * @p's vtime including the time it has run since vtime_start() (or its last
 * charge) and not yet been charged for.
 */
static __always_inline u64 vtime_current(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = scx_bpf_now();

	if (!tctx->last_run_at || now <= tctx->last_run_at)
		return p->scx.dsq_vtime;
	return p->scx.dsq_vtime + scale_by_weight_inverse(p, tctx, now - tctx->last_run_at);
}

/* Charge the time @p ran since vtime_start() or its last charge. */
static __always_inline void vtime_charge(struct task_struct *p, struct task_ctx *tctx)
{
	p->scx.dsq_vtime = vt_cap(vtime_current(p, tctx), READ_ONCE(vtime_ref),
				  VTIME_MAX_LEAD_NS);
	tctx->last_run_at = 0;
}

/* @p stops running on this CPU: charge it; nothing of ours runs here now. */
static __always_inline void vtime_stop(struct task_struct *p, struct task_ctx *tctx)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	vtime_charge(p, tctx);
	if (cctx)
		cctx->curr_valid = false;
}

/*
 * @p keeps this CPU for another slice: charge what it ran so far, so that
 * the charge never spans more than a slice or two, and start a new span.
 */
static __always_inline void vtime_recharge(struct task_struct *p, struct task_ctx *tctx)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	vtime_charge(p, tctx);
	tctx->last_run_at = scx_bpf_now();
	if (cctx) {
		vtime_note_curr(cctx, p);
		cctx->curr_started_at = tctx->last_run_at;
	}
	vtime_update_ref(p->scx.dsq_vtime);
}

/* @p leaves sched_ext: keep its lag for when it returns. */
static __always_inline void vtime_save(struct task_struct *p, struct task_ctx *tctx)
{
	tctx->saved_lag = vt_saved_lag(p->scx.dsq_vtime, READ_ONCE(vtime_ref), slice_lag_ns,
				       VTIME_MAX_LEAD_NS);
	tctx->has_saved_lag = true;
}

/*
 * @p enters sched_ext: a new task starts level with the reference, a
 * returning one with the lag it left with.
 */
static __always_inline void vtime_restore(struct task_struct *p, struct task_ctx *tctx)
{
	u64 ref = READ_ONCE(vtime_ref);

	if (tctx && tctx->has_saved_lag) {
		p->scx.dsq_vtime = ref + tctx->saved_lag;
		tctx->has_saved_lag = false;
	} else {
		p->scx.dsq_vtime = ref;
	}
}

#endif /* __LATCFS_VRUNTIME_BPF_H */
