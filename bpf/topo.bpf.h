/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The machine's shape, as scx_latcfs sees it: the LLC and NUMA node of each
 * CPU, handed over by the loader from scx_utils' Topology before the
 * program loads (frozen constants). LLC ids and node ids are dense, 0 to
 * nr_llcs - 1 and 0 to nr_nodes - 1; nodes without CPUs are left out.
 *
 * Idle selection (idle.bpf.h) scans by LLC and node; the queues
 * (domain.bpf.h) are one pair per LLC.
 *
 * Limits: LATCFS_MAX_CPUS CPU ids, LATCFS_MAX_LLCS LLCs and
 * LATCFS_MAX_NODES nodes (intf.h); the loader refuses bigger machines
 * with a one-line error.
 */
#ifndef __LATCFS_TOPO_BPF_H
#define __LATCFS_TOPO_BPF_H

#include <scx/common.bpf.h>
#include "intf.h"

/* LLC id of each CPU, from the loader's topology (scx_utils). */
const volatile u32 cpu_llc_id[LATCFS_MAX_CPUS];
/* number of LLCs in cpu_llc_id */
const volatile u32 nr_llcs = 1;
/* NUMA node of each CPU, from the loader's topology */
const volatile u32 cpu_node_id[LATCFS_MAX_CPUS];
/* number of nodes (with CPUs) in cpu_node_id */
const volatile u32 nr_nodes = 1;
/*
 * The CPUs of each LLC, from the loader: LLC l's are llc_cpus[llc_first[l]]
 * to llc_cpus[llc_first[l] + llc_nr_cpus[l] - 1], so that a walk over one
 * LLC's CPUs costs its size, not the machine's. CPU ids the topology does
 * not list (possible but never present, or offline when the loader read
 * it) are in no list; a CPU that comes online restarts the scheduler
 * (no ops.cpu_online), and the loader reads the topology again.
 */
const volatile u32 llc_cpus[LATCFS_MAX_CPUS];
const volatile u32 llc_first[LATCFS_MAX_LLCS];
const volatile u32 llc_nr_cpus[LATCFS_MAX_LLCS];

static __always_inline bool valid_cpu(s32 cpu)
{
	return cpu >= 0 && cpu < LATCFS_MAX_CPUS;
}

/* LLC of @cpu; ARRAY_ELEM_PTR() keeps the verifier sure of the bound. */
static __always_inline u32 llc_of(s32 cpu)
{
	const volatile u32 *llc = ARRAY_ELEM_PTR(cpu_llc_id, cpu, LATCFS_MAX_CPUS);

	return llc ? *llc : 0;
}

static __always_inline bool share_llc(s32 a, s32 b)
{
	return valid_cpu(a) && valid_cpu(b) && llc_of(a) == llc_of(b);
}

/* node of @cpu */
static __always_inline u32 node_of(s32 cpu)
{
	const volatile u32 *node = ARRAY_ELEM_PTR(cpu_node_id, cpu, LATCFS_MAX_CPUS);

	return node ? *node : 0;
}

/* How many CPUs LLC @llc has. */
static __always_inline u32 llc_size(u32 llc)
{
	const volatile u32 *nr = ARRAY_ELEM_PTR(llc_nr_cpus, llc, LATCFS_MAX_LLCS);

	return nr ? *nr : 0;
}

/* The @i-th CPU of LLC @llc (i < llc_size(llc)), or -1. */
static __always_inline s32 llc_cpu(u32 llc, u32 i)
{
	const volatile u32 *first = ARRAY_ELEM_PTR(llc_first, llc, LATCFS_MAX_LLCS), *cpu;

	if (!first)
		return -1;
	cpu = ARRAY_ELEM_PTR(llc_cpus, *first + i, LATCFS_MAX_CPUS);
	return cpu ? *cpu : -1;
}

#endif /* __LATCFS_TOPO_BPF_H */
