/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Idle CPU selection for scx_latcfs, after CFS' select_idle_sibling() and
 * "sched/fair: Use prev instead of new target as recent_used_cpu" (2021).
 *
 * A waking task goes to the first idle CPU it may use, looked for in this
 * order, cheapest and most cache-warm first:
 *
 *  1. the wake target: the waker's CPU for a sync wakeup when it shares the
 *     LLC with prev, else prev;
 *  2. prev, when it shares the LLC with the target (on SMT machines only if
 *     its whole core is idle, so that it does not land next to a busy
 *     sibling while a whole core is free);
 *  3. the task's recent_used_cpu, when it shares the LLC with the target.
 *     As in CFS after the seed patch, every wakeup that gets this far sets
 *     recent_used_cpu to prev just before checking the old value, so it
 *     holds where the task ran one such wakeup earlier rather than the CPU
 *     it was last sent to: that is what lifted the seed's pipe hit rate
 *     from 57% to 85%;
 *  4. an idle core in the target's LLC, then any idle CPU there; then the
 *     same in the target's NUMA node, on machines where a node holds more
 *     than one LLC (elsewhere the node is an LLC or the whole machine, and
 *     that scan would repeat another); then any idle CPU the task may use.
 *
 * Tasks with a restricted cpumask (systemd AllowedCPUs, a container's
 * cpuset, a housekeeping mask) take the same steps within their mask: step
 * 4 scans the LLC's (and node's) span intersected with it, built in a
 * per-CPU scratch cpumask, so that they keep their cache and memory as
 * unrestricted tasks do rather than take any idle CPU of their mask
 * anywhere on the machine.
 *
 * A hit claims the CPU (scx_bpf_test_and_clear_cpu_idle()) and inserts the
 * task straight into its local DSQ: nothing there to be fair against. Steps
 * 2 and 3 can be switched off for A/B measurement (--no-prev-cpu,
 * --no-recent-cpu). Every step is counted (LATCFS_STAT_SIS_*).
 *
 * kick_idle_for(), for a task queued rather than placed, looks for an idle
 * CPU to wake in the same order from the task's CPU: that CPU, its LLC, its
 * node, anywhere.
 *
 * Limits: LATCFS_MAX_CPUS CPUs, LATCFS_MAX_LLCS LLCs and LATCFS_MAX_NODES
 * nodes (the loader refuses bigger machines). A restricted task pays a
 * cpumask AND of nr_cpu_ids bits for each span it scans in step 4 (one, or
 * two with the node step); unrestricted tasks use the spans as they are,
 * but in kick_idle_for(), which also sees migration-disabled tasks, every
 * task whose own CPU is busy pays the ANDs.
 * The node scan includes the LLC already scanned: an AND-NOT would cost as
 * much as the few idle bits it saves. "Unrestricted" is nr_cpus_allowed ==
 * nr_cpu_ids: where the possible CPUs have holes every task takes the
 * (correct, slower) restricted path.
 */
#ifndef __LATCFS_IDLE_BPF_H
#define __LATCFS_IDLE_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "topo.bpf.h"

/* some node holds more than one LLC: step 4 scans the node (the loader) */
const volatile bool node_step;
/* the machine has SMT siblings */
const volatile bool smt_enabled;
/* steps 2 and 3 above (cleared by --no-prev-cpu, --no-recent-cpu) */
const volatile bool use_prev_cpu = true;
const volatile bool use_recent_cpu = true;

/*
 * A cpumask held by a map: the CPUs of each LLC and of each node, built in
 * idle_init(), and each CPU's scratch mask for the intersections of step 4
 * (used only by the BPF program running on that CPU, in ops.select_cpu()
 * or ops.enqueue(), both with IRQs off: one user at a time).
 */
struct mask_ctx {
	struct bpf_cpumask __kptr *mask;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_LLCS);
	__type(key, u32);
	__type(value, struct mask_ctx);
} llc_ctxs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_NODES);
	__type(key, u32);
	__type(value, struct mask_ctx);
} node_ctxs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct mask_ctx);
} scratch_ctxs SEC(".maps");

/* The mask of entry @idx of @map (llc_ctxs, node_ctxs, scratch_ctxs). */
static __always_inline struct bpf_cpumask *map_mask(void *map, u32 idx)
{
	struct mask_ctx *mctx = bpf_map_lookup_elem(map, &idx);

	return mctx ? mctx->mask : NULL;
}

/*
 * The CPUs of @span that @p may use: @span itself for a task allowed
 * everywhere, else their intersection in this CPU's scratch mask. NULL if
 * a mask is missing. @strict intersects in any case: ops.enqueue() also
 * sees migration-disabled tasks, whose cpus_ptr is their CPU alone while
 * nr_cpus_allowed still counts their whole mask.
 */
static __always_inline const struct cpumask *span_for(struct task_struct *p,
						     struct bpf_cpumask *span, bool strict)
{
	struct bpf_cpumask *tmp;

	if (!span)
		return NULL;
	if (!strict && p->nr_cpus_allowed >= scx_bpf_nr_cpu_ids())
		return cast_mask(span);
	tmp = map_mask(&scratch_ctxs, bpf_get_smp_processor_id());
	if (!tmp)
		return NULL;
	bpf_cpumask_and(tmp, cast_mask(span), p->cpus_ptr);
	return cast_mask(tmp);
}

/* @cpu's whole core is idle (always true without SMT). */
static bool core_idle(s32 cpu)
{
	const struct cpumask *smt;
	bool idle;

	if (!smt_enabled)
		return true;
	smt = scx_bpf_get_idle_smtmask();
	idle = bpf_cpumask_test_cpu(cpu, smt);
	scx_bpf_put_idle_cpumask(smt);
	return idle;
}

/* Claim @cpu if @p may run there and it is idle. */
static __always_inline bool claim(struct task_struct *p, s32 cpu)
{
	return valid_cpu(cpu) && bpf_cpumask_test_cpu(cpu, p->cpus_ptr) &&
	       scx_bpf_test_and_clear_cpu_idle(cpu);
}

/*
 * Claim an idle CPU of @mask. On SMT machines the kernel looks for a
 * whole idle core first (ext_idle.c's scx_pick_idle_cpu()), so one call
 * does both passes.
 */
static __always_inline s32 pick_idle_in(const struct cpumask *mask)
{
	return scx_bpf_pick_idle_cpu(mask, 0);
}

/*
 * Step 4 above from @target: claim an idle CPU @p may use in @target's LLC,
 * then its node, then anywhere; -1 if there is none. From
 * ops.select_cpu() (@wakeup), which counts the step that found it; else
 * from ops.enqueue(), which intersects the spans with @p's cpumask whatever
 * nr_cpus_allowed says (see span_for()).
 */
static s32 pick_idle_near(struct task_struct *p, s32 target, bool wakeup)
{
	const struct cpumask *mask;
	s32 cpu;

	if (!valid_cpu(target))
		goto anywhere;
	mask = span_for(p, map_mask(&llc_ctxs, llc_of(target)), !wakeup);
	if (mask) {
		cpu = pick_idle_in(mask);
		if (cpu >= 0) {
			if (wakeup)
				stat_inc(LATCFS_STAT_SIS_LLC);
			return cpu;
		}
		/* one LLC: that scan covered every CPU @p may use */
		if (nr_llcs <= 1)
			return -1;
	}
	if (node_step) {
		mask = span_for(p, map_mask(&node_ctxs, node_of(target)), !wakeup);
		if (mask) {
			cpu = pick_idle_in(mask);
			if (cpu >= 0) {
				if (wakeup)
					stat_inc(LATCFS_STAT_SIS_NODE);
				return cpu;
			}
		}
	}
anywhere:
	cpu = pick_idle_in(p->cpus_ptr);
	if (cpu >= 0 && wakeup)
		stat_inc(LATCFS_STAT_SIS_ANY);
	return cpu;
}

/*
 * Find and claim an idle CPU for waking @p; -1 if there is none. Counts
 * which step succeeded.
 */
static s32 pick_idle_cpu(struct task_struct *p, s32 prev, u64 wake_flags)
{
	struct task_ctx *tctx;
	s32 target = prev, recent = -1, waker, cpu;

	stat_inc(LATCFS_STAT_SIS_SEARCH);

	if (wake_flags & SCX_WAKE_SYNC) {
		waker = bpf_get_smp_processor_id();
		if (share_llc(waker, prev))
			target = waker;
	}
	if (claim(p, target)) {
		stat_inc(LATCFS_STAT_SIS_TARGET);
		return target;
	}

	if (use_prev_cpu && prev != target && share_llc(prev, target) &&
	    core_idle(prev) && claim(p, prev)) {
		stat_inc(LATCFS_STAT_SIS_PREV);
		return prev;
	}

	/* Only wakeups that get this far pay for the task storage lookup. */
	tctx = lookup_task_ctx(p);
	if (tctx) {
		recent = tctx->recent_used_cpu;
		tctx->recent_used_cpu = prev;
	}
	if (use_recent_cpu && recent != prev && recent != target &&
	    share_llc(recent, target) && bpf_cpumask_test_cpu(recent, p->cpus_ptr)) {
		if (scx_bpf_test_and_clear_cpu_idle(recent)) {
			stat_inc(LATCFS_STAT_SIS_RECENT);
			return recent;
		}
		stat_inc(LATCFS_STAT_SIS_RECENT_MISS);
	}

	cpu = pick_idle_near(p, target, true);
	if (cpu < 0)
		stat_inc(LATCFS_STAT_SIS_FAIL);
	return cpu;
}

/*
 * @p was just queued rather than placed on an idle CPU: a slice expiry, a
 * preemption, a requeue, or a wakeup whose idle CPU went busy, or whose
 * CPU went idle just after the search. If a CPU @p may use is idle now,
 * wake it to take @p (its own CPU first, for its cache, then as in step 4):
 * no CPU idles while work it may run waits.
 */
static void kick_idle_for(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);

	if (!claim(p, cpu)) {
		/*
		 * A pinned task on its CPU has nowhere else to go (one whose
		 * affinity just moved it elsewhere looks for its new CPU below).
		 */
		if (p->nr_cpus_allowed == 1 && bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			return;
		cpu = pick_idle_near(p, cpu, false);
		if (cpu < 0)
			return;
	}
	scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	stat_inc(LATCFS_STAT_IDLE_KICK);
}

/*
 * Give entry @idx of @map a new cpumask: the CPUs whose id in @ids is @idx,
 * or none when @ids is NULL (a scratch mask).
 */
static s32 mask_init(void *map, u32 idx, const volatile u32 *ids)
{
	struct bpf_cpumask *mask;
	struct mask_ctx *mctx;
	u32 cpu, nr_cpus = scx_bpf_nr_cpu_ids();

	mctx = bpf_map_lookup_elem(map, &idx);
	if (!mctx)
		return -EINVAL;
	mask = bpf_cpumask_create();
	if (!mask)
		return -ENOMEM;
	if (ids) {
		bpf_for(cpu, 0, nr_cpus) {
			if (cpu < LATCFS_MAX_CPUS && ids[cpu] == idx)
				bpf_cpumask_set_cpu(cpu, mask);
		}
	}
	mask = bpf_kptr_xchg(&mctx->mask, mask);
	if (mask)
		bpf_cpumask_release(mask);
	return 0;
}

/* Build each LLC's and node's cpumask and each CPU's scratch mask. */
static s32 idle_init(void)
{
	u32 i, nr_cpus = scx_bpf_nr_cpu_ids();
	s32 ret;

	bpf_for(i, 0, nr_llcs) {
		if ((ret = mask_init(&llc_ctxs, i, cpu_llc_id)))
			return ret;
	}
	bpf_for(i, 0, nr_nodes) {
		if ((ret = mask_init(&node_ctxs, i, cpu_node_id)))
			return ret;
	}
	bpf_for(i, 0, nr_cpus) {
		if (i >= LATCFS_MAX_CPUS)
			break;
		if ((ret = mask_init(&scratch_ctxs, i, NULL)))
			return ret;
	}
	return 0;
}

#endif /* __LATCFS_IDLE_BPF_H */
