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
 *  4. an idle core in the target's LLC, then any idle CPU there, then any
 *     idle CPU the task may use (tasks with restricted affinity skip the
 *     LLC scan and search their own mask).
 *
 * A hit claims the CPU (scx_bpf_test_and_clear_cpu_idle()) and inserts the
 * task straight into its local DSQ: nothing there to be fair against. Steps
 * 2 and 3 can be switched off for A/B measurement (--no-prev-cpu,
 * --no-recent-cpu). Every step is counted (LATCFS_STAT_SIS_*).
 */
#ifndef __LATCFS_IDLE_BPF_H
#define __LATCFS_IDLE_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"

/* LLC id of each CPU, from the loader's topology (scx_utils). */
const volatile u32 cpu_llc_id[LATCFS_MAX_CPUS];
/* number of LLCs in cpu_llc_id */
const volatile u32 nr_llcs = 1;
/* the machine has SMT siblings */
const volatile bool smt_enabled;
/* steps 2 and 3 above (cleared by --no-prev-cpu, --no-recent-cpu) */
const volatile bool use_prev_cpu = true;
const volatile bool use_recent_cpu = true;

/* The CPUs of each LLC, built in idle_init(). */
struct llc_ctx {
	struct bpf_cpumask __kptr *span;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_LLCS);
	__type(key, u32);
	__type(value, struct llc_ctx);
} llc_ctxs SEC(".maps");

static __always_inline bool valid_cpu(s32 cpu)
{
	return cpu >= 0 && cpu < LATCFS_MAX_CPUS;
}

/* LLC of @cpu; ARRAY_ELEM_PTR() keeps the verifier sure of the bound. */
static __always_inline u32 llc_of(s32 cpu)
{
	const volatile u32 *llc = ARRAY_ELEM_PTR(cpu_llc_id, cpu, LATCFS_MAX_CPUS);

	return llc ? *llc : 0;
}

static __always_inline bool share_llc(s32 a, s32 b)
{
	return valid_cpu(a) && valid_cpu(b) && llc_of(a) == llc_of(b);
}

static __always_inline const struct cpumask *llc_span(s32 cpu)
{
	struct llc_ctx *lctx;
	u32 llc;

	if (!valid_cpu(cpu))
		return NULL;
	llc = llc_of(cpu);
	lctx = bpf_map_lookup_elem(&llc_ctxs, &llc);
	return lctx && lctx->span ? cast_mask(lctx->span) : NULL;
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
 * Claim an idle CPU of @mask, a whole idle core first on SMT machines
 * (without SMT every idle CPU is one, and the core pass is skipped).
 */
static __always_inline s32 pick_idle_in(const struct cpumask *mask)
{
	s32 cpu = -1;

	if (smt_enabled)
		cpu = scx_bpf_pick_idle_cpu(mask, SCX_PICK_IDLE_CORE);
	if (cpu < 0)
		cpu = scx_bpf_pick_idle_cpu(mask, 0);
	return cpu;
}

/*
 * Find and claim an idle CPU for waking @p; -1 if there is none. Counts
 * which step succeeded.
 */
static s32 pick_idle_cpu(struct task_struct *p, s32 prev, u64 wake_flags)
{
	const struct cpumask *span;
	struct task_ctx *tctx;
	s32 target = prev, recent = -1, waker, cpu;
	bool everywhere;

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

	/*
	 * The LLC's span may be used as is only by tasks allowed everywhere;
	 * on a machine of one LLC, that scan is the last one they need.
	 */
	everywhere = p->nr_cpus_allowed >= scx_bpf_nr_cpu_ids();
	span = llc_span(target);
	if (span && everywhere) {
		cpu = pick_idle_in(span);
		if (cpu >= 0) {
			stat_inc(LATCFS_STAT_SIS_LLC);
			return cpu;
		}
		if (nr_llcs <= 1)
			goto fail;
	}
	cpu = pick_idle_in(p->cpus_ptr);
	if (cpu >= 0) {
		stat_inc(LATCFS_STAT_SIS_ANY);
		return cpu;
	}
fail:
	stat_inc(LATCFS_STAT_SIS_FAIL);
	return -1;
}

/*
 * @p was just queued rather than placed on an idle CPU: a slice expiry, a
 * preemption, a requeue, or a wakeup whose idle CPU went busy, or whose
 * CPU went idle just after the search. If a CPU @p may use is idle now,
 * wake it to take @p (prev first, for its cache): no CPU idles while work
 * it may run waits.
 */
static void kick_idle_for(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);

	if (!claim(p, cpu)) {
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu < 0)
			return;
	}
	scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	stat_inc(LATCFS_STAT_IDLE_KICK);
}

/* Build each LLC's cpumask from cpu_llc_id[]. */
static s32 idle_init(void)
{
	struct bpf_cpumask *mask;
	struct llc_ctx *lctx;
	u32 llc, cpu, nr_cpus = scx_bpf_nr_cpu_ids();

	bpf_for(llc, 0, nr_llcs) {
		lctx = bpf_map_lookup_elem(&llc_ctxs, &llc);
		if (!lctx)
			return -EINVAL;
		mask = bpf_cpumask_create();
		if (!mask)
			return -ENOMEM;
		bpf_for(cpu, 0, nr_cpus) {
			if (cpu < LATCFS_MAX_CPUS && llc_of(cpu) == llc)
				bpf_cpumask_set_cpu(cpu, mask);
		}
		mask = bpf_kptr_xchg(&lctx->span, mask);
		if (mask)
			bpf_cpumask_release(mask);
	}
	return 0;
}

#endif /* __LATCFS_IDLE_BPF_H */
