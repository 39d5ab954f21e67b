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
 * The reference is CFS' min_vruntime for the queues: the least vtime at
 * their front, and it only moves forward. Each LLC's queue keeps its own
 * (dom_ctx.vtime_ref, domain.bpf.h): while tasks wait, its front is the
 * head of the domain's fair DSQ and its latency DSQ's head (its own vtime,
 * without its latency offset); while none wait, it is what the domain's
 * CPUs run. It is updated whenever a task starts or is charged to keep its
 * CPU (vtime_update_ref()), by the domain's own CPUs only. The clamps below
 * work from the machine's reference, the least of the domains' (of those
 * with tasks waiting, if any; domains where nothing started for
 * VTIME_IDLE_NS do not count), recomputed by each domain's CPUs at most
 * once per VTIME_SCAN_NS (vtime_update_gref()): vtimes are one machine-wide
 * scale (domain.bpf.h), and a task moving between LLCs must keep its lag.
 * Clamped against its new LLC's own reference, a task stolen from a
 * crowded LLC into one whose tasks run ahead lost its credit at every move
 * (cpu.weight 300 against 100 crowded on two nodes split 1.3:1, not 3:1).
 * With one LLC the machine's reference is the domain's. Because it is a minimum of the queue's
 * front, a task started out of vtime order (straight onto an idle CPU,
 * pinned, the only task a CPU may run) cannot push it: a low-weight task
 * charged far ahead stays ahead of the reference instead of dragging it
 * along. Were it the maximum, tasks woken onto other CPUs would be clamped
 * near that runaway value and wait behind every task there until it caught
 * up. Running tasks do not hold it back while tasks wait: a heavy task
 * alone on its CPU ages slowly, and would keep everybody else's vtime
 * pressed against the lead cap below, which flattens their weights.
 *
 * Two clamps keep every vtime near the reference:
 *  - credit: a task is at most slice_lag_ns behind it, as EEVDF clamps a
 *    waking entity's lag. A waking task is lifted to that floor, so a long
 *    sleeper gets a CPU soon but cannot monopolise it until it has "caught
 *    up"; so is a task charged while it ran out of order (alone on its CPU,
 *    say), as CFS renormalises a task that comes from another runqueue.
 *    Otherwise a heavy task pinned alone would fall far behind and then,
 *    once a kworker queued beside it, keep its CPU until it caught up.
 *    A waking task's credit shrinks with the queue: with q tasks waiting
 *    for n CPUs it is slice_lag_ns * n / (n + q) (arith.h's
 *    credit_share()). The reference is the front of the queue, so a full
 *    credit puts every wakee ahead of every waiting task. While few wait,
 *    that costs them little and buys the wakee its CPU at once; while many
 *    wait, the wakees (each with a little work: a message to read) kept
 *    overtaking the tasks with much, and hackbench switched tasks 2 to 3
 *    times as often as under EEVDF and ran up to 1.5 times slower. A task
 *    that must not wait says so with latency nice, whose offset does not
 *    shrink;
 *  - lead cap: a charge leaves a task at most two of its own slices, and at
 *    least VTIME_MAX_LEAD_NS, ahead of it, so that the debt of a task whose
 *    weight is tiny is bounded and a nice 19 task still keeps its 1:100
 *    ratio against nice 0.
 * The lead cap bounds weighted time, not wall time: how long a capped task
 * waits depends on its competitors' weights. The wall-clock bound on every
 * wait is bound.bpf.h's.
 *
 * The DSQs order by a key, not by vtime alone:
 *
 *	key = vtime + awake_vt
 *
 * where awake_vt is the weighted time the task has run since it last woke,
 * at most one slice (slice_ns). Among tasks of equal vtime, one that just
 * woke goes before one that has been running for a while, so short
 * sleepers are served first even among their own kind (a deadline that
 * grows with recent CPU use, as scx_bpfland's). vtime alone decides the
 * share: awake_vt shifts a task's turn by at most a slice and is never
 * charged. While a task waits, its key minus its vtime is folded into
 * p->scx.dsq_vtime (task_ctx.key_bias) and taken out when it leaves the
 * DSQ (key_unbias()); the latency DSQ adds the latency offset to the key
 * the same way (latency.bpf.h).
 *
 * Offsets within the cgroup. The sleeper credit and a negative latency
 * offset are, as in CFS, amounts of the task's time within its own cfs_rq,
 * where its vtime ages at its own weight. Flattened, a task of a cgroup
 * with share hw ages 1/hw times faster than that, so both are converted by
 * that factor (weight / effective weight), capped at VTIME_MAX_LEAD_NS.
 * Otherwise a worker among six in a half-share cgroup would get a twelfth
 * of the credit and of the latency offset a root task gets: latency nice
 * -20 then bought such tasks almost nothing.
 *
 * A task keeps its lag (vtime - reference, within the clamps) when it leaves
 * sched_ext for another class and gets it back when it returns, so a
 * priority-inheritance boost or a sched_setscheduler() round trip neither
 * forgives its debt nor takes its credit.
 *
 * Limits: while no task waits, computing the front reads the cpu_ctx of
 * every CPU of the domain, at most once per VTIME_SCAN_NS per domain (the
 * loop runs over the domain's CPU list, topo.bpf.h: O(CPUs per LLC)
 * cheap reads). A domain whose CPUs all idle keeps its reference where it was
 * until a task starts there.
 */
#ifndef __LATCFS_VRUNTIME_BPF_H
#define __LATCFS_VRUNTIME_BPF_H

#include "arith.h"
#include "task.bpf.h"
#include "cgroup.bpf.h"
#include "domain.bpf.h"

/* Base time slice a task gets each time it is dispatched (--slice-us, default 3000 µs). */
const volatile u64 slice_ns = 3ULL * 1000 * 1000;

/*
 * Sleeper credit bound (--slice-lag-us, default 3000 µs): how far, in
 * weighted ns of the task's time within its cgroup (vtime_in_group()), a
 * waking task's vtime may lag behind the reference while no task waits;
 * less while tasks wait (see above).
 */
const volatile u64 slice_lag_ns = 3ULL * 1000 * 1000;

/*
 * The lead cap (see above): a charge leaves a task at most two of its
 * slices ahead of the reference, but never less than VTIME_MAX_LEAD_NS nor
 * more than VTIME_MAX_LEAD_CAP_NS, in weighted ns.
 */
#define VTIME_MAX_LEAD_NS	(100ULL * 1000 * 1000)
#define VTIME_MAX_LEAD_CAP_NS	(10ULL * 1000 * 1000 * 1000)

/*
 * How often, at most, a domain's running vtimes are scanned (while none
 * wait), and a domain's CPUs recompute the machine's reference.
 */
#define VTIME_SCAN_NS		(1ULL * 1000 * 1000)

/* A domain where no task started for this long is idle: its reference is stale. */
#define VTIME_IDLE_NS		(10ULL * 1000 * 1000)

/* The machine's reference (see above), for machines with more than one LLC. */
static u64 vtime_gref;

/* Domain @dom's reference vtime (see above): monotonic. */
static __always_inline u64 dom_ref(u32 dom)
{
	struct dom_ctx *dctx = dom_ctx_of(dom);

	return dctx ? READ_ONCE(dctx->vtime_ref) : 0;
}

/* The reference the clamps work from (see above): monotonic. */
static __always_inline u64 vtime_ref(void)
{
	if (nr_llcs <= 1)
		return dom_ref(0);
	return READ_ONCE(vtime_gref);
}

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
 * @x weighted ns of a task's time within its cgroup, in the flattened scale
 * (see "Offsets within the cgroup" above): times how much faster its
 * cgroup's share makes its vtime age than its weight alone would; at most
 * VTIME_MAX_LEAD_NS (or @x, if that is more).
 */
static __always_inline u64 vtime_in_group(struct task_struct *p, struct task_ctx *tctx, u64 x)
{
	u64 eff = cg_task_weight(p, tctx), r;

	if (!eff)
		return x;
	r = vt_mul_div(x, (u64)p->scx.weight << CG_HW_SHIFT, eff);
	if (r > VTIME_MAX_LEAD_NS)
		r = VTIME_MAX_LEAD_NS > x ? VTIME_MAX_LEAD_NS : x;
	return r;
}

/* @p's latency offset in the flattened scale (negative ones: see vtime_in_group()). */
static __always_inline s64 vtime_lat_offset(struct task_struct *p, struct task_ctx *tctx)
{
	if (tctx->lat_offset >= 0)
		return tctx->lat_offset;
	return -(s64)vtime_in_group(p, tctx, -tctx->lat_offset);
}

/* The vtime of a task waiting in a DSQ, without its key bias. */
static __always_inline u64 vtime_of_queued(struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	return p->scx.dsq_vtime - (tctx ? tctx->key_bias : 0);
}

/*
 * @p's DSQ key, with @lat_off (0, or its negative latency offset for the
 * latency DSQ): what it is queued by, and compared by.
 */
static __always_inline u64 vtime_key(struct task_struct *p, struct task_ctx *tctx, s64 lat_off)
{
	return p->scx.dsq_vtime + tctx->awake_vt + lat_off;
}

/* @p goes into a DSQ: fold its key into dsq_vtime (see above). */
static __always_inline void key_bias(struct task_struct *p, struct task_ctx *tctx, s64 lat_off)
{
	tctx->key_bias = tctx->awake_vt + lat_off;
	p->scx.dsq_vtime += tctx->key_bias;
}

/* @p left its DSQ (or is about to be queued again): dsq_vtime is its vtime again. */
static __always_inline void key_unbias(struct task_struct *p, struct task_ctx *tctx)
{
	if (tctx->key_bias) {
		p->scx.dsq_vtime -= tctx->key_bias;
		tctx->key_bias = 0;
	}
}

/*
 * Move domain @dom's reference to its queue's front, if that is ahead of
 * it: the least of @cand (the vtime of a task starting or just charged
 * here) and the heads of the domain's DSQs, or, if nothing waits, of what
 * its CPUs run. It runs only when the reference would move, and a lost
 * race leaves it a little behind, never ahead.
 */
static void vtime_update_ref(u32 dom, u64 cand)
{
	struct dom_ctx *dctx = dom_ctx_of(dom);
	u64 ref, now;
	struct task_struct *head;
	struct cpu_ctx *cctx;
	u32 i, nr = llc_size(dom);
	bool waiting = false;

	if (!dctx)
		return;
	ref = READ_ONCE(dctx->vtime_ref);
	if (!vt_before(ref, cand))
		return;
	head = dsq_head(fair_dsq(dom));
	if (head) {
		waiting = true;
		if (vt_before(head->scx.dsq_vtime, cand))
			cand = head->scx.dsq_vtime;
	}
	head = dsq_head(lat_dsq(dom));
	if (head) {
		waiting = true;
		if (vt_before(vtime_of_queued(head), cand))
			cand = vtime_of_queued(head);
	}
	if (!waiting) {
		/* rate-limited: between scans the reference waits a little */
		now = scx_bpf_now();
		if (now - READ_ONCE(dctx->vtime_scan_at) < VTIME_SCAN_NS)
			return;
		WRITE_ONCE(dctx->vtime_scan_at, now);
		bpf_for(i, 0, nr) {
			cctx = cpu_ctx_of(llc_cpu(dom, i));
			if (cctx && cctx->curr_valid && vt_before(cctx->curr_vtime, cand))
				cand = cctx->curr_vtime;
		}
	}
	if (vt_before(ref, cand))
		__sync_val_compare_and_swap(&dctx->vtime_ref, ref, vt_advance(ref, cand));
}

/*
 * A task starts on a CPU of domain @dom (or keeps it for another slice):
 * note the domain active, and recompute the machine's reference from the
 * domains' if this domain has not done so for VTIME_SCAN_NS (see above).
 */
static void vtime_update_gref(u32 dom)
{
	struct dom_ctx *dctx = dom_ctx_of(dom), *o;
	u64 now = scx_bpf_now(), wait_min = 0, run_min = 0, g, cand;
	bool any_wait = false, any_run = false;
	u32 d, n = nr_llcs;

	if (nr_llcs <= 1 || !dctx)
		return;
	if (now - READ_ONCE(dctx->active_at) >= VTIME_SCAN_NS)
		WRITE_ONCE(dctx->active_at, now);
	if (now - dctx->gref_at < VTIME_SCAN_NS)
		return;
	dctx->gref_at = now;
	bpf_for(d, 0, n) {
		if (!(o = dom_ctx_of(d)) || now - READ_ONCE(o->active_at) > VTIME_IDLE_NS)
			continue;
		cand = READ_ONCE(o->vtime_ref);
		if (dom_nr_queued(d)) {
			if (!any_wait || vt_before(cand, wait_min))
				wait_min = cand;
			any_wait = true;
		} else {
			if (!any_run || vt_before(cand, run_min))
				run_min = cand;
			any_run = true;
		}
	}
	if (!any_wait && !any_run)
		return;
	cand = any_wait ? wait_min : run_min;
	g = READ_ONCE(vtime_gref);
	if (vt_before(g, cand))
		__sync_val_compare_and_swap(&vtime_gref, g, vt_advance(g, cand));
}

/*
 * Bound the sleeper credit of waking task @p, shrunk by the queue of
 * domain @dom, where it is about to wait or run (see above). Returns true
 * when the bound applied.
 */
static __always_inline bool vtime_bound_lag(struct task_struct *p, struct task_ctx *tctx, u32 dom)
{
	u64 lag = tctx ? vtime_in_group(p, tctx, slice_lag_ns) : slice_lag_ns;
	struct dom_ctx *dctx = dom_ctx_of(dom);
	u64 vtime;

	if (!dctx)
		return false;
	lag = credit_share(lag, dctx->nr_cpus ?: 1, dom_nr_queued(dom));
	vtime = vt_floor(p->scx.dsq_vtime, vtime_ref(), lag);

	if (vtime == p->scx.dsq_vtime)
		return false;
	p->scx.dsq_vtime = vtime;
	return true;
}

/*
 * Note @p as this CPU's current task, as of its last charge: its vtime and
 * awake_vt, when that was, how fast its vtime ages (weighted ns per 2^20
 * ns) and its latency offset; enough for another CPU to compute its key
 * now (preempt.bpf.h) without touching the task.
 */
static __always_inline void vtime_note_curr(struct cpu_ctx *cctx, struct task_struct *p,
					    struct task_ctx *tctx)
{
	cctx->curr_vtime = p->scx.dsq_vtime;
	cctx->curr_awake = tctx->awake_vt;
	cctx->curr_started_at = tctx->last_run_at;
	cctx->curr_scale = scale_by_weight_inverse(p, tctx, 1ULL << 20);
	cctx->curr_lat_offset = vtime_lat_offset(p, tctx);
	cctx->curr_lat_own = tctx->lat_offset;
	cctx->curr_valid = true;
}

/* A task woke: its time awake starts again. */
static __always_inline void vtime_woke(struct task_ctx *tctx)
{
	tctx->awake_vt = 0;
}

/* @p starts running on this CPU. */
static __always_inline void vtime_start(struct task_struct *p, struct task_ctx *tctx)
{
	struct cpu_ctx *cctx = this_cpu_ctx();

	tctx->last_run_at = scx_bpf_now();
	if (cctx)
		vtime_note_curr(cctx, p, tctx);
	vtime_update_ref(this_dom(), p->scx.dsq_vtime);
	vtime_update_gref(this_dom());
}

/* Weighted time @p has run since vtime_start() or its last charge. */
static __always_inline u64 vtime_uncharged(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = scx_bpf_now();

	if (!tctx->last_run_at || now <= tctx->last_run_at)
		return 0;
	return scale_by_weight_inverse(p, tctx, now - tctx->last_run_at);
}

/* awake_vt after @w more weighted ns of running: at most a slice. */
static __always_inline u64 vtime_awake_after(struct task_ctx *tctx, u64 w)
{
	return awake_after(tctx->awake_vt, w, slice_ns);
}

/*
 * The key @p would be queued by now (with @lat_off, as vtime_key()),
 * counting the time it has run and not yet been charged for.
 */
static __always_inline u64 vtime_key_current(struct task_struct *p, struct task_ctx *tctx,
					     s64 lat_off)
{
	u64 w = vtime_uncharged(p, tctx);

	return p->scx.dsq_vtime + w + vtime_awake_after(tctx, w) + lat_off;
}

/* The lead cap of @p: two of its slices, within the bounds above. */
static __always_inline u64 vtime_max_lead(struct task_struct *p, struct task_ctx *tctx)
{
	u64 lead = 2 * scale_by_weight_inverse(p, tctx, slice_ns);

	if (lead < VTIME_MAX_LEAD_NS)
		return VTIME_MAX_LEAD_NS;
	return lead > VTIME_MAX_LEAD_CAP_NS ? VTIME_MAX_LEAD_CAP_NS : lead;
}

/*
 * Charge the time @p ran since vtime_start() or its last charge, within the
 * clamps: the lead cap, and the credit floor for a task that ran out of
 * order while the reference moved on.
 */
static __always_inline void vtime_charge(struct task_struct *p, struct task_ctx *tctx)
{
	u64 ref = vtime_ref(), w = vtime_uncharged(p, tctx);
	u64 vtime = vt_cap(p->scx.dsq_vtime + w, ref, vtime_max_lead(p, tctx));

	p->scx.dsq_vtime = vt_floor(vtime, ref, vtime_in_group(p, tctx, slice_lag_ns));
	tctx->awake_vt = vtime_awake_after(tctx, w);
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
	if (cctx)
		vtime_note_curr(cctx, p, tctx);
	vtime_update_ref(this_dom(), p->scx.dsq_vtime);
	vtime_update_gref(this_dom());
}

/* @p leaves sched_ext: keep its lag for when it returns. */
static __always_inline void vtime_save(struct task_struct *p, struct task_ctx *tctx)
{
	tctx->saved_lag = vt_saved_lag(p->scx.dsq_vtime, vtime_ref(), slice_lag_ns,
				       VTIME_MAX_LEAD_NS);
	tctx->has_saved_lag = true;
}

/*
 * @p enters sched_ext: a new task starts level with the reference, a
 * returning one with the lag it left with.
 */
static __always_inline void vtime_restore(struct task_struct *p, struct task_ctx *tctx)
{
	u64 ref = vtime_ref();

	if (tctx && tctx->has_saved_lag) {
		p->scx.dsq_vtime = ref + tctx->saved_lag;
		tctx->has_saved_lag = false;
	} else {
		p->scx.dsq_vtime = ref;
	}
}

#endif /* __LATCFS_VRUNTIME_BPF_H */
