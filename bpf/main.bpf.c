/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_latcfs: CFS-style weighted fairness with latency control, on sched_ext.
 *
 * Design overview
 * ---------------
 * Runnable tasks wait in DSQs ordered by weighted virtual time
 * (vruntime.bpf.h): the task that has received the least CPU relative to its
 * weight runs next, so nice levels translate into CPU shares. There is one
 * pair of DSQs (fair and latency) per LLC (domain.bpf.h): a task waits in
 * its CPU's LLC, and a CPU serves its own LLC first and takes another's
 * task when its own has none it may run or that task is owed much more,
 * so shares hold machine-wide while enqueue and dispatch stay within an
 * LLC. The order key
 * adds the time a task has run since it last woke (at most a slice), so
 * short sleepers go first among equals; the share is the vtime's alone. A
 * waking task's sleeper credit is bounded by slice_lag_ns so that long
 * sleepers cannot monopolise a CPU after they wake.
 *
 * A waking task that finds no idle CPU preempts a running task whose key it
 * beats by wakeup_gran_ns, if it would be served next anyway
 * (preempt.bpf.h): sched_ext only notices a slice end at a tick. The
 * running task is protected for wakeup_gran_ns from its slice start (less
 * the latency offset a wakee has beyond its own); a timer preempts it when
 * that ends.
 * The victim is preferably the task on the waking CPU (no IPI; in a
 * handoff, the waker), and it goes on after the wakee with the rest of
 * its slice rather than back into the queue (only when no other CPU it
 * may use is idle; preempted again, it keeps only what is left of that
 * resumed run, so a chain never outlasts the first resumption).
 *
 * No task waits longer than max_wait_ns, whatever the weights
 * (bound.bpf.h), and no CPU idles while a task it may run waits
 * (idle.bpf.h's kicks, ops.cpu_release()).
 *
 * cgroups (cgroup.bpf.h) get the share their cpu.weight earns them in the
 * hierarchy: each task is charged with the weight its cgroup's share leaves
 * it, so the same vtime order serves every cgroup fairly. Tasks in the root cgroup skip
 * that work.
 *
 * Latency nice (latency.bpf.h) changes the order of service, never the share:
 * latency-sensitive tasks wait in a second DSQ ordered by key + a negative
 * offset, are picked ahead of the fair head while within budget of it, and
 * preempt more readily. While every task is at latency nice 0 none of that
 * runs but a look at the task's offset and, as a task starts, one map read
 * to see whether the rules changed (latency.bpf.h's lat_refresh()).
 *
 * Life of a task:
 *
 *   wakeup ──> select_cpu: idle CPU found? ── yes ──> that CPU's local DSQ
 *                  │        (target, prev, recent_used_cpu, LLC: idle.bpf.h)
 *                  │ no
 *                  v
 *   runnable (bound the sleeper credit, restart its time awake)
 *      │
 *   enqueue ──> waking, first in line, and ahead of a running task?
 *      │             └─ yes: preempt it (its local DSQ, SCX_ENQ_PREEMPT),
 *      │                 or, while it is protected, queue (below) and
 *      │                 arm a timer that preempts it when that ends
 *      ├──> latency-sensitive: its LLC's latency DSQ (key + offset)
 *      └──> otherwise:         its LLC's fair DSQ (key)
 *                 then wake an idle CPU it may use, if any
 *                                   │
 *   dispatch (a CPU ran out of work) <── a task past the wait bound first;
 *      │                                 another LLC's task if owed much
 *      │                                 more; then the latency head if
 *      │                                 within budget of the fair head,
 *      │                                 else the fair head; then another
 *      │                                 LLC's task if this one has none
 *      │ prev still runnable and still first in line (or nothing else may
 *      │ run here): prev keeps its CPU with a fresh slice
 *      v
 *   running (note the start time) ──> stopping (charge weighted vtime;
 *                                      preempted by a wakee: back to its
 *                                      CPU's local DSQ, behind the wakee,
 *                                      with the rest of its slice)
 *
 * Correctness under the sched_ext rules is left to the core where it is
 * already right: tasks with restricted affinity sit in a DSQ until a CPU they
 * may use pulls them (scx_bpf_dsq_move_to_local() skips tasks that cannot
 * run on the calling CPU); migration-disabled and exiting tasks are
 * dispatched locally by the core because we do not set
 * SCX_OPS_ENQ_MIGRATION_DISABLED or SCX_OPS_ENQ_EXITING.
 */
#include <scx/common.bpf.h>
#include "intf.h"

/*
 * The headers below are the source modules of this one BPF object: each
 * holds one concern and includes what it uses.
 */
#include "stats.bpf.h"
#include "topo.bpf.h"
#include "domain.bpf.h"
#include "vruntime.bpf.h"
#include "bound.bpf.h"
#include "latency.bpf.h"
#include "preempt.bpf.h"
#include "slice.bpf.h"
#include "idle.bpf.h"
#include "dump.bpf.h"

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

/*
 * Test only (--test-error-after-ms): fail on purpose this long after ops.init,
 * to check that the loader reports the kernel's exit reason and leaves
 * nothing attached. 0, the default, leaves no trace in the loaded program:
 * the verifier drops the branch on this frozen constant.
 */
const volatile u64 test_error_after_ns;
static u64 test_error_at;

s32 BPF_STRUCT_OPS(latcfs_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	s32 cpu = pick_idle_cpu(p, prev_cpu, wake_flags);

	if (cpu < 0)
		return prev_cpu;
	/*
	 * The CPU is idle: nothing there to be fair against, so skip the
	 * queues and their locks.
	 */
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, task_full_slice(p, lookup_task_ctx(p)), 0);
	return cpu;
}

void BPF_STRUCT_OPS(latcfs_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		cg_runnable(p, tctx);
	if (!(enq_flags & SCX_ENQ_WAKEUP))
		return;
	stat_inc(LATCFS_STAT_WAKEUP);
	if (tctx)
		vtime_woke(tctx);
	if (vtime_bound_lag(p, tctx, dom_of_task(p)))
		stat_inc(LATCFS_STAT_LAG_CLAMP);
}

void BPF_STRUCT_OPS(latcfs_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u64 slice = task_full_slice(p, tctx);
	u32 dom = dom_of_task(p);
	s64 lat_off = 0;

	stat_inc(LATCFS_STAT_ENQUEUE);
	if (!tctx) {
		scx_bpf_dsq_insert_vtime(p, fair_dsq(dom), slice, p->scx.dsq_vtime, enq_flags);
		goto queued;
	}
	/* preempted by a wakeup: it goes on after the wakee (preempt.bpf.h) */
	if (preempt_resume(p, tctx, enq_flags))
		return;
	bound_queued(tctx);
	/* a requeue (renice, affinity, cgroup move, cpu_release) comes biased */
	key_unbias(p, tctx);
	/*
	 * Latency nice (latency.bpf.h): a negative offset orders the task in
	 * the latency DSQ; a positive one bought a longer slice, in fair order.
	 */
	if (tctx->lat_offset < 0)
		lat_off = vtime_lat_offset(p, tctx);
	if ((enq_flags & SCX_ENQ_WAKEUP) &&
	    wakeup_preempt(p, tctx, vtime_key(p, tctx, lat_off), slice, enq_flags, dom))
		return;
	key_bias(p, tctx, lat_off);
	scx_bpf_dsq_insert_vtime(p, lat_off ? lat_dsq(dom) : fair_dsq(dom), slice,
				 p->scx.dsq_vtime, enq_flags);
queued:
	kick_idle_for(p);
}

/*
 * Should @prev, whose slice ran out but which is still runnable, keep @cpu,
 * as far as its own domain @dom is concerned?
 *
 * At dispatch time @prev is neither charged for the slice it just used (that
 * happens in stopping()) nor back in a DSQ (that happens after a successor
 * is picked). Pulling the queue's head unconditionally would therefore
 * alternate strictly between two tasks sharing a CPU, whatever their weights.
 * So compare @prev's up-to-date vtime with that of the first fair task that
 * may run here, and its key with the first latency task's, and keep @prev
 * while it is still first in line. Tasks that may not run here (pinned
 * elsewhere) are no competitors: comparing with them would hand the CPU to
 * a task behind @prev. If the first few queued may not run here, @prev
 * does not keep, and the consume that follows finds the first that may.
 */
static __always_inline bool prev_leads_queue(struct cpu_ctx *cctx, struct task_struct *prev,
					     struct task_ctx *tctx, s32 cpu, u32 dom)
{
	u64 key = 0;
	int found;

	/* queued tasks carry their key in dsq_vtime (vruntime.bpf.h) */
	found = first_for_cpu(cctx, fair_dsq(dom), cpu, &key);
	if (found < 0 || (found > 0 && time_before(key, vtime_key_current(prev, tctx, 0))))
		return false;
	return lat_prev_leads(cctx, prev, tctx, cpu, dom);
}

/*
 * How far another domain's task must be behind before a CPU with work of
 * its own takes it (domain.bpf.h): two slices of weighted time. Larger
 * keeps tasks on their LLC longer; the share holds either way, this only
 * bounds how far domains drift apart.
 */
static __always_inline u64 steal_margin(void)
{
	return 2 * slice_ns;
}

/*
 * The key of what this CPU would run from its own domain @dom's fair DSQ:
 * the first task that may run here; STEAL_NONE if none.
 */
static __always_inline u64 own_front(struct cpu_ctx *cctx, s32 cpu, u32 dom)
{
	u64 key;

	/* fair keys only: steal_pick()'s are */
	if (first_for_cpu(cctx, fair_dsq(dom), cpu, &key) > 0)
		return key;
	return STEAL_NONE;
}

void BPF_STRUCT_OPS(latcfs_dispatch, s32 cpu, struct task_struct *prev)
{
	struct task_ctx *tctx = NULL;
	struct cpu_ctx *cctx = this_cpu_ctx();
	u32 dom = llc_of(cpu);
	u64 steal = STEAL_NONE, sdsq = 0, front, now;
	bool keep = false, own_empty = false;

	if (test_error_after_ns && time_after(scx_bpf_now(), test_error_at))
		scx_bpf_error("test error, requested by --test-error-after-ms");
	if (!cctx)
		return;

	/* Tasks past the wait bound come first, whatever their vtime. */
	if (bound_dispatch(cctx, cpu, dom))
		return;

	/* Another domain's task, if one is owed much more (domain.bpf.h). */
	if (nr_llcs > 1) {
		now = scx_bpf_now();
		own_empty = !dom_nr_queued(dom);
		if (steal_due(cctx, own_empty, now))
			steal = steal_pick(cctx, cpu, dom, steal_margin(), &sdsq);
	}

	if (prev && (prev->scx.flags & SCX_TASK_QUEUED) && (tctx = lookup_task_ctx(prev)))
		keep = prev_leads_queue(cctx, prev, tctx, cpu, dom) &&
		       (steal == STEAL_NONE ||
			!time_before(steal + steal_margin(), vtime_key_current(prev, tctx, 0)));
	if (!keep) {
		if (steal != STEAL_NONE) {
			front = own_empty ? STEAL_NONE : own_front(cctx, cpu, dom);
			if ((front == STEAL_NONE || time_before(steal + steal_margin(), front)) &&
			    dom_consume(sdsq, LATCFS_STAT_STEAL))
				return;
		}
		if (lat_consume(dom, wakeup_gran_ns))
			return;
		if (nr_llcs > 1 && steal_any(cpu, dom))
			return;
	}
	/*
	 * Either @prev leads, or nothing queued may run here: let @prev go on
	 * with a fresh slice instead of bouncing it through the queue, charged
	 * first for the slice it used.
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		stat_inc(LATCFS_STAT_KEEP);
		if (tctx)
			vtime_recharge(prev, tctx);
		prev->scx.slice = task_full_slice(prev, tctx);
		slice_started(scx_bpf_now(), prev->scx.slice);
	}
}

void BPF_STRUCT_OPS(latcfs_running, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	key_unbias(p, tctx);
	bound_started(tctx);
	preempt_forget(tctx);
	lat_refresh(p, tctx);
	lat_uncount(tctx);
	vtime_start(p, tctx);
	slice_started(tctx->last_run_at, p->scx.slice);
}

void BPF_STRUCT_OPS(latcfs_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx) {
		preempt_stopped(p, tctx, runnable);
		vtime_stop(p, tctx);
	}
	slice_stopped();
}

/* Tasks may have started to wait since the running one's slice began. */
void BPF_STRUCT_OPS(latcfs_tick, struct task_struct *p)
{
	slice_tick();
}

void BPF_STRUCT_OPS(latcfs_quiescent, struct task_struct *p, u64 deq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		cg_quiescent(tctx, deq_flags);
}

void BPF_STRUCT_OPS(latcfs_enable, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	/* New: level with the reference. Back from another class: its old lag. */
	vtime_restore(p, tctx);
	/*
	 * A task that left a DSQ for another sched class took its key bias
	 * with it; the vtime above carries none.
	 */
	if (tctx)
		tctx->key_bias = 0;
}

void BPF_STRUCT_OPS(latcfs_disable, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	key_unbias(p, tctx);
	vtime_save(p, tctx);
	bound_started(tctx);
	preempt_forget(tctx);
	tctx->resumed = false;
	/* Off to another sched class: its cgroup no longer counts it. */
	tctx->cg_saved = false;
	cg_uncount(tctx);
}

/*
 * A higher sched class (RT, deadline, stop) took this CPU. Tasks already
 * in its local DSQ would wait behind it while other CPUs may be idle: hand
 * them back to ops.enqueue(), which queues them and wakes an idle CPU.
 */
void BPF_STRUCT_OPS(latcfs_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	stat_inc(LATCFS_STAT_CPU_RELEASE);
	scx_bpf_reenqueue_local();
}

s32 BPF_STRUCT_OPS(latcfs_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx, *parent;

	tctx = bpf_task_storage_get(&task_ctx_stor, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!tctx)
		return -ENOMEM;
	tctx->recent_used_cpu = -1;
	if (args->fork) {
		/* A child inherits its creator's per-task latency nice. */
		parent = lookup_task_ctx(bpf_get_current_task_btf());
		if (parent && parent->has_own) {
			tctx->own_nice = parent->own_nice;
			tctx->has_own = true;
		}
	} else {
		lat_carried(p, tctx);
	}
	tctx->cg_id = cg_task_id(args->cgroup);
	lat_resolve(p, tctx, args->cgroup);
	return 0;
}

void BPF_STRUCT_OPS(latcfs_exit_task, struct task_struct *p, struct scx_exit_task_args *args)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	lat_task_exit(p, tctx);
	cg_uncount(tctx);
}

void BPF_STRUCT_OPS(latcfs_cgroup_move, struct task_struct *p, struct cgroup *from,
		    struct cgroup *to)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	/*
	 * A queued task was dequeued around this call and is settled in
	 * runnable(); a sleeping one is counted in its new cgroup when it wakes.
	 */
	tctx->cg_id = cg_task_id(to);
	/* A per-task value travels with the task; otherwise the new cgroup's applies. */
	lat_resolve(p, tctx, to);
}

s32 BPF_STRUCT_OPS_SLEEPABLE(latcfs_cgroup_init, struct cgroup *cgrp,
			     struct scx_cgroup_init_args *args)
{
	return cg_init(cgrp, args->weight);
}

void BPF_STRUCT_OPS(latcfs_cgroup_exit, struct cgroup *cgrp)
{
	cg_exit(cgrp);
}

void BPF_STRUCT_OPS(latcfs_cgroup_set_weight, struct cgroup *cgrp, u32 weight)
{
	cg_set_weight(cgrp, weight);
}

/*
 * Comm rules apply from a task's first run after it execs a matching
 * program. The tracepoint does not hold the task's rq lock, so it only marks
 * the task's latency nice stale; running() looks it up again, under the
 * lock and with the usual precedence.
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(latcfs_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		tctx->lat_gen = ~0ULL;
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(latcfs_init)
{
	s32 ret = dom_init();

	test_error_at = scx_bpf_now() + test_error_after_ns;
	ret = ret ?: slice_init();
	ret = ret ?: preempt_init();
	return ret ?: idle_init();
}

/*
 * The kernel's exit dump (on an error or a watchdog stall, and with sysrq-D):
 * enough to tell why a task waited. See dump.bpf.h.
 */
void BPF_STRUCT_OPS(latcfs_dump, struct scx_dump_ctx *dctx)
{
	dump_sched();
}

void BPF_STRUCT_OPS(latcfs_dump_cpu, struct scx_dump_ctx *dctx, s32 cpu, bool idle)
{
	dump_cpu(cpu, idle);
}

void BPF_STRUCT_OPS(latcfs_dump_task, struct scx_dump_ctx *dctx, struct task_struct *p)
{
	dump_task(p);
}

void BPF_STRUCT_OPS(latcfs_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

SCX_OPS_DEFINE(latcfs_ops,
	       .select_cpu		= (void *)latcfs_select_cpu,
	       .runnable		= (void *)latcfs_runnable,
	       .enqueue			= (void *)latcfs_enqueue,
	       .dispatch		= (void *)latcfs_dispatch,
	       .running			= (void *)latcfs_running,
	       .stopping		= (void *)latcfs_stopping,
	       .tick			= (void *)latcfs_tick,
	       .quiescent		= (void *)latcfs_quiescent,
	       .enable			= (void *)latcfs_enable,
	       .disable			= (void *)latcfs_disable,
	       .init_task		= (void *)latcfs_init_task,
	       .exit_task		= (void *)latcfs_exit_task,
	       .cgroup_init		= (void *)latcfs_cgroup_init,
	       .cgroup_exit		= (void *)latcfs_cgroup_exit,
	       .cgroup_move		= (void *)latcfs_cgroup_move,
	       .cgroup_set_weight	= (void *)latcfs_cgroup_set_weight,
	       .cpu_release		= (void *)latcfs_cpu_release,
	       .dump			= (void *)latcfs_dump,
	       .dump_cpu		= (void *)latcfs_dump_cpu,
	       .dump_task		= (void *)latcfs_dump_task,
	       .init			= (void *)latcfs_init,
	       .exit			= (void *)latcfs_exit,
	       .name			= "latcfs");
