/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_latcfs: CFS-style weighted fairness with latency control, on sched_ext.
 *
 * Design overview
 * ---------------
 * Runnable tasks wait in one shared DSQ ordered by weighted virtual time
 * (vruntime.bpf.h): the task that has received the least CPU relative to its
 * weight runs next, so nice levels translate into CPU shares. A waking task's
 * sleeper credit is bounded by slice_lag_ns so that long sleepers cannot
 * monopolise a CPU after they wake.
 *
 * Life of a task:
 *
 *   wakeup ──> select_cpu: idle CPU found? ── yes ──> that CPU's local DSQ
 *                  │ no
 *                  v
 *   runnable (bound the sleeper credit) ──> enqueue ──> shared vtime DSQ
 *                                                          │
 *   dispatch (a CPU ran out of work) <── smallest vtime ───┘
 *      │ prev still runnable and its vtime still the smallest (or nothing
 *      │ else may run here): prev keeps its CPU with a fresh slice
 *      v
 *   running (note the start time) ──> stopping (charge weighted vtime)
 *
 * Correctness under the sched_ext rules is left to the core where it is
 * already right: tasks with restricted affinity sit in the shared DSQ until a
 * CPU they may use pulls them (scx_bpf_dsq_move_to_local() skips tasks that
 * cannot run on the calling CPU); migration-disabled and exiting tasks are
 * dispatched locally by the core because we do not set
 * SCX_OPS_ENQ_MIGRATION_DISABLED or SCX_OPS_ENQ_EXITING.
 */
#include <scx/common.bpf.h>
#include "intf.h"
#include "vruntime.bpf.h"

char _license[] SEC("license") = "GPL";

UEI_DEFINE(uei);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(key_size, sizeof(u32));
	__uint(value_size, sizeof(u64));
	__uint(max_entries, LATCFS_NR_STATS);
} stats SEC(".maps");

static __always_inline void stat_inc(u32 idx)
{
	u64 *cnt = bpf_map_lookup_elem(&stats, &idx);

	if (cnt)
		(*cnt)++;
}

s32 BPF_STRUCT_OPS(latcfs_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (is_idle) {
		/*
		 * The CPU is idle: nothing there to be fair against, so skip the
		 * shared queue and its lock.
		 */
		stat_inc(LATCFS_STAT_DIRECT);
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns, 0);
	}
	return cpu;
}

void BPF_STRUCT_OPS(latcfs_runnable, struct task_struct *p, u64 enq_flags)
{
	if (!(enq_flags & SCX_ENQ_WAKEUP))
		return;
	stat_inc(LATCFS_STAT_WAKEUP);
	if (vtime_bound_lag(p))
		stat_inc(LATCFS_STAT_LAG_CLAMP);
}

void BPF_STRUCT_OPS(latcfs_enqueue, struct task_struct *p, u64 enq_flags)
{
	stat_inc(LATCFS_STAT_ENQUEUE);
	scx_bpf_dsq_insert_vtime(p, LATCFS_SHARED_DSQ, slice_ns, p->scx.dsq_vtime, enq_flags);
}

/*
 * Should @prev, whose slice ran out but which is still runnable, keep its CPU?
 *
 * At dispatch time @prev is neither charged for the slice it just used (that
 * happens in stopping()) nor back in the shared DSQ (that happens after a
 * successor is picked). Pulling the queue's head unconditionally would
 * therefore alternate strictly between two tasks sharing a CPU, whatever
 * their weights. So compare @prev's up-to-date vtime with the head's, and
 * keep @prev while it is still the most under-served.
 */
static __always_inline bool prev_leads_queue(struct task_struct *prev)
{
	struct task_struct *head;
	struct task_ctx *tctx;

	if (!(prev->scx.flags & SCX_TASK_QUEUED) || !(tctx = lookup_task_ctx(prev)))
		return false;
	head = __COMPAT_scx_bpf_dsq_peek(LATCFS_SHARED_DSQ);
	return !head || !time_before(head->scx.dsq_vtime, vtime_current(prev, tctx));
}

void BPF_STRUCT_OPS(latcfs_dispatch, s32 cpu, struct task_struct *prev)
{
	bool keep = prev && prev_leads_queue(prev);

	if (!keep && scx_bpf_dsq_move_to_local(LATCFS_SHARED_DSQ, 0)) {
		stat_inc(LATCFS_STAT_SHARED);
		return;
	}
	/*
	 * Either @prev leads, or nothing queued may run here: let @prev go on
	 * with a fresh slice instead of bouncing it through the queue.
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED)) {
		stat_inc(LATCFS_STAT_KEEP);
		prev->scx.slice = slice_ns;
	}
}

void BPF_STRUCT_OPS(latcfs_running, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		vtime_start(p, tctx);
}

void BPF_STRUCT_OPS(latcfs_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (tctx)
		vtime_charge(p, tctx);
}

void BPF_STRUCT_OPS(latcfs_enable, struct task_struct *p)
{
	/* A new task starts level with the queue: no credit, no debt. */
	p->scx.dsq_vtime = vtime_now;
}

s32 BPF_STRUCT_OPS(latcfs_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	if (!bpf_task_storage_get(&task_ctx_stor, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE))
		return -ENOMEM;
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(latcfs_init)
{
	return scx_bpf_create_dsq(LATCFS_SHARED_DSQ, -1);
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
	       .enable			= (void *)latcfs_enable,
	       .init_task		= (void *)latcfs_init_task,
	       .init			= (void *)latcfs_init,
	       .exit			= (void *)latcfs_exit,
	       .name			= "latcfs");
