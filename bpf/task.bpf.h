/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Per-task state of scx_latcfs (struct task_ctx, in intf.h so that
 * `scx_latcfs latency-nice get` can read it), kept in BPF task storage.
 * Created in ops.init_task() for every task, freed with the task.
 */
#ifndef __LATCFS_TASK_BPF_H
#define __LATCFS_TASK_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctx_stor SEC(".maps");

static __always_inline struct task_ctx *lookup_task_ctx(const struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctx_stor, (struct task_struct *)p, 0, 0);
}

#endif /* __LATCFS_TASK_BPF_H */
