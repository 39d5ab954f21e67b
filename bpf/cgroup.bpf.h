/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cgroup weight aggregation for scx_latcfs: the cpu.weight hierarchy
 * flattened into one effective weight per task, so that a single vtime queue
 * serves every cgroup its share.
 *
 * CFS runs a queue per cgroup per CPU and schedules group entities inside
 * group entities. We keep one queue and instead give each task the weight
 * its position in the hierarchy earns it. At each level a cgroup competes
 * with its active siblings (and, at the root, with the root's own tasks, as
 * a top-level group entity competes with root tasks in CFS):
 *
 *	hw(C)   = w(C)                              if C's parent is the root
 *	hw(C)   = hw(parent) * w(C) / sum(parent)   otherwise
 *	eff(t)  = hw(C) * w(t) / sum(C)             for task t in cgroup C
 *
 * where w is cpu.weight (or the task's nice weight) and sum(X) is the weight
 * of X's active children plus that of X's own runnable tasks. A cgroup is
 * active while it has a runnable task or an active child. Worked example, all
 * cgroups busy with one nice 0 task each and nothing runnable in the root:
 *
 *	root ── A (100) ── B (100)	hw(A) = 100, sum(A) = 200
 *	     │         └── C (100)	hw(B) = hw(C) = 100 * 100 / 200 = 50
 *	     └── D (200)		hw(D) = 200
 *
 * B, C and D's tasks have effective weights 50, 50 and 200: shares 1/6,
 * 1/6 and 2/3. A second task in B halves each of B's tasks' weight, and
 * leaves B's share alone. vtime is charged with the effective weight
 * (vruntime.bpf.h), so the shares hold whatever the number of tasks.
 *
 * Costs, after the seeds:
 *  - Activity is tracked on runnable/quiescent under the task's cgroup's
 *    lock, walking up only when a cgroup becomes active or idle. A change
 *    of the active set or of a weight bumps cg_gen; hw(C) is recomputed
 *    lazily, by the next task of C that is charged (cg_recompute counts it).
 *  - Root fast path (Waiman Long's "Disable tg load_avg update for
 *    root_task_group"): the root's aggregate would never be used, so tasks in
 *    the root cgroup skip all of this and keep their own weight.
 *  - No-op move elision (wuchi's "Reduce cost of sched_move_task"): the core
 *    dequeues and requeues a task around every sched_move_task(), also for
 *    the autogroup move each exiting task makes. A requeue that leaves the
 *    task in the cgroup and at the weight it was counted with keeps its
 *    bookkeeping instead of deactivating and reactivating the cgroup.
 * --no-cgroup-fast-paths turns both off (the root's aggregate is then kept
 * and never read, as before the seed), to measure what they save.
 *
 * Races: a cgroup's count, its active flag and the weight it added to its
 * parent change together under its lock, and a cpu.weight write takes the
 * same lock, so a parent's sum is exact once concurrent updates land
 * (cg_member()). cgroup v2 keeps processes out of inner cgroups that
 * delegate cpu, so sums of inner cgroups change only with their children's
 * activity.
 *
 * Limits. LATCFS_MAX_CGROUPS entries, allocated on demand: past that (or
 * when an allocation fails) a cgroup is not tracked and its tasks keep
 * their own weight, but its mkdir still succeeds. Walks go up
 * LATCFS_CGROUP_MAX_DEPTH levels; a deeper cgroup is accounted as its
 * ancestor at that depth, so its subtree shares that ancestor's weight by
 * task weight alone, and its own cpu.weight is not read. Both are counted
 * and logged by the loader. A cgroup that goes away while a dying task is
 * still counted in it (cg_exit()) leaves its parent at once.
 */
#ifndef __LATCFS_CGROUP_BPF_H
#define __LATCFS_CGROUP_BPF_H

#include "arith.h"
#include "task.bpf.h"
#include "stats.bpf.h"

/* Skip group work for root tasks and no-op requeues (--no-cgroup-fast-paths clears it). */
const volatile bool cg_fast_paths = true;

/* fixed-point fraction bits of hw() */
#define CG_HW_SHIFT		16

/*
 * The core's DEQUEUE_SAVE: a dequeue that will be undone at once. The
 * matching requeue is recognised by cg_saved, not by ENQUEUE_RESTORE, so
 * that a task which left for another class in between is settled too.
 */
#define CORE_DEQ_SAVE		0x02

struct cg_ctx {
	/* guards weight, nr, contrib, active and dead */
	struct bpf_spin_lock lock;
	/* cpu.weight */
	u64	weight;
	/* id of the parent cgroup; 0 if the parent is the root */
	u64	parent_id;
	/* runnable tasks plus active children; active while > 0 */
	s64	nr;
	/* the weight this cgroup added to its parent's sum when it last became active */
	u64	contrib;
	bool	active;
	/* ops.cgroup_exit() ran: never active again */
	bool	dead;
	/* weight of the runnable tasks plus that of the active children (atomic) */
	s64	sum;
	/*
	 * hw() in weight units << CG_HW_SHIFT (below 2^32) in the low half,
	 * the low half of the cg_gen it was computed at in the high half: one
	 * word, so that CPUs computing it at once cannot leave one's value
	 * under another's generation.
	 */
	u64	hw_cache;
};

/*
 * No preallocation: an entry costs memory only while its cgroup exists, so
 * the capacity (LATCFS_MAX_CGROUPS) can be generous.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, LATCFS_MAX_CGROUPS);
	__type(key, u64);
	__type(value, struct cg_ctx);
} cg_ctxs SEC(".maps");

/* The root cgroup's id, once its aggregate is kept (--no-cgroup-fast-paths). */
static u64 cg_root_id;

/* Bumped whenever hw() of some cgroup may have changed. */
static u64 cg_gen = 1;

/*
 * A full memory barrier: a fetching atomic is fully ordered in the BPF
 * memory model, the plain atomic add (what clang emits when the result is
 * unused) is relaxed on arm64. @word is any u64 this CPU may write.
 */
static __always_inline u64 cg_fence(u64 *word, u64 add)
{
	u64 old = __sync_fetch_and_add(word, add);

	barrier_var(old);
	return old;
}

/*
 * Invalidate every cached hw(). Called after the sum or weight it is about
 * has changed, never before: a hw() computed from the old value in between
 * would otherwise be stored under the new generation and kept. Fully
 * ordered, so that a CPU that sees the new generation sees the change.
 */
static __always_inline void cg_changed(void)
{
	cg_fence(&cg_gen, 1);
}

static __always_inline struct cg_ctx *cg_lookup(u64 id)
{
	return bpf_map_lookup_elem(&cg_ctxs, &id);
}

static __always_inline u64 cgrp_id(struct cgroup *cgrp)
{
	return BPF_CORE_READ(cgrp, kn, id);
}

/*
 * The cgroup @cgrp is accounted as: itself, or for a cgroup deeper than
 * LATCFS_CGROUP_MAX_DEPTH, its ancestor at that depth (cgroup->ancestors[]
 * is indexed by level).
 */
static __always_inline struct cgroup *cg_tracked(struct cgroup *cgrp)
{
	struct cgroup *anc = NULL;

	if (BPF_CORE_READ(cgrp, level) <= LATCFS_CGROUP_MAX_DEPTH)
		return cgrp;
	bpf_probe_read_kernel(&anc, sizeof(anc),
			      (void *)cgrp + bpf_core_field_offset(struct cgroup, ancestors) +
				      LATCFS_CGROUP_MAX_DEPTH * sizeof(anc));
	return anc;
}

/* The id tasks of @cgrp are accounted under: 0 for the root's fast path. */
static __always_inline u64 cg_task_id(struct cgroup *cgrp)
{
	if (!cgrp || (cg_fast_paths && !BPF_CORE_READ(cgrp, level)))
		return 0;
	cgrp = cg_tracked(cgrp);
	return cgrp ? cgrp_id(cgrp) : 0;
}

/*
 * Add @delta (+1 or -1) to @c's members. If that makes it active or idle,
 * it joins or leaves its parent's sum, and so on up.
 *
 * Whether a cgroup is active, and the weight it added to its parent, are
 * decided under its lock from its count as it stands, not from the one
 * transition this call made: members of a parent can arrive out of order
 * (one CPU activates a child, another deactivates it and gets to the
 * parent first), and the count may pass through -1. Each call that moves
 * the count reconciles the flag with it, so the last one leaves both
 * right, and a parent's sum holds exactly the contrib of its active
 * children once the calls have landed.
 */
static void cg_member(struct cg_ctx *c, s64 delta)
{
	struct cg_ctx *parent;
	bool flip, on;
	s64 d;
	int i;

	bpf_for(i, 0, LATCFS_CGROUP_MAX_DEPTH) {
		flip = false;
		d = 0;
		bpf_spin_lock(&c->lock);
		c->nr += delta;
		on = c->nr > 0 && !c->dead;
		if (on != c->active) {
			flip = true;
			c->active = on;
			if (on) {
				c->contrib = c->weight;
				d = c->weight;
			} else {
				d = -(s64)c->contrib;
				c->contrib = 0;
			}
		}
		bpf_spin_unlock(&c->lock);
		if (!flip)
			return;
		stat_add(LATCFS_STAT_CG_ACTIVE, on ? 1 : -1);
		if (!c->parent_id || !(parent = cg_lookup(c->parent_id))) {
			cg_changed();
			return;
		}
		__sync_fetch_and_add(&parent->sum, d);
		cg_changed();
		delta = on ? 1 : -1;
		c = parent;
	}
}

/* Count runnable @p, of weight @weight, in its cgroup. */
static void cg_count(struct task_ctx *tctx, u64 weight)
{
	struct cg_ctx *c = cg_lookup(tctx->cg_id);

	if (!c)
		return;
	tctx->cg_counted = tctx->cg_id;
	tctx->cg_weight = weight;
	__sync_fetch_and_add(&c->sum, weight);
	cg_member(c, 1);
}

static void cg_uncount(struct task_ctx *tctx)
{
	struct cg_ctx *c;

	if (!tctx->cg_counted)
		return;
	c = cg_lookup(tctx->cg_counted);
	tctx->cg_counted = 0;
	if (!c)
		return;
	__sync_fetch_and_sub(&c->sum, tctx->cg_weight);
	cg_member(c, -1);
}

/* From ops.runnable(): @p became runnable, or is being requeued. */
static __always_inline void cg_runnable(struct task_struct *p, struct task_ctx *tctx)
{
	if (tctx->cg_saved) {
		tctx->cg_saved = false;
		if (tctx->cg_counted == tctx->cg_id) {
			/* Same cgroup: at most the weight changed, no (de)activation. */
			if (tctx->cg_weight != p->scx.weight) {
				struct cg_ctx *c = cg_lookup(tctx->cg_id);

				if (c)
					__sync_fetch_and_add(&c->sum, (s64)p->scx.weight - (s64)tctx->cg_weight);
				tctx->cg_weight = p->scx.weight;
			} else {
				stat_inc(LATCFS_STAT_CG_MOVE_SKIP);
			}
			return;
		}
		stat_inc(LATCFS_STAT_CG_MOVE);
		cg_uncount(tctx);
	}
	if (!tctx->cg_id) {
		stat_inc(LATCFS_STAT_CG_ROOT_FAST);
		return;
	}
	cg_count(tctx, p->scx.weight);
}

/* From ops.quiescent(). */
static __always_inline void cg_quiescent(struct task_ctx *tctx, u64 deq_flags)
{
	if (!tctx->cg_counted)
		return;
	/* Requeued at once (cgroup move, nice, affinity): settle it then. */
	if (cg_fast_paths && (deq_flags & CORE_DEQ_SAVE)) {
		tctx->cg_saved = true;
		return;
	}
	cg_uncount(tctx);
}

/*
 * hw() of @c (see the top of this file), recomputed only if the active set
 * or a weight changed since it was last computed.
 */
static u64 cg_hweight(struct cg_ctx *c)
{
	u64 gen = READ_ONCE(cg_gen) << 32, hw = 1ULL << CG_HW_SHIFT, w = c->weight;
	u64 cached = READ_ONCE(c->hw_cache);
	struct cg_ctx *x = c, *parent;
	int i;

	/* a stored hw() is never 0: a zeroed entry is no hit at any generation */
	if ((cached & ~0xffffffffULL) == gen && (cached & 0xffffffffULL))
		return cached & 0xffffffffULL;
	/* the generation above is read before the sums (pairs with cg_changed()) */
	cg_fence(&c->hw_cache, 0);
	bpf_for(i, 0, LATCFS_CGROUP_MAX_DEPTH) {
		w = x->weight;
		if (!x->parent_id || !(parent = cg_lookup(x->parent_id)))
			break;
		hw = hw_step(hw, w, parent->sum);
		x = parent;
	}
	/* below 2^32 (hw at most 1 << CG_HW_SHIFT, w at most 10000); clamped anyway */
	hw = vt_mul_div(hw, w, 1);
	if (hw > 0xffffffffULL)
		hw = 0xffffffffULL;
	if (!hw)
		hw = 1;
	WRITE_ONCE(c->hw_cache, gen | hw);
	stat_inc(LATCFS_STAT_CG_RECOMPUTE);
	return hw;
}

/*
 * @p's effective weight (above) in weight units << CG_HW_SHIFT; 0 for a task
 * that keeps its own weight (in the root cgroup, or its cgroup is gone).
 */
static __always_inline u64 cg_task_weight(struct task_struct *p, struct task_ctx *tctx)
{
	struct cg_ctx *c;
	u64 hw;

	if (!tctx->cg_id || tctx->cg_id == cg_root_id || tctx->cg_counted != tctx->cg_id ||
	    !(c = cg_lookup(tctx->cg_id)))
		return 0;
	hw = cg_hweight(c);
	/* the task's share of its cgroup, as one more level of the walk */
	return hw_step(hw, p->scx.weight, c->sum);
}

/*
 * Never fails: an error here would fail the cgroup's mkdir (or, at load,
 * the attach), for the whole machine. A cgroup we cannot track is counted
 * (cg_untracked, and the loader logs it); its tasks keep their own weight
 * and its children compete as top-level cgroups. One deeper than
 * LATCFS_CGROUP_MAX_DEPTH needs no entry: it is accounted as its ancestor
 * at that depth (cg_flattened).
 */
static s32 cg_init(struct cgroup *cgrp, u32 weight)
{
	struct cg_ctx c = { .weight = weight };
	struct cgroup *parent;
	u64 id = cg_task_id(cgrp);

	if (!id)
		return 0;
	if (id != cgrp_id(cgrp)) {
		stat_inc(LATCFS_STAT_CG_FLATTENED);
		return 0;
	}
	/* kept, as before the seed, and never read: root tasks keep their weight */
	if (!BPF_CORE_READ(cgrp, level))
		cg_root_id = id;
	/*
	 * Top-level cgroups compete with root tasks at their own weight: the
	 * root's aggregate (kept with --no-cgroup-fast-paths) is not a level.
	 */
	parent = (struct cgroup *)BPF_CORE_READ(cgrp, self.parent);
	if (parent && BPF_CORE_READ(parent, level))
		c.parent_id = cgrp_id(parent);
	if (bpf_map_update_elem(&cg_ctxs, &id, &c, BPF_ANY))
		stat_inc(LATCFS_STAT_CG_UNTRACKED);
	return 0;
}

/*
 * Under the lock, so that the weight an active cgroup added to its parent
 * and the one it later takes away always match (cg_member()).
 */
static void cg_set_weight(struct cgroup *cgrp, u32 weight)
{
	struct cg_ctx *c = cg_lookup(cgrp_id(cgrp)), *parent;
	s64 d = 0;

	if (!c)
		return;
	bpf_spin_lock(&c->lock);
	c->weight = weight;
	if (c->active) {
		d = (s64)weight - (s64)c->contrib;
		c->contrib = weight;
	}
	bpf_spin_unlock(&c->lock);
	if (d && c->parent_id && (parent = cg_lookup(c->parent_id)))
		__sync_fetch_and_add(&parent->sum, d);
	cg_changed();
}

/*
 * A cgroup can be removed while a task is still counted in it: do_exit()
 * takes the task out of its cgroup (cgroup_exit()) before its last
 * schedule, so an rmdir right after the task is reaped can run
 * ops.cgroup_exit() before the task's final ops.quiescent(). That
 * quiescent() then finds no entry, so the cgroup leaves its parent here:
 * marked dead, it never becomes active again, and its parent's sum and
 * count lose it now instead of never (cg_exit_active counts these).
 */
static void cg_exit(struct cgroup *cgrp)
{
	u64 id = cgrp_id(cgrp);
	struct cg_ctx *c = cg_lookup(id), *parent;
	bool was;
	s64 d;

	if (!c)
		return;
	bpf_spin_lock(&c->lock);
	c->dead = true;
	was = c->active;
	d = -(s64)c->contrib;
	c->active = false;
	c->contrib = 0;
	bpf_spin_unlock(&c->lock);
	if (was) {
		stat_inc(LATCFS_STAT_CG_EXIT_ACTIVE);
		stat_add(LATCFS_STAT_CG_ACTIVE, -1);
		if (c->parent_id && (parent = cg_lookup(c->parent_id))) {
			__sync_fetch_and_add(&parent->sum, d);
			cg_member(parent, -1);
		}
		cg_changed();
	}
	bpf_map_delete_elem(&cg_ctxs, &id);
}

#endif /* __LATCFS_CGROUP_BPF_H */
