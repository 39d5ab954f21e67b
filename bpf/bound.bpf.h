/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The wall-clock bound on every wait, for scx_latcfs.
 *
 * Weighted fairness alone does not bound how long a task waits. A nice 19
 * task (weight 1) pinned beside four nice -20 hogs (weight 8668 each) has a
 * CFS share of 1/34673: one 3 ms slice every 100 s, three times the
 * sched_ext watchdog's 30 s. cgroup weights, the lead cap, tasks pinned to
 * unevenly loaded CPUs and the latency queue's order can all add to a wait.
 * So on top of the order, every queued task carries the time it was queued
 * (task_ctx.queued_at), and a task that has waited longer than max_wait_ns
 * is served next on a CPU it may use, whatever its vtime.
 *
 * Each CPU looks for such tasks itself, in ops.dispatch(), which it reaches
 * whenever its local DSQ runs dry: after each slice granted from the queue
 * it runs at most the wakees that preempted it, each for a slice of its
 * own, and each victim's one resumption (preempt.bpf.h). Every
 * max_wait_ns / 4
 * it walks its own LLC's fair and latency DSQs (domain.bpf.h) from their
 * heads, and moves the first
 * overdue task (in queue order) that may run here to its local DSQ, ahead
 * of everything else and before it even considers letting prev keep the
 * CPU. The two DSQs take turns at being walked first, so that overdue
 * tasks in one cannot starve those in the other. While a walk finds one, the next dispatch walks again, so a backlog
 * drains at a slice per CPU, one overdue task at a time. An idle CPU needs
 * no walk: ops.enqueue() wakes one for every task it queues (idle.bpf.h).
 *
 * Why not a timer: its callback runs in softirq, which under load the
 * kernel defers to ksoftirqd, a task we schedule like any other; on a CPU
 * full of heavy hogs the timer then waits as long as the tasks it should
 * rescue (seen: rescues at twice the bound). ops.dispatch() depends on
 * nothing we schedule, and moving tasks between DSQs is allowed there on
 * every kernel we support.
 *
 * So an overdue task waits at most about
 *
 *	max_wait_ns + max_wait_ns / 4 + slice_ns * (overdue tasks ahead of it)
 *
 * which at the defaults (500 ms, 3 ms) stays under a second, far inside the
 * watchdog's 30 s, as long as the runnable tasks of a CPU times the slice
 * fit in max_wait_ns.
 *
 * The price: a task that weights alone would starve for longer gets about
 * one slice per max_wait_ns + max_wait_ns / 4, i.e. about 0.5% of a CPU at
 * the defaults, instead of its CFS share (1/34673 of it above). Tasks whose
 * share is above that never wait that long and never notice the bound. The
 * rescue counter (stats) says how often it took over.
 *
 * Each walk covers the CPU's own LLC's DSQs (domain.bpf.h) and then the
 * other LLCs', so a task is rescued by any CPU it may use, as with one
 * queue, even when every CPU of its own LLC is held by a higher class.
 *
 * Limits: a walk visits at most LATCFS_SCAN_MAX tasks of each DSQ, so a task
 * queued deeper than that (in vtime order) waits until it rises within
 * reach; with that many tasks queued the bound cannot hold anyway. A CPU
 * that a higher sched class keeps from ever dispatching cannot rescue; its
 * tasks are handed back to the queue by ops.cpu_release(), for other CPUs.
 * Tasks in a CPU's local DSQ are the kernel's to run and not covered here;
 * they wait behind wakees and resumed tasks only: a wakee preempts only
 * when its key leads every queue, so a chain of them is as long as the
 * wakeups that keep winning that test.
 */
#ifndef __LATCFS_BOUND_BPF_H
#define __LATCFS_BOUND_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "domain.bpf.h"

/* Longest a queued task may wait, in ns (--max-wait-ms, default 500 ms). */
const volatile u64 max_wait_ns = 500ULL * 1000 * 1000;

/*
 * @p goes into a DSQ of ours: its wait starts now, unless it is already
 * waiting. A requeue (renice, affinity, a cgroup move, cpu_release) does
 * not restart it, just as the kernel watchdog's runnable_at is only reset
 * when the task runs.
 */
static __always_inline void bound_queued(struct task_ctx *tctx)
{
	if (!tctx->queued_at)
		tctx->queued_at = scx_bpf_now();
}

/* @p left the DSQ to run, or left sched_ext. */
static __always_inline void bound_started(struct task_ctx *tctx)
{
	tctx->queued_at = 0;
}

/* How long @p has waited at @now, 0 if it is not queued by us. */
static __always_inline u64 bound_waited(struct task_struct *p, u64 now)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u64 at;

	if (!tctx || !(at = tctx->queued_at) || now <= at)
		return 0;
	return now - at;
}

/*
 * Move the first task of @dsq_id, in queue order, that has waited longer
 * than max_wait_ns and may run on @cpu to its local DSQ.
 */
static bool bound_rescue_from(struct cpu_ctx *cctx, u64 dsq_id, s32 cpu, u64 now)
{
	struct task_struct *p;

	if (!scx_bpf_dsq_nr_queued(dsq_id))
		return false;
	cctx->scan_seen = 0;
	bpf_for_each(scx_dsq, p, dsq_id, 0) {
		if (++cctx->scan_seen > LATCFS_SCAN_MAX)
			break;
		if (bound_waited(p, now) <= max_wait_ns ||
		    !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0))
			return true;
	}
	return false;
}

/*
 * After the CPU's own domain, the others' (domain.bpf.h): a task may wait
 * in a domain whose CPUs a higher sched class holds, or whose CPUs in its
 * mask are all busy with tasks ahead of it; any CPU it may use rescues it.
 */
static bool bound_rescue_others(struct cpu_ctx *cctx, s32 cpu, u32 dom, u64 now)
{
	u32 d, n = nr_llcs;

	if (n <= 1)
		return false;
	bpf_for(d, 0, n) {
		if (d == dom)
			continue;
		if (bound_rescue_from(cctx, fair_dsq(d), cpu, now) ||
		    bound_rescue_from(cctx, lat_dsq(d), cpu, now))
			return true;
	}
	return false;
}

/*
 * From ops.dispatch(): every max_wait_ns / 4, and at every dispatch while
 * the last walk found one, serve one overdue task that may run here. The
 * walks' counter lives in cpu_ctx, not on the stack: the verifier then does
 * not track it as a constant, and checks a walk once, not once per step.
 * Returns true if it moved a task.
 */
static bool bound_dispatch(struct cpu_ctx *cctx, s32 cpu, u32 dom)
{
	u64 now = scx_bpf_now(), first, second;

	if (!cctx->rescue_pending && now - cctx->rescue_walk_at < max_wait_ns / 4)
		return false;
	cctx->rescue_walk_at = now;
	first = cctx->rescue_lat_first ? lat_dsq(dom) : fair_dsq(dom);
	second = cctx->rescue_lat_first ? fair_dsq(dom) : lat_dsq(dom);
	cctx->rescue_lat_first = !cctx->rescue_lat_first;
	cctx->rescue_pending = bound_rescue_from(cctx, first, cpu, now) ||
			       bound_rescue_from(cctx, second, cpu, now) ||
			       bound_rescue_others(cctx, cpu, dom, now);
	if (cctx->rescue_pending)
		stat_inc(LATCFS_STAT_RESCUE);
	return cctx->rescue_pending;
}

#endif /* __LATCFS_BOUND_BPF_H */
