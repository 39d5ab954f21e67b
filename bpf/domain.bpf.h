/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-LLC queues for scx_latcfs: where a runnable task waits, and which
 * queue a CPU serves.
 *
 * Each LLC is a domain with its own pair of DSQs, the fair DSQ (ordered by
 * key, vruntime.bpf.h) and the latency DSQ (latency.bpf.h), and its own
 * state (struct dom_ctx): the vtime reference and the latency DSQ's bypass
 * clock. A task waits in the domain of its CPU (where ops.select_cpu() left
 * it, which is where it last ran unless an idle CPU took it), so enqueues
 * and dispatches take their own LLC's DSQ locks and write their own LLC's
 * state; on a machine with one LLC there is one pair, as there always was.
 *
 * vtimes are one machine-wide scale: a task's vtime is the weighted service
 * it has had, wherever it ran, so keys of different domains compare
 * directly, and a lower key is a task owed more CPU. Each domain's
 * reference is the front of its own queue, and the clamps work from the
 * least of them (vruntime.bpf.h), so a task that moves keeps its lag.
 *
 * Stealing. A CPU serves its own domain first. It takes a task queued in
 * another domain instead
 *
 *  - when its own domain holds nothing it may run (no CPU idles while work
 *    it may run waits), or
 *  - when that task's key is more than steal_margin behind the key of what
 *    it would run otherwise (its own domain's front, or prev going on):
 *    that domain serves its tasks more slowly than this one, and taking its
 *    most owed task evens them out. This is CFS' load balancing in vtime
 *    terms: with nice 0 hogs crowded into one LLC and nice 5 hogs alone in
 *    another, the crowded LLC's keys fall behind until its hogs spread, and
 *    shares hold machine-wide as they do with one queue.
 *
 * The candidate is the least key among the other domains' first fair
 * tasks that may run here (a DSQ's first LATCFS_PEEK_MAX tasks are looked
 * at); a domain in another NUMA node counts steal_margin further behind,
 * so tasks cross nodes only for a larger imbalance. Looking costs a
 * lockless queue-length read per domain and a head walk (under that DSQ's
 * lock) per non-empty one, so a CPU whose own domain has work looks at
 * most once per STEAL_CHECK_NS. When the own domain yields nothing at all,
 * the CPU takes the first task it may run from any other domain's DSQs,
 * fair or latency, this node's first (steal_any()): the kernel scans those
 * whole. And the wait bound's walks (bound.bpf.h) go on into the other
 * domains, so a task waiting in a domain whose CPUs a higher sched class
 * holds is still rescued by any CPU it may use.
 *
 * Shared state, and why: a dom_ctx is written by its own LLC's CPUs (when
 * its reference moves, and a note at most once per VTIME_SCAN_NS) and
 * read by others when they recompute the machine's reference from the
 * domains' (vruntime.bpf.h), at most once per VTIME_SCAN_NS per domain; the
 * topology is read-only. What stays machine-wide and written: that
 * reference (at most once per VTIME_SCAN_NS per domain, when it moves),
 * nr_lat_tasks (only as tasks enter or leave a non-zero latency nice), the
 * cgroup entries and cg_gen (cgroup.bpf.h: on cgroup activations), and the
 * cpu_ctx notes of wakeup preemption (the victim's CPU, preempt.bpf.h).
 *
 * Limits: the steal check walks every other domain, O(nr_llcs) per check:
 * fine for tens of LLCs; beyond that it should sample. A task pinned to a
 * CPU waits in that CPU's domain queue, where its LLC's other CPUs look
 * past it (at most LATCFS_PEEK_MAX at a time). A DSQ per CPU for pinned
 * tasks would spare them that, but its tasks would then be invisible to
 * the domain's reference (vruntime.bpf.h), which follows the front of the
 * domain's DSQs (the least of their heads' and of the starting task's
 * vtime, or of the running ones' when nothing waits): the reference would run ahead of pinned tasks that wait,
 * and the clamps, which work from it, would pull them up to it, flattening
 * their weights (nice 0 and nice 5 hogs pinned together would share 1:1).
 * Doing it right needs the reference to see each CPU's pinned front, at a
 * cost per update that grows with the LLC's CPUs; not done yet.
 */
#ifndef __LATCFS_DOMAIN_BPF_H
#define __LATCFS_DOMAIN_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "topo.bpf.h"

/* How often a CPU whose own domain has work looks at the others, in ns. */
#define STEAL_CHECK_NS		(1ULL * 1000 * 1000)

/* no key: for steal_pick()'s caller, nothing to steal */
#define STEAL_NONE		(~0ULL)

struct dom_ctx {
	/* the reference vtime of this domain's queue (vruntime.bpf.h) */
	u64	vtime_ref;
	/* when the domain's CPUs' running vtimes were last scanned */
	u64	vtime_scan_at;
	/*
	 * when a task last started here (noted at most once per
	 * VTIME_SCAN_NS), and when this domain's CPUs last recomputed the
	 * machine's reference from the domains' (vruntime.bpf.h)
	 */
	u64	active_at;
	u64	gref_at;
	/* when its fair head was first bypassed by its latency DSQ; 0 if not (latency.bpf.h) */
	u64	fair_bypassed_at;
	/* its CPUs, and the node they are in */
	u32	nr_cpus;
	u32	node;
	/*
	 * Its CPUs write it, others' must not bounce it: 128 bytes, so that
	 * one domain's entry never shares a 64-byte line with another's
	 * (array map values start 8-byte aligned, not line aligned).
	 */
	u64	pad[9];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LATCFS_MAX_LLCS);
	__type(key, u32);
	__type(value, struct dom_ctx);
} dom_ctxs SEC(".maps");

static __always_inline struct dom_ctx *dom_ctx_of(u32 dom)
{
	return bpf_map_lookup_elem(&dom_ctxs, &dom);
}

/* The fair and the latency DSQ of domain @dom (intf.h). */
static __always_inline u64 fair_dsq(u32 dom)
{
	return LATCFS_SHARED_DSQ + 2 * (u64)dom;
}

static __always_inline u64 lat_dsq(u32 dom)
{
	return LATCFS_LAT_DSQ + 2 * (u64)dom;
}

/* The domain of this CPU. */
static __always_inline u32 this_dom(void)
{
	return llc_of(bpf_get_smp_processor_id());
}

/*
 * The domain @p waits in: its CPU's, or, if it may not run there (its
 * affinity just changed), that of a CPU it may use, so that a CPU of the
 * domain can serve it (and the wait bound's walk, bound.bpf.h, find it).
 */
static __always_inline u32 dom_of_task(struct task_struct *p)
{
	const struct cpumask *online;
	s32 cpu = scx_bpf_task_cpu(p);

	if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
		/* an online one: a possible CPU may have no LLC of its own */
		online = scx_bpf_get_online_cpumask();
		cpu = bpf_cpumask_any_and_distribute(p->cpus_ptr, online);
		scx_bpf_put_cpumask(online);
	}
	return llc_of(cpu);
}

/* Tasks waiting in domain @dom's DSQs. */
static __always_inline u64 dom_nr_queued(u32 dom)
{
	return scx_bpf_dsq_nr_queued(fair_dsq(dom)) + scx_bpf_dsq_nr_queued(lat_dsq(dom));
}

/*
 * The first task of DSQ @dsq_id, or NULL. Before Linux 7.1 the compat peek
 * is an iterator walk that takes the DSQ's lock; the count read first
 * spares that when the DSQ is empty, the common case while CPUs keep up.
 */
static __always_inline struct task_struct *dsq_head(u64 dsq_id)
{
	if (!scx_bpf_dsq_nr_queued(dsq_id))
		return NULL;
	return __COMPAT_scx_bpf_dsq_peek(dsq_id);
}

/*
 * The first task of @dsq_id, in queue order, that may run on @cpu, looking
 * at no more than LATCFS_PEEK_MAX: 1 and its key in @key if found, 0 if the
 * DSQ holds no task that @cpu may run, -1 if the tasks looked at may not
 * but more lie beyond. The counter lives in cpu_ctx (see bound.bpf.h).
 */
static int first_for_cpu(struct cpu_ctx *cctx, u64 dsq_id, s32 cpu, u64 *key)
{
	struct task_struct *p;

	if (!scx_bpf_dsq_nr_queued(dsq_id))
		return 0;
	cctx->scan_seen = 0;
	bpf_for_each(scx_dsq, p, dsq_id, 0) {
		if (++cctx->scan_seen > LATCFS_PEEK_MAX)
			return -1;
		if (bpf_cpumask_test_cpu(cpu, p->cpus_ptr)) {
			*key = p->scx.dsq_vtime;
			return 1;
		}
	}
	return 0;
}

/* Move the first task of @dsq_id that may run here to this CPU, counted in @stat. */
static __always_inline bool dom_consume(u64 dsq_id, u32 stat)
{
	if (!scx_bpf_dsq_nr_queued(dsq_id) || !scx_bpf_dsq_move_to_local(dsq_id, 0))
		return false;
	stat_inc(stat);
	return true;
}

/* Is it time for this CPU to look at the other domains (see above)? */
static __always_inline bool steal_due(struct cpu_ctx *cctx, bool own_empty, u64 now)
{
	if (nr_llcs <= 1)
		return false;
	if (!own_empty && now - cctx->steal_check_at < STEAL_CHECK_NS)
		return false;
	cctx->steal_check_at = now;
	return true;
}

/*
 * The task of another domain most owed CPU, for @cpu: the least key, a
 * domain in another node counting @margin more, among the first tasks of
 * their fair DSQs that may run here. (Latency DSQ keys carry their offset,
 * and their order is their domain's: those are taken only by
 * steal_any().) Its DSQ in @dsq; returns its key plus that penalty, or
 * STEAL_NONE.
 */
static u64 steal_pick(struct cpu_ctx *cctx, s32 cpu, u32 dom, u64 margin, u64 *dsq)
{
	u32 d, node = node_of(cpu), n = nr_llcs;
	u64 best = STEAL_NONE, key, pen;
	struct dom_ctx *dctx;

	bpf_for(d, 0, n) {
		if (d == dom || d >= LATCFS_MAX_LLCS)
			continue;
		dctx = dom_ctx_of(d);
		pen = dctx && dctx->node != node ? margin : 0;
		if (first_for_cpu(cctx, fair_dsq(d), cpu, &key) > 0 &&
		    (best == STEAL_NONE || time_before(key + pen, best))) {
			best = key + pen;
			*dsq = fair_dsq(d);
		}
	}
	return best;
}

/*
 * This CPU would go idle (or keep prev although it does not lead): take
 * the first task that may run here from any other domain, those of this
 * node first, whatever its key. The kernel scans each DSQ whole, so tasks
 * behind others that may not run here are found too: no CPU idles while a
 * task it may run waits anywhere.
 */
static bool steal_any(s32 cpu, u32 dom)
{
	u32 d, pass, n = nr_llcs, node = node_of(cpu);
	struct dom_ctx *dctx;

	bpf_for(pass, 0, 2) {
		bpf_for(d, 0, n) {
			if (d == dom || !(dctx = dom_ctx_of(d)) || (dctx->node == node) != !pass)
				continue;
			if (dom_consume(fair_dsq(d), LATCFS_STAT_STEAL) ||
			    dom_consume(lat_dsq(d), LATCFS_STAT_STEAL))
				return true;
		}
	}
	return false;
}

/*
 * From ops.init(): each domain's DSQs and its CPU count. The DSQs are not
 * placed on a node: our node ids are dense indexes, not the kernel's.
 */
static s32 dom_init(void)
{
	struct dom_ctx *dctx;
	s32 ret;
	u32 d;

	if (nr_llcs > LATCFS_MAX_LLCS)
		return -E2BIG;

	bpf_for(d, 0, nr_llcs) {
		dctx = dom_ctx_of(d);
		if (!dctx)
			return -EINVAL;
		dctx->nr_cpus = llc_size(d);
		/* an LLC has CPUs (scx_utils builds it from one), but be sure */
		dctx->node = dctx->nr_cpus ? node_of(llc_cpu(d, 0)) : 0;
		if ((ret = scx_bpf_create_dsq(fair_dsq(d), -1)) ||
		    (ret = scx_bpf_create_dsq(lat_dsq(d), -1)))
			return ret;
	}
	return 0;
}

#endif /* __LATCFS_DOMAIN_BPF_H */
