/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the BPF scheduler and the Rust loader share. bindgen turns this file
 * into src/bpf_intf.rs at build time, so it holds only plain C: constants
 * and enums, no kernel types.
 */
#ifndef __LATCFS_INTF_H
#define __LATCFS_INTF_H

enum latcfs_consts {
	/* nice 0 weight, as in the kernel's sched_prio_to_weight[] scaled to scx */
	LATCFS_WEIGHT_DFL	= 100,
	/*
	 * id of LLC 0's vtime-ordered DSQ, which its runnable tasks wait in;
	 * LLC i's is LATCFS_SHARED_DSQ + 2 * i (domain.bpf.h)
	 */
	LATCFS_SHARED_DSQ	= 0,
	/*
	 * id of LLC 0's DSQ of latency-sensitive tasks, ordered by vtime +
	 * offset; LLC i's is LATCFS_LAT_DSQ + 2 * i
	 */
	LATCFS_LAT_DSQ		= 1,

	/* latency nice range, as in the latency nice series */
	LATCFS_LAT_NICE_MIN	= -20,
	LATCFS_LAT_NICE_MAX	= 19,
	/* latency nice levels per full latency offset (offset = range * nice / 20) */
	LATCFS_LAT_NICE_SCALE	= 20,
	/* bytes of a command name (TASK_COMM_LEN), the key of comm rules */
	LATCFS_COMM_LEN		= 16,
	/*
	 * cgroup levels the weight walks and the latency nice rule search go
	 * through; a deeper cgroup's weight is accounted as its ancestor's at
	 * this depth (cgroup.bpf.h)
	 */
	LATCFS_CGROUP_MAX_DEPTH	= 32,
	/*
	 * cgroups (with the cpu controller) whose weights the BPF side tracks;
	 * past it, a cgroup's tasks keep their own weight (cgroup.bpf.h)
	 */
	LATCFS_MAX_CGROUPS	= 65536,

	/* tasks of one DSQ the wait bound's walks visit at most (bound.bpf.h) */
	LATCFS_SCAN_MAX		= 1024,
	/* tasks of one DSQ the keep check looks past for one that may run here (main.bpf.c) */
	LATCFS_PEEK_MAX		= 16,

	/* topology the BPF side can hold (the loader refuses bigger machines) */
	LATCFS_MAX_CPUS		= 1024,
	LATCFS_MAX_LLCS		= 256,
	LATCFS_MAX_NODES	= 64,
};

/* What a latency nice rule in the lat_rules map applies to. */
enum latcfs_rule_kind {
	/* every thread of process (tgid) id */
	LATCFS_RULE_PID		= 1,
	/* every task in cgroup id (its cgroup v2 inode number) and below */
	LATCFS_RULE_CGROUP	= 2,
};

struct latcfs_rule_key {
	unsigned long long	id;
	unsigned int		kind;	/* enum latcfs_rule_kind */
	unsigned int		pad;
};

/*
 * Single entry of the lat_ctl map. Whoever changes a rule bumps gen; each
 * task notices at its next run and looks its latency nice up again.
 */
struct latcfs_lat_ctl {
	unsigned long long	gen;
};

/*
 * Per-task scheduler state, in BPF task storage. The loader reads it by pidfd
 * for `scx_latcfs latency-nice get`.
 */
struct task_ctx {
	/* when the task last started running, for charging its vtime */
	unsigned long long	last_run_at;
	/*
	 * Latency offset in weighted ns (latency.bpf.h): negative for
	 * latency-sensitive tasks, 0 at latency nice 0.
	 */
	long long		lat_offset;
	/*
	 * What is folded into p->scx.dsq_vtime while the task waits in a DSQ,
	 * which orders by key = vtime + awake_vt (+ its latency offset in the
	 * latency DSQ); taken out again before the vtime is used or charged
	 * (vruntime.bpf.h).
	 */
	long long		key_bias;
	/* weighted ns it has run since it last woke, at most a slice (vruntime.bpf.h) */
	unsigned long long	awake_vt;
	/* lat_ctl.gen when the latency nice below was looked up */
	unsigned long long	lat_gen;
	/* effective latency nice */
	signed char		lat_nice;
	/* a per-task latency nice (pid or comm rule, or inherited at fork) */
	signed char		own_nice;
	_Bool			has_own;
	/* own_nice came from a rule, and goes when the rule does */
	_Bool			own_from_rule;
	/* counted in nr_lat_tasks (latency.bpf.h) */
	_Bool			lat_counted;
	/*
	 * The CPU the task woke from before its previous wakeup (idle.bpf.h):
	 * set to prev on every wakeup, as CFS' recent_used_cpu; -1 if none.
	 */
	int			recent_used_cpu;
	/* weight of the cpu.weight hierarchy (cgroup.bpf.h) */
	_Bool			cg_saved;	/* dequeued for a requeue, still counted */
	unsigned int		cg_weight;	/* weight counted in cg_counted's sum */
	unsigned long long	cg_id;		/* the task's cgroup; 0: root fast path */
	unsigned long long	cg_counted;	/* cgroup counting it as runnable; 0: none */
	/* when it was queued in a DSQ of ours, for the wait bound; 0: not queued */
	unsigned long long	queued_at;
	/* vtime - reference when it left sched_ext, restored when it returns */
	long long		saved_lag;
	_Bool			has_saved_lag;
	/*
	 * The rest of its slice, when a wakeup preempted it: it goes back to
	 * its CPU's local DSQ, behind the wakee, instead of into the queue
	 * (preempt.bpf.h); 0 from when it runs or is queued otherwise.
	 */
	unsigned long long	resume_slice;
	/* its current run is a resumption: a new one gets no floor (preempt.bpf.h) */
	_Bool			resumed;
};

/*
 * Per-CPU event counters, indexes into the BPF "stats" map. The loader sums
 * them over CPUs and prints the per-interval deltas.
 */
enum latcfs_stat {
	/* ops.enqueue() calls: tasks that went through the scheduler's queue path */
	LATCFS_STAT_ENQUEUE,
	/* ops.runnable() with SCX_ENQ_WAKEUP: tasks waking up */
	LATCFS_STAT_WAKEUP,
	/* tasks moved from the CPU's own LLC's fair DSQ to its local DSQ */
	LATCFS_STAT_SHARED,
	/*
	 * slice ends at which the running task went on with a fresh slice: it
	 * still led the queue, or nothing queued may run on its CPU
	 */
	LATCFS_STAT_KEEP,
	/* wakeups whose vtime was clamped by the sleeper-credit bound */
	LATCFS_STAT_LAG_CLAMP,
	/* tasks moved from the latency DSQ to a CPU's local DSQ */
	LATCFS_STAT_LAT_DISPATCH,
	/* wakeup preemptions (below) by latency-sensitive tasks */
	LATCFS_STAT_LAT_PREEMPT,
	/* picks where the latency head was too far ahead of the fair head */
	LATCFS_STAT_LAT_REFUSED,
	/* picks where the starvation guard made the fair head go first */
	LATCFS_STAT_LAT_GUARD,
	/*
	 * Idle CPU selection (idle.bpf.h), after CFS' select_idle_sibling()
	 * statistics: searches, and which step found the idle CPU. A hit
	 * inserts the task straight into that CPU's local DSQ.
	 */
	LATCFS_STAT_SIS_SEARCH,
	LATCFS_STAT_SIS_TARGET,
	LATCFS_STAT_SIS_PREV,
	LATCFS_STAT_SIS_RECENT,
	/* recent_used_cpu was a candidate but not idle */
	LATCFS_STAT_SIS_RECENT_MISS,
	/*
	 * found by scanning the target's LLC (an idle core first), the part
	 * of it the task may use
	 */
	LATCFS_STAT_SIS_LLC,
	/*
	 * found in the target's NUMA node, the part the task may use (only
	 * where a node holds more than one LLC)
	 */
	LATCFS_STAT_SIS_NODE,
	/* found anywhere else the task may run */
	LATCFS_STAT_SIS_ANY,
	/* no idle CPU: the task is queued */
	LATCFS_STAT_SIS_FAIL,
	/*
	 * cgroup weights (cgroup.bpf.h): runnable root tasks that skipped all
	 * group work; requeues that moved a task's bookkeeping to a new cgroup
	 * and those that left it untouched (same cgroup and weight: the
	 * autogroup move of every exiting task, affinity changes); hw()
	 * recomputations.
	 */
	LATCFS_STAT_CG_ROOT_FAST,
	LATCFS_STAT_CG_MOVE,
	LATCFS_STAT_CG_MOVE_SKIP,
	LATCFS_STAT_CG_RECOMPUTE,
	/*
	 * A level, not an event count: cgroups active now (with a runnable
	 * task or an active child). Each CPU adds its activations and
	 * subtracts its deactivations; the sum over CPUs is the level.
	 */
	LATCFS_STAT_CG_ACTIVE,
	/*
	 * cgroups we could not track (no room, or no memory): their tasks
	 * keep their own weight; cgroups deeper than LATCFS_CGROUP_MAX_DEPTH,
	 * accounted as their ancestor at that depth; cgroups removed while
	 * still active (a task's last dequeue still to come), taken out of
	 * their parent's sum at removal.
	 */
	LATCFS_STAT_CG_UNTRACKED,
	LATCFS_STAT_CG_FLATTENED,
	LATCFS_STAT_CG_EXIT_ACTIVE,
	/*
	 * Never stall: tasks moved ahead of the queue for having waited longer
	 * than --max-wait-ms (bound.bpf.h); idle CPUs woken for a task just
	 * queued; CPUs taken by a higher sched class, whose local tasks were
	 * handed back to the queue (ops.cpu_release).
	 */
	LATCFS_STAT_RESCUE,
	LATCFS_STAT_IDLE_KICK,
	LATCFS_STAT_CPU_RELEASE,
	/*
	 * Wakeup preemption (preempt.bpf.h): wakeups that preempted a running
	 * task, and those of them whose victim ran on another CPU than the
	 * one the wakeup ran on (an IPI); preempted tasks that resumed on
	 * their CPU after the wakee, with the rest of their slice; wakeups
	 * that won but found the running task protected, so that a timer
	 * preempts it at the protection's end, and those timers' kicks (the
	 * victim still ran that slice and tasks still waited).
	 */
	LATCFS_STAT_PREEMPT,
	LATCFS_STAT_PREEMPT_REMOTE,
	LATCFS_STAT_PREEMPT_RESUME,
	LATCFS_STAT_PREEMPT_DEFER,
	LATCFS_STAT_PREEMPT_LATE,
	/*
	 * Slice ends between ticks (slice.bpf.h): slice timers armed and
	 * fired, and fires that ended a slice while tasks waited.
	 */
	LATCFS_STAT_SLICE_TIMER_ARM,
	LATCFS_STAT_SLICE_TIMER_FIRE,
	LATCFS_STAT_SLICE_CUT,
	/*
	 * Tasks a CPU took from another LLC's DSQs (domain.bpf.h): its own
	 * had none it may run, or that task was owed much more.
	 */
	LATCFS_STAT_STEAL,
	LATCFS_NR_STATS,
};

#endif /* __LATCFS_INTF_H */
