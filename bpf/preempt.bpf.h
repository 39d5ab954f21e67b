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
 *    key of either DSQ of the domain it would wait in (domain.bpf.h), so
 *    the preemption does not put it ahead of tasks that are owed the CPU
 *    before it (preempting for a wakee that would queue behind the head is
 *    what halved `perf bench sched messaging` in scx_eevdf); and
 *  - its key beats the running task's key, brought up to date, by more
 *    than wakeup_gran_ns; and
 *  - the running task has had its protection: it has run at least
 *    wakeup_gran_ns (weighted) since its slice began, less what the
 *    wakee's negative latency offset exceeds the running task's own by
 *    (arith.h's preempt_protect()). A latency nice 0 wakee waits out the
 *    granularity; one at -20 with the default offsets preempts a latency
 *    nice 0 task at once, but not another -20 task: a messaging workload
 *    in a -20 cgroup would otherwise preempt itself at every message
 *    (hackbench ran 2 to 5 times slower than at 0). When only the
 *    protection stands in the way, a timer preempts the task when it ends
 *    (deferred preemptions, below), so the wakee waits at most
 *    wakeup_gran_ns, not a slice.
 *
 * Keys are vruntime.bpf.h's (vtime + time awake since the last wakeup,
 * at most a slice), with each side's latency offset added in full: a
 * latency-sensitive wakee preempts more readily, and a task at a positive
 * latency nice yields more readily and preempts less.
 *
 * Why the protection, EEVDF's RUN_TO_PARITY in our terms: sleeper credit
 * alone (a wakee may be placed up to slice_lag_ns behind the reference)
 * beats the running task's key on nearly every wakeup. Tasks that keep
 * waking each other (pipes, hackbench) then preempted each other half a
 * million times a run, and hackbench ran 3 to 12 times slower than EEVDF.
 * With it they preempt a few hundred times, and a hog still loses its CPU
 * to a sleeper within wakeup_gran_ns of its slice start.
 *
 * Victims: two candidates, as scx_lavd picks between two. First the CPU
 * ops.enqueue() runs on, if the wakee may run there: preempting it needs
 * no IPI, and when a task hands work to another (a futex or pipe handoff
 * without WF_SYNC, schbench's message thread and its workers) that is the
 * waker's CPU, where the data the wakee needs was just written. (A wakeup
 * the kernel hands to the wakee's CPU through its wake list, TTWU_QUEUE:
 * across LLCs, or when that CPU is idle, runs ops.enqueue() there instead,
 * so the first candidate is then the wakee's CPU.) Then the
 * wakee's own CPU (task_cpu, where select_cpu left it), or if that is the
 * same, one other CPU it may use, chosen at random. A victim is preempted
 * only if the test above holds, so no IPI is sent for a preemption that
 * cannot win the pick: the wakee goes to the head of the victim's local
 * DSQ (SCX_ENQ_PREEMPT).
 *
 * Resuming the victim. The preempted task was granted its slice and ran by
 * right; the wakee only borrows its CPU. So when it stops, it goes to the
 * tail of its CPU's local DSQ, behind the wakee, with the rest of its
 * slice, instead of back into the queue by its key: it goes on as soon as
 * the wakee sleeps or uses up its own slice (CFS' "last buddy" was the
 * same idea). Without this, a waker preempted by the task it woke waited in
 * the queue behind every task with a smaller key, although it was about
 * to sleep: in schbench, a worker that woke its message thread sat out
 * whole slices of other tasks before it could block and be woken for its
 * next request (median wakeup latency 3 ms, against 0.1 ms with it). The
 * share is unchanged (both are charged for what they run). Only the first
 * resumption of a slice gets the floor below; preempted again while
 * resumed, a task resumes with just what is left of that resumption, and
 * once that is spent it goes back into the queue by its key, and its CPU
 * through ops.dispatch() and the wait bound (bound.bpf.h). So resumptions
 * add, for queued tasks, at most one resume slice (the rest of the slice,
 * at least the floor below) per slice granted. It does not
 * resume when another CPU it may use is idle (a local DSQ is out of reach
 * of other CPUs), and deferred preemptions (below) do not resume: their
 * wakee may run anywhere.
 *
 * Limits: the running task's key is computed from what its CPU noted at
 * its last charge (task.bpf.h's cpu_ctx), read without a lock; a race with
 * its CPU switching tasks can, rarely, preempt a task that just started.
 * The resume note is written to the victim's cpu_ctx without a lock too,
 * and names the run it is for, so a note that loses that race names a run
 * that already ended and is dropped. Only the two candidates are looked at.
 */
#ifndef __LATCFS_PREEMPT_BPF_H
#define __LATCFS_PREEMPT_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "vruntime.bpf.h"
#include "latency.bpf.h"
#include "slice.bpf.h"

/*
 * How far a waking task's key must beat another's before it preempts it,
 * or before a latency DSQ task is served ahead of the fair head
 * (--wakeup-gran-us, default 1000 µs), in weighted ns.
 */
const volatile u64 wakeup_gran_ns = 1ULL * 1000 * 1000;

/*
 * A preempted task resumes with the rest of its slice, but at least
 * wakeup_gran_ns, and never less than this, in ns (see above): a waker
 * preempted near its slice end must still get to sleep.
 */
#define PREEMPT_RESUME_MIN_NS	(200ULL * 1000)

/*
 * The key of the task running on the CPU of @cctx, brought up to @now, and
 * in @ran the weighted time it has run since its slice began.
 */
static __always_inline u64 preempt_curr_key(struct cpu_ctx *cctx, u64 now, u64 *ran)
{
	u64 w = 0;

	if (cctx->curr_started_at && now > cctx->curr_started_at)
		w = vt_mul_div(now - cctx->curr_started_at, cctx->curr_scale, 1ULL << 20);
	*ran = w;
	return cctx->curr_vtime + w + awake_after(cctx->curr_awake, w, slice_ns) +
	       cctx->curr_lat_offset;
}

/* What a wakeup may do to a running task (preempt_test()). */
enum preempt_verdict {
	PREEMPT_NO,
	PREEMPT_NOW,
	/* it wins once the running task's protection ends */
	PREEMPT_LATER,
};

/*
 * Would waking @p, with preemption key @key and latency offset @lat_off,
 * win @cpu from its current task? That task runs for its protection
 * (arith.h's preempt_protect()), in weighted ns since its slice began,
 * before a wakeup may preempt it. For PREEMPT_LATER, @at is
 * when the protection ends. @cpu counts only in domain @dom, where @p would
 * wait: preempting a CPU of another LLC would let it jump that LLC's queue.
 */
static __always_inline enum preempt_verdict preempt_test(struct task_struct *p, s32 cpu, u32 dom,
							 u64 key, s64 lat_off, u64 now, u64 *at)
{
	struct cpu_ctx *cctx;
	u64 curr_key, ran, protect;

	if (cpu < 0 || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || !(cctx = cpu_ctx_of(cpu)) ||
	    !cctx->curr_valid || (nr_llcs > 1 && llc_of(cpu) != dom))
		return PREEMPT_NO;
	curr_key = preempt_curr_key(cctx, now, &ran);
	if (!time_before(key + wakeup_gran_ns, curr_key))
		return PREEMPT_NO;
	protect = preempt_protect(wakeup_gran_ns, lat_off, cctx->curr_lat_own);
	if (ran >= protect)
		return PREEMPT_NOW;
	if (!cctx->curr_scale)
		return PREEMPT_NO;
	/* weighted ns back to real ns at the running task's rate */
	*at = now + vt_mul_div(protect - ran, 1ULL << 20, cctx->curr_scale);
	return PREEMPT_LATER;
}

/*
 * Deferred preemptions. A wakeup that wins but finds the running task
 * protected would otherwise wait for that task's slice end (up to
 * slice_ns, and to the tick without a slice timer). Instead a timer,
 * one per victim CPU, preempts the task when its protection ends, if it
 * still runs the same slice and tasks still wait. An armed timer that
 * fires no later is kept, so a burst of wakeups arms it once per slice.
 * The timer is armed from the waker's CPU and is not pinned: its
 * callback kicks the victim by number, from wherever it runs.
 */
struct preempt_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_CPUS);
	__type(key, u32);
	__type(value, struct preempt_timer);
} preempt_timers SEC(".maps");

static void preempt_defer(s32 cpu, u64 at, u64 now)
{
	struct cpu_ctx *cctx = cpu_ctx_of(cpu);
	struct preempt_timer *pt;
	u32 key = cpu;
	u64 slice;

	if (!cctx || !time_after(at, now))
		return;
	slice = cctx->curr_started_at;
	if (cctx->defer_at && cctx->defer_slice == slice && !time_after(cctx->defer_at, at) &&
	    time_after(cctx->defer_at, now))
		return;
	pt = bpf_map_lookup_elem(&preempt_timers, &key);
	if (!pt || bpf_timer_start(&pt->timer, at - now, 0))
		return;
	cctx->defer_slice = slice;
	cctx->defer_at = at;
	stat_inc(LATCFS_STAT_PREEMPT_DEFER);
}

static int preempt_timer_fn(void *map, int *key, struct preempt_timer *pt)
{
	struct cpu_ctx *cctx = cpu_ctx_of(*key);

	if (!cctx)
		return 0;
	cctx->defer_at = 0;
	if (cctx->curr_valid && cctx->curr_started_at == cctx->defer_slice &&
	    slice_tasks_wait(*key)) {
		scx_bpf_kick_cpu(*key, SCX_KICK_PREEMPT);
		stat_inc(LATCFS_STAT_PREEMPT_LATE);
	}
	return 0;
}

/* From ops.init(): one deferred-preemption timer per CPU. */
static s32 preempt_init(void)
{
	struct preempt_timer *pt;
	u32 cpu, nr = scx_bpf_nr_cpu_ids();

	bpf_for(cpu, 0, nr) {
		if (cpu >= LATCFS_MAX_CPUS)
			break;
		pt = bpf_map_lookup_elem(&preempt_timers, &cpu);
		if (!pt)
			return -EINVAL;
		if (bpf_timer_init(&pt->timer, &preempt_timers, CLOCK_MONOTONIC) ||
		    bpf_timer_set_callback(&pt->timer, preempt_timer_fn))
			return -EINVAL;
	}
	return 0;
}

/*
 * Waking @p found no idle CPU: preempt a running task for it if it wins
 * (see above), now or when that task's protection ends. @qkey is the key
 * it would be queued by in domain @dom's DSQs, @slice its slice. Returns true if @p was placed
 * on a CPU; otherwise it is queued as usual.
 */
static bool wakeup_preempt(struct task_struct *p, struct task_ctx *tctx, u64 qkey, u64 slice,
			   u64 enq_flags, u32 dom)
{
	struct task_struct *head;
	s32 this = bpf_get_smp_processor_id(), cpu = this, other = scx_bpf_task_cpu(p);
	struct cpu_ctx *vctx;
	enum preempt_verdict v;
	u64 now, key, at = 0, at2 = 0;

	head = dsq_head(fair_dsq(dom));
	if (head && time_before(head->scx.dsq_vtime, qkey))
		return false;
	if (nr_lat_tasks) {
		head = dsq_head(lat_dsq(dom));
		if (head && time_before(head->scx.dsq_vtime, qkey))
			return false;
	}
	now = scx_bpf_now();
	/* the queue key has the negative latency offset; a positive one counts here */
	key = qkey + (tctx->lat_offset > 0 ? tctx->lat_offset : 0);
	/* victims: this CPU, then the wakee's own, or another (see above) */
	v = preempt_test(p, cpu, dom, key, tctx->lat_offset, now, &at);
	if (other == cpu && p->nr_cpus_allowed > 1)
		other = bpf_cpumask_any_distribute(p->cpus_ptr);
	if (v != PREEMPT_NOW && other != cpu) {
		switch (preempt_test(p, other, dom, key, tctx->lat_offset, now, &at2)) {
		case PREEMPT_NOW:
			cpu = other;
			v = PREEMPT_NOW;
			break;
		case PREEMPT_LATER:
			if (v == PREEMPT_NO || time_before(at2, at)) {
				cpu = other;
				at = at2;
				v = PREEMPT_LATER;
			}
			break;
		default:
			break;
		}
	}
	if (v == PREEMPT_LATER)
		preempt_defer(cpu, at, now);
	if (v != PREEMPT_NOW)
		return false;
	/* note what the victim has left, for its resumption (above) */
	vctx = cpu_ctx_of(cpu);
	if (vctx) {
		vctx->resume_left = preempt_resume_slice(vctx->slice_end, now, wakeup_gran_ns,
							 PREEMPT_RESUME_MIN_NS);
		WRITE_ONCE(vctx->resume_run, vctx->curr_started_at);
	}
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, slice, enq_flags | SCX_ENQ_PREEMPT);
	stat_inc(LATCFS_STAT_PREEMPT);
	if (cpu != this)
		stat_inc(LATCFS_STAT_PREEMPT_REMOTE);
	if (tctx->lat_offset < 0)
		stat_inc(LATCFS_STAT_LAT_PREEMPT);
	return true;
}

/*
 * @p stops running on this CPU, still runnable or not. If a wakeup
 * preempted this very run, keep the rest of its slice for
 * preempt_resume(); any other note is stale. Before vtime_stop(), while
 * the run is still this CPU's current one.
 *
 * When the run was itself a resumption, only what is left of it, with no
 * floor (arith.h's preempt_resume_again()), and nothing once that is
 * spent: then @p goes back into the queue by its key and this CPU through
 * ops.dispatch(), where the wait bound and the queue order apply. A fresh
 * floor each time would let a stream of wakeups keep a hog here and
 * ops.dispatch() from ever running; refusing the second resumption
 * outright, as we once did, sent a worker that woke two tasks in a row
 * into the queue behind every hog, which doubled schbench's wakeup p99.
 * Not when @p still has slice left: then a
 * higher sched class took the CPU, not our wakee, and the kernel keeps @p
 * at the head of the local DSQ without asking us (a resume slice would
 * linger until an unrelated enqueue, such as ops.cpu_release()'s).
 */
static __always_inline void preempt_stopped(struct task_struct *p, struct task_ctx *tctx,
					    bool runnable)
{
	struct cpu_ctx *cctx = this_cpu_ctx();
	bool again = tctx->resumed;

	tctx->resumed = false;
	if (!cctx || !READ_ONCE(cctx->resume_run))
		return;
	if (runnable && !p->scx.slice && cctx->curr_valid &&
	    cctx->resume_run == cctx->curr_started_at)
		tctx->resume_slice = again ? preempt_resume_again(cctx->slice_end, scx_bpf_now(),
								  SLICE_TIMER_SLACK_NS)
					   : cctx->resume_left;
	cctx->resume_run = 0;
}

/* @p runs, or leaves sched_ext: whatever it had to resume is void. */
static __always_inline void preempt_forget(struct task_ctx *tctx)
{
	tctx->resume_slice = 0;
}

/*
 * ops.enqueue() of a task that a wakeup just preempted (preempt_stopped()):
 * back to its CPU's local DSQ, behind the wakee, with the rest of its
 * slice. Returns false for any other enqueue, and when another CPU it may
 * use is idle: tasks in a local DSQ are out of reach of other CPUs, so it
 * goes the usual way, into the queue with an idle CPU kicked for it.
 */
static __always_inline bool preempt_resume(struct task_struct *p, struct task_ctx *tctx,
					   u64 enq_flags)
{
	const struct cpumask *idle;
	u64 slice = tctx->resume_slice;
	bool elsewhere;

	if (!slice)
		return false;
	tctx->resume_slice = 0;
	if ((enq_flags & (SCX_ENQ_WAKEUP | SCX_ENQ_REENQ)) ||
	    !bpf_cpumask_test_cpu(scx_bpf_task_cpu(p), p->cpus_ptr))
		return false;
	if (p->nr_cpus_allowed > 1) {
		/*
		 * The kernel's idle tracking: we define no ops.update_idle(),
		 * so it is kept for us (SCX_OPS_KEEP_BUILTIN_IDLE otherwise).
		 */
		idle = scx_bpf_get_idle_cpumask();
		elsewhere = bpf_cpumask_intersects(idle, p->cpus_ptr);
		scx_bpf_put_idle_cpumask(idle);
		if (elsewhere)
			return false;
	}
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice, enq_flags);
	tctx->resumed = true;
	stat_inc(LATCFS_STAT_PREEMPT_RESUME);
	return true;
}

#endif /* __LATCFS_PREEMPT_BPF_H */
