/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Latency nice for scx_latcfs, after the latency nice series (v12, 2023).
 *
 * A task's latency nice, -20..19, says how soon it wants a CPU after it
 * wakes, independently of how much CPU it gets (its weight). It becomes an
 * offset in weighted time:
 *
 *	lat_offset = latency_range_ns * latency_nice / 20
 *
 * The offset changes the order of service, never the share: vtime is charged
 * exactly as before, so a task served ahead of its fair turn is that much
 * further ahead in vtime, and waits that much longer next time.
 *
 * Latency-sensitive tasks (negative offset) wait in their own DSQ, ordered by
 * their key (vruntime.bpf.h) + offset. A CPU looking for work takes the latency head instead of
 * the fair head while the latency head's key is within wakeup_gran_ns of the
 * fair head's vtime: the series' wakeup_preempt_entity() check at pick time.
 * Otherwise fair order holds. Each latency task can thus run at most |offset|
 * ahead of its fair position; lat_budget_ns bounds how long the fair head may
 * be bypassed at all, so that many latency tasks taking turns cannot starve
 * it.
 *
 * Wakeup preemption (preempt.bpf.h) adds each side's offset to its key, so
 * a latency-sensitive task that wakes preempts a running task more readily.
 * A task with a positive latency nice yields to waking tasks more readily
 * and preempts less; in exchange its slice is longer (slice_ns + offset),
 * which is what latency nice +19 gave hackbench in the series.
 *
 * Latency nice 0 costs nothing. While no task has a non-zero latency nice
 * (nr_lat_tasks == 0), enqueue and dispatch take exactly the paths they take
 * without this file, and nothing ever changes for a task whose offset is 0:
 * the series' hackbench regression came from capping the wakeup granularity
 * of every task by latency_max, and there is no such cap here.
 *
 * Where latency nice comes from: rules in lat_rules (by pid: every thread of
 * the process; by cgroup: every task in it and in its descendants, like the
 * series' cpu.latency.nice) and lat_comm (by command name). The loader writes
 * them at start and `scx_latcfs latency-nice set` while running; a change
 * bumps lat_ctl.gen. A task looks its value up when it is created, when it
 * moves cgroup, and at its next run after an exec or a rule change (so a task
 * that sleeps through a change keeps its old value, and may keep the latency
 * machinery switched on, until it runs again). Precedence: pid rule, comm
 * rule, a per-task value inherited from the parent at fork, the nearest
 * cgroup rule, 0. A value a rule gave goes with the rule (`latency-nice
 * unset`); one inherited at fork stays. A pid rule goes with the last
 * thread of its process (lat_task_exit()).
 *
 * Limits: lat_rules holds 4096 pid and cgroup rules, lat_comm 1024 comm
 * rules; `latency-nice set` says so when one is full. The cgroup rule search
 * goes up LATCFS_CGROUP_MAX_DEPTH levels.
 */
#ifndef __LATCFS_LATENCY_BPF_H
#define __LATCFS_LATENCY_BPF_H

#include "task.bpf.h"
#include "stats.bpf.h"
#include "vruntime.bpf.h"

#ifndef PF_EXITING
#define PF_EXITING	0x00000004	/* include/linux/sched.h: in do_exit() */
#endif

/*
 * Offset at latency nice -20, in weighted ns of the task's time within its
 * cgroup (vtime_lat_offset()) (--latency-us, default 6000 µs).
 */
const volatile u64 latency_range_ns = 6ULL * 1000 * 1000;

/* Longest time the fair head may be bypassed by the latency DSQ (--latency-budget-us). */
const volatile u64 lat_budget_ns = 20ULL * 1000 * 1000;

/*
 * Tasks with a non-zero offset, plus those whose offset went to 0 while they
 * may still sit in the latency DSQ (they are uncounted when they next run).
 * While it is 0 the latency machinery is off.
 */
static u64 nr_lat_tasks;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct latcfs_rule_key);
	__type(value, s32);
} lat_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, char[LATCFS_COMM_LEN]);
	__type(value, s32);
} lat_comm SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct latcfs_lat_ctl);
} lat_ctl SEC(".maps");

/*
 * Per-task values inherited at fork by tasks that existed before a restart,
 * by thread id: the loader reads them from the previous scheduler and
 * writes them here before attaching; init_task() takes each once.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, s32);
} lat_carry SEC(".maps");

static __always_inline u64 lat_rules_gen(void)
{
	u32 zero = 0;
	struct latcfs_lat_ctl *ctl = bpf_map_lookup_elem(&lat_ctl, &zero);

	return ctl ? ctl->gen : 0;
}

static __always_inline s32 *lat_rule(u32 kind, u64 id)
{
	struct latcfs_rule_key key = { .id = id, .kind = kind };

	return bpf_map_lookup_elem(&lat_rules, &key);
}

static bool lat_comm_rule(struct task_struct *p, s32 *nice)
{
	char comm[LATCFS_COMM_LEN] = {};
	s32 *v;

	if (bpf_probe_read_kernel_str(comm, sizeof(comm), p->comm) < 0)
		return false;
	v = bpf_map_lookup_elem(&lat_comm, comm);
	if (!v)
		return false;
	*nice = *v;
	return true;
}

/*
 * The rule of @cgrp or of its nearest ancestor that has one. The walk reads
 * through the css parent links with probe reads, so it works from any cgroup
 * pointer the kernel hands us, trusted or not.
 */
static bool lat_cgroup_rule(struct cgroup *cgrp, s32 *nice)
{
	struct cgroup *c = cgrp;
	s32 *v;
	u32 i;

	bpf_for(i, 0, LATCFS_CGROUP_MAX_DEPTH) {
		if (!c)
			break;
		v = lat_rule(LATCFS_RULE_CGROUP, BPF_CORE_READ(c, kn, id));
		if (v) {
			*nice = *v;
			return true;
		}
		/* a cgroup's css is its first member: the parent css is the parent cgroup */
		c = (struct cgroup *)BPF_CORE_READ(c, self.parent);
	}
	return false;
}

static void lat_set(struct task_ctx *tctx, s32 nice)
{
	u32 mag = nice < 0 ? -nice : nice;
	s64 off = latency_range_ns * mag / LATCFS_LAT_NICE_SCALE;

	tctx->lat_nice = nice;
	tctx->lat_offset = nice < 0 ? -off : off;
	if (tctx->lat_offset && !tctx->lat_counted) {
		tctx->lat_counted = true;
		__sync_fetch_and_add(&nr_lat_tasks, 1);
	}
}

/* Stop counting a task whose offset is 0; only while it is not queued. */
static __always_inline void lat_uncount(struct task_ctx *tctx)
{
	if (tctx->lat_counted && !tctx->lat_offset) {
		tctx->lat_counted = false;
		__sync_fetch_and_sub(&nr_lat_tasks, 1);
	}
}

/* Look @p's latency nice up again. @cgrp is its cgroup, or NULL if unknown. */
static void lat_resolve(struct task_struct *p, struct task_ctx *tctx, struct cgroup *cgrp)
{
	/*
	 * The generation first, as a seqcount reader: a rule written while we
	 * look (writers bump it after writing) leaves us with the old
	 * generation, so the next run looks again.
	 */
	u64 gen = lat_rules_gen();
	s32 nice = 0, *v;
	bool rule = true;

	v = lat_rule(LATCFS_RULE_PID, p->tgid);
	if (v)
		nice = *v;
	else
		rule = lat_comm_rule(p, &nice);
	if (rule) {
		tctx->own_nice = nice;
		tctx->has_own = true;
		tctx->own_from_rule = true;
	} else if (tctx->own_from_rule) {
		/* its rule was removed; a value inherited at fork stays */
		tctx->has_own = false;
		tctx->own_from_rule = false;
	}
	nice = 0;
	if (tctx->has_own)
		nice = tctx->own_nice;
	else if (cgrp)
		lat_cgroup_rule(cgrp, &nice);
	tctx->lat_gen = gen;
	lat_set(tctx, nice);
}

/* An existing task taken over at load: the value it inherited before a restart. */
static __always_inline void lat_carried(struct task_struct *p, struct task_ctx *tctx)
{
	u32 tid = p->pid;
	s32 *v = bpf_map_lookup_elem(&lat_carry, &tid);

	if (!v)
		return;
	tctx->own_nice = *v;
	tctx->has_own = true;
	bpf_map_delete_elem(&lat_carry, &tid);
}

/*
 * @p is being freed: if it was the last of its process (every thread has
 * left do_exit()'s accounting of live threads), the process' pid rule goes
 * with it, so that a process that reuses the pid does not inherit it. Not
 * when the scheduler is merely unloading (the task is not exiting then). The
 * loader also removes the pid rules of processes it finds gone.
 */
static __always_inline void lat_task_exit(struct task_struct *p, struct task_ctx *tctx)
{
	struct latcfs_rule_key key = { .id = p->tgid, .kind = LATCFS_RULE_PID };

	/* whatever its offset, it leaves for good */
	if (tctx->lat_counted) {
		tctx->lat_counted = false;
		__sync_fetch_and_sub(&nr_lat_tasks, 1);
	}
	if (!(p->flags & PF_EXITING) || BPF_CORE_READ(p, signal, live.counter))
		return;
	bpf_map_delete_elem(&lat_rules, &key);
}

/* A rule changed since @p last looked: look again, from its current cgroup. */
static __always_inline void lat_refresh(struct task_struct *p, struct task_ctx *tctx)
{
	struct cgroup *cgrp;

	if (tctx->lat_gen == lat_rules_gen())
		return;
	cgrp = scx_bpf_task_cgroup(p);
	lat_resolve(p, tctx, cgrp);
	if (cgrp)
		bpf_cgroup_release(cgrp);
}

/*
 * Does @prev, still runnable as its slice ends on @cpu, lead domain @dom's
 * latency DSQ? Its key with its latency offset against the key of the
 * first latency task that may run here (main.bpf.c's prev_leads_queue()
 * has checked the fair DSQ).
 */
static __always_inline bool lat_prev_leads(struct cpu_ctx *cctx, struct task_struct *prev,
					   struct task_ctx *tctx, s32 cpu, u32 dom)
{
	u64 key = 0;
	int found;

	if (!nr_lat_tasks)
		return true;
	found = first_for_cpu(cctx, lat_dsq(dom), cpu, &key);
	return !found ||
	       (found > 0 && !time_before(key, vtime_key_current(prev, tctx, vtime_lat_offset(prev, tctx))));
}

/*
 * Serve domain @dom's queues on this CPU: the latency head goes first while
 * its key is within wakeup_gran_ns of the fair head's and the fair head has
 * not been bypassed for longer than lat_budget_ns (see above); else fair
 * order. @gran is wakeup_gran_ns (preempt.bpf.h, which includes this file).
 */
static bool lat_consume(u32 dom, u64 gran)
{
	struct dom_ctx *dctx = dom_ctx_of(dom);
	struct task_struct *lat, *fair;
	u64 now;

	if (!nr_lat_tasks || !dctx || !(lat = dsq_head(lat_dsq(dom))))
		return dom_consume(fair_dsq(dom), LATCFS_STAT_SHARED);
	fair = dsq_head(fair_dsq(dom));
	if (!fair) {
		dctx->fair_bypassed_at = 0;
		return dom_consume(lat_dsq(dom), LATCFS_STAT_LAT_DISPATCH) ||
		       dom_consume(fair_dsq(dom), LATCFS_STAT_SHARED);
	}
	if (time_before(fair->scx.dsq_vtime + gran, lat->scx.dsq_vtime)) {
		stat_inc(LATCFS_STAT_LAT_REFUSED);
		goto fair_first;
	}
	now = scx_bpf_now();
	if (!dctx->fair_bypassed_at) {
		dctx->fair_bypassed_at = now;
	} else if (now - dctx->fair_bypassed_at > lat_budget_ns) {
		stat_inc(LATCFS_STAT_LAT_GUARD);
		goto fair_first;
	}
	return dom_consume(lat_dsq(dom), LATCFS_STAT_LAT_DISPATCH) ||
	       dom_consume(fair_dsq(dom), LATCFS_STAT_SHARED);
fair_first:
	if (dom_consume(fair_dsq(dom), LATCFS_STAT_SHARED)) {
		dctx->fair_bypassed_at = 0;
		return true;
	}
	return dom_consume(lat_dsq(dom), LATCFS_STAT_LAT_DISPATCH);
}

#endif /* __LATCFS_LATENCY_BPF_H */
