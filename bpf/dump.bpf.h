/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What scx_latcfs adds to the kernel's exit dump (ops.dump, dump_cpu,
 * dump_task): printed by the kernel when the scheduler is ejected, on an
 * error or a watchdog stall, and on sysrq-D. The loader prints the dump with
 * the exit reason.
 *
 * It says why a task might be waiting: each LLC's (domain.bpf.h) reference
 * vtime and its DSQs' depths and heads (how far the head is from the
 * reference, how long it has waited), each CPU's current vtime, and each
 * runnable task's vtime relative to its domain's reference, its wait,
 * latency offset, weight and cgroup. Times are in µs; vtimes relative to a
 * reference in weighted µs.
 *
 * Limits: the kernel's dump buffer is bounded (and truncates what does not
 * fit), so only the first DUMP_MAX_DOMS LLCs are described; the heads'
 * fields are read without the DSQ lock, so a dump taken while tasks move
 * can show a head that has just left.
 */
#ifndef __LATCFS_DUMP_BPF_H
#define __LATCFS_DUMP_BPF_H

#include "task.bpf.h"
#include "vruntime.bpf.h"
#include "bound.bpf.h"
#include "latency.bpf.h"

/* How many LLCs the dump describes, at most. */
#define DUMP_MAX_DOMS	64

/* @vtime relative to domain @dom's reference, in weighted µs. */
static __always_inline s64 dump_rel_us(u64 vtime, u32 dom)
{
	return (s64)(vtime - dom_ref(dom)) / 1000;
}

static void dump_dsq(u32 dom, const char *name, u64 dsq_id, u64 now)
{
	struct task_struct *head = dsq_head(dsq_id);

	if (!head) {
		scx_bpf_dump("latcfs: llc %u %s dsq: %d queued\n", dom, name,
			     scx_bpf_dsq_nr_queued(dsq_id));
		return;
	}
	scx_bpf_dump("latcfs: llc %u %s dsq: %d queued, head %s[%d] key %lldus waited %lluus\n",
		     dom, name, scx_bpf_dsq_nr_queued(dsq_id), head->comm, head->pid,
		     dump_rel_us(head->scx.dsq_vtime, dom), bound_waited(head, now) / 1000);
}

static void dump_sched(void)
{
	u64 now = scx_bpf_now();
	u32 d, n = nr_llcs < DUMP_MAX_DOMS ? nr_llcs : DUMP_MAX_DOMS;

	scx_bpf_dump("latcfs: nr_lat_tasks %llu max_wait %llums llcs %u vtime_ref %llu\n",
		     READ_ONCE(nr_lat_tasks), max_wait_ns / 1000000, nr_llcs, vtime_ref());
	bpf_for(d, 0, n) {
		scx_bpf_dump("latcfs: llc %u vtime_ref %lldus from the machine's\n", d,
			     (s64)(dom_ref(d) - vtime_ref()) / 1000);
		dump_dsq(d, "shared", fair_dsq(d), now);
		dump_dsq(d, "latency", lat_dsq(d), now);
	}
}

static void dump_cpu(s32 cpu, bool idle)
{
	struct cpu_ctx *cctx = cpu_ctx_of(cpu);

	if (idle || !cctx)
		return;
	if (cctx->curr_valid)
		scx_bpf_dump("latcfs: cpu %d curr vtime %lldus, last wait-bound walk %lluus ago\n",
			     cpu, dump_rel_us(cctx->curr_vtime, llc_of(cpu)),
			     (scx_bpf_now() - cctx->rescue_walk_at) / 1000);
	else
		scx_bpf_dump("latcfs: cpu %d runs no task of ours, last wait-bound walk %lluus ago\n",
			     cpu, (scx_bpf_now() - cctx->rescue_walk_at) / 1000);
}

static void dump_task(struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	/* the task's own weight: the dump must not recompute cgroup shares */
	scx_bpf_dump("latcfs: vtime %lldus waited %lluus lat_offset %lldus weight %u cgroup %llu\n",
		     dump_rel_us(p->scx.dsq_vtime, dom_of_task(p)),
		     bound_waited(p, scx_bpf_now()) / 1000,
		     tctx->lat_offset / 1000, p->scx.weight, tctx->cg_id);
}

#endif /* __LATCFS_DUMP_BPF_H */
