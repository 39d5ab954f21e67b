/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Slices for scx_latcfs: how long a task runs, and ending it on time.
 *
 * A task runs for slice_ns, or for its own sched_runtime if it set one
 * with sched_setattr() (a custom slice, as EEVDF honours it since 6.12;
 * sched_ext leaves p->scx.slice to us, so without this it would be
 * ignored). A task at a positive latency nice gets its offset on top.
 *
 * sched_ext notices that a slice ran out only at a tick (task_tick_scx()):
 * at HZ=250 a 3 ms slice ends 4 to 8 ms after it started, and a 1 ms one
 * after 4. That is time every waiting task waits. So while tasks wait,
 * each CPU arms a timer for its running task's slice end (a per-CPU
 * bpf_timer, pinned to the CPU: the hrtick of scx_eevdf), and when it
 * fires with tasks still waiting, it preempts the task (SCX_KICK_PREEMPT),
 * which sends the CPU through ops.dispatch(): the task keeps the CPU if it
 * still leads, or the next one runs.
 *
 * The timer is armed when a task starts or gets a fresh slice, and from
 * ops.tick() when tasks started to wait after that. An armed timer that
 * fires no later than the new slice end is kept, not re-armed: a CPU
 * switching tasks thousands of times a second (pipes, messaging) arms it
 * at most once per slice, so arms stay within about a factor of 2 of
 * fires (slice_timer_arm, slice_timer_fire in the stats). A fire before the
 * current slice's end (it was armed for an earlier task) re-arms it for
 * the end. While no task waits, nothing is armed: the tick is enough.
 *
 * Limits: the callback runs in softirq, which under load the kernel may
 * defer to ksoftirqd; then the slice ends at the tick, as without it. The
 * wait bound (bound.bpf.h) does not depend on it.
 */
#ifndef __LATCFS_SLICE_BPF_H
#define __LATCFS_SLICE_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "vruntime.bpf.h"

#ifndef CLOCK_MONOTONIC
#define CLOCK_MONOTONIC		1
#endif

/* Fires this close to the slice end count as at it, in ns. */
#define SLICE_TIMER_SLACK_NS	(50ULL * 1000)

struct slice_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct slice_timer);
} slice_timers SEC(".maps");

/* @p's slice: its sched_runtime if it set one, else slice_ns. */
static __always_inline u64 task_slice(struct task_struct *p)
{
	if (bpf_core_field_exists(p->se.custom_slice) && BPF_CORE_READ(p, se.custom_slice)) {
		u64 s = BPF_CORE_READ(p, se.slice);

		if (s)
			return s;
	}
	return slice_ns;
}

/* @p's full slice: task_slice() plus a positive latency offset (latency.bpf.h). */
static __always_inline u64 task_full_slice(struct task_struct *p, struct task_ctx *tctx)
{
	return task_slice(p) + (tctx && tctx->lat_offset > 0 ? tctx->lat_offset : 0);
}

/*
 * Do tasks wait in the DSQs of @cpu's domain? Those of other domains take
 * a tick to be noticed here (domain.bpf.h's steal check, in dispatch).
 */
static __always_inline bool slice_tasks_wait(s32 cpu)
{
	return dom_nr_queued(llc_of(cpu)) != 0;
}

/*
 * Make sure a timer fires on this CPU at its running task's slice end,
 * cctx->slice_end, if tasks wait: keep an armed one that fires no later.
 */
static void slice_timer_arm(struct cpu_ctx *cctx, u64 now)
{
	struct slice_timer *st;
	u32 cpu = bpf_get_smp_processor_id();
	u64 end = cctx->slice_end;

	if (!end || !time_after(end, now) || !slice_tasks_wait(cpu))
		return;
	if (cctx->timer_at && !time_after(cctx->timer_at, end) && time_after(cctx->timer_at, now))
		return;
	st = bpf_map_lookup_elem(&slice_timers, &cpu);
	if (!st || bpf_timer_start(&st->timer, end - now, BPF_F_TIMER_CPU_PIN))
		return;
	cctx->timer_at = end;
	stat_inc(LATCFS_STAT_SLICE_TIMER_ARM);
}

/* The task that starts (or goes on) here has a slice of @slice from @now. */
static __always_inline void slice_started(u64 now, u64 slice)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	if (!cctx)
		return;
	cctx->slice_end = now + slice;
	slice_timer_arm(cctx, now);
}

/* Nothing of ours runs here any more. */
static __always_inline void slice_stopped(void)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	if (cctx)
		cctx->slice_end = 0;
}

/* From ops.tick(): tasks may have started to wait since the slice began. */
static __always_inline void slice_tick(void)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	if (cctx && !cctx->timer_at)
		slice_timer_arm(cctx, scx_bpf_now());
}

static int slice_timer_fn(void *map, int *key, struct slice_timer *st)
{
	struct cpu_ctx *cctx = this_cpu_ctx();
	u64 now = scx_bpf_now();

	stat_inc(LATCFS_STAT_SLICE_TIMER_FIRE);
	if (!cctx)
		return 0;
	cctx->timer_at = 0;
	if (!cctx->slice_end)
		return 0;
	if (time_after(cctx->slice_end, now + SLICE_TIMER_SLACK_NS)) {
		/* armed for an earlier task: come back at this one's end */
		slice_timer_arm(cctx, now);
		return 0;
	}
	if (slice_tasks_wait(bpf_get_smp_processor_id())) {
		scx_bpf_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
		stat_inc(LATCFS_STAT_SLICE_CUT);
	}
	return 0;
}

/* From ops.init(): one timer per CPU. */
static s32 slice_init(void)
{
	struct slice_timer *st;
	u32 cpu, nr = scx_bpf_nr_cpu_ids();

	bpf_for(cpu, 0, nr) {
		if (cpu >= LATCFS_MAX_CPUS)
			break;
		st = bpf_map_lookup_elem(&slice_timers, &cpu);
		if (!st)
			return -EINVAL;
		if (bpf_timer_init(&st->timer, &slice_timers, CLOCK_MONOTONIC) ||
		    bpf_timer_set_callback(&st->timer, slice_timer_fn))
			return -EINVAL;
	}
	return 0;
}

#endif /* __LATCFS_SLICE_BPF_H */
