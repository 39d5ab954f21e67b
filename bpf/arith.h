/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The pure arithmetic of scx_latcfs: vtime scaling, the clamps on a task's
 * vtime, and the fixed-point steps of cgroup hweight.
 *
 * Nothing here touches a task, a map or a kernel type, so the same
 * functions are compiled for BPF (through the .bpf.h files) and for the
 * host, where the unit tests (src/arith.rs) drive them to their extremes.
 * Every result is defined for every input: no product overflows, no
 * division by zero, no shift past 63 bits.
 *
 * vtimes are u64 that may wrap; they are compared as in the kernel's
 * time_before(), by the sign of the difference, so any two vtimes less than
 * 2^63 apart order correctly.
 */
#ifndef __LATCFS_ARITH_H
#define __LATCFS_ARITH_H

#ifndef __bpf__
#include <stdint.h>
typedef uint64_t u64;
typedef int64_t s64;
typedef uint32_t u32;
#endif

/*
 * vt_mul_div() is the one function here with real branches, and it is
 * inlined in many places; in BPF it is a global function instead, which
 * the verifier checks once rather than at every call site.
 */
#ifdef __bpf__
#define LATCFS_ARITH_GLOBAL	__attribute__((noinline))
#else
#define LATCFS_ARITH_GLOBAL	static inline
#endif

/* Largest result of a scaling: saturating there keeps sums and compares sane. */
#define LATCFS_VT_SAT		(1ULL << 62)

static inline int vt_before(u64 a, u64 b)
{
	return (s64)(a - b) < 0;
}

/* Bit length of @v, 0..64, without a loop (the verifier prefers it). */
static inline u32 vt_bits(u64 v)
{
	u32 n = 0;

	if (v >> 32) { n += 32; v >>= 32; }
	if (v >> 16) { n += 16; v >>= 16; }
	if (v >> 8) { n += 8; v >>= 8; }
	if (v >> 4) { n += 4; v >>= 4; }
	if (v >> 2) { n += 2; v >>= 2; }
	if (v >> 1) { n += 1; v >>= 1; }
	return n + (u32)v;
}

/* @x * @num / @den for 0 < @den < 2^32 and @num < 2^32, saturating. */
static inline u64 vt_mul_div32(u64 x, u64 num, u64 den)
{
	u64 q = x / den, r = x % den, hi, lo;

	if (num && q > LATCFS_VT_SAT / num)
		return LATCFS_VT_SAT;
	hi = q * num;
	lo = r * num / den;	/* r < den < 2^32, num < 2^32: fits */
	return hi + lo > LATCFS_VT_SAT ? LATCFS_VT_SAT : hi + lo;
}

/*
 * @x * @num / @den, rounded down, without the u64 overflow of the plain
 * product: split @x by @den, and a @num of 2^32 or more by @den too.
 * Saturates at LATCFS_VT_SAT; a @den of 0 counts as 1. Exact while @den is
 * below 2^32 (the callers' weights, at most 10000 << 16, are by far); a
 * larger @den and @num both lose the low bits that bring @den below 2^32.
 */
LATCFS_ARITH_GLOBAL u64 vt_mul_div(u64 x, u64 num, u64 den)
{
	u32 s = vt_bits(den >> 32);
	u64 qn, rn, a;

	num >>= s;
	den >>= s;
	if (!den)
		den = 1;
	if (num <= 0xffffffffULL)
		return vt_mul_div32(x, num, den);
	/* x * num / den = x * (num / den) + x * (num % den) / den */
	qn = num / den;
	rn = num % den;
	if (x && qn > LATCFS_VT_SAT / x)
		return LATCFS_VT_SAT;
	a = x * qn + vt_mul_div32(x, rn, den);
	return a > LATCFS_VT_SAT ? LATCFS_VT_SAT : a;
}

/*
 * The weighted vtime that @delta_ns of wall time is worth at weight
 * @weight_fp, a weight in units of the nice 0 weight @dfl shifted left by
 * @shift: delta * dfl << shift / weight_fp. A weight of 0 counts as the
 * smallest there is.
 */
static inline u64 vt_scale_inv(u64 delta_ns, u64 dfl, u64 weight_fp, u32 shift)
{
	return vt_mul_div(delta_ns, dfl << (shift & 31), weight_fp ?: 1);
}

/*
 * Sleeper credit bound: @vtime, or @ref - @lag if it lags further behind
 * the reference than that. (@ref - @lag may wrap; vt_before() copes.)
 */
static inline u64 vt_floor(u64 vtime, u64 ref, u64 lag)
{
	u64 floor = ref - lag;

	return vt_before(vtime, floor) ? floor : vtime;
}

/* Lead cap: @vtime, or @ref + @lead if it runs further ahead than that. */
static inline u64 vt_cap(u64 vtime, u64 ref, u64 lead)
{
	u64 cap = ref + lead;

	return vt_before(cap, vtime) ? cap : vtime;
}

/* The reference moves forward only: to @cand if @cand is ahead of @ref. */
static inline u64 vt_advance(u64 ref, u64 cand)
{
	return vt_before(ref, cand) ? cand : ref;
}

/*
 * The vtime lag @vtime - @ref, bounded to [-@lag, +@lead]: what a task
 * leaving sched_ext keeps, to be restored against the reference it finds
 * when it comes back.
 */
static inline s64 vt_saved_lag(u64 vtime, u64 ref, u64 lag, u64 lead)
{
	s64 d = (s64)(vtime - ref);

	if (d < -(s64)lag)
		return -(s64)lag;
	if (d > (s64)lead)
		return (s64)lead;
	return d;
}

/*
 * One level of the hweight walk (cgroup.bpf.h): @hw scaled by the share
 * @w / @sum of a cgroup among its siblings, the share at most 1 (a @sum
 * below @w, possible while counts race, counts as @w), and never 0.
 */
static inline u64 hw_step(u64 hw, u64 w, s64 sum)
{
	u64 den = sum > (s64)w ? (u64)sum : w;

	hw = vt_mul_div(hw, w, den ?: 1);
	return hw ?: 1;
}

/*
 * A task's time awake (vruntime.bpf.h's awake_vt) after @w more weighted ns
 * of running: @awake + @w, at most @cap (a slice). Written so that the sum
 * cannot wrap.
 */
static inline u64 awake_after(u64 awake, u64 w, u64 cap)
{
	return w >= cap || awake >= cap - w ? cap : awake + w;
}

/*
 * A waking task's sleeper credit (vruntime.bpf.h): @credit scaled by
 * @n / (@n + @q), for @q tasks waiting for @n CPUs; all of it while none
 * wait, a half with one waiting per CPU.
 */
static inline u64 credit_share(u64 credit, u64 n, u64 q)
{
	if (!q)
		return credit;
	if (!n)
		n = 1;
	return vt_mul_div(credit, n, n + q < n ? ~0ULL : n + q);
}

/*
 * How long a running task is protected from wakeup preemption
 * (preempt.bpf.h), in weighted ns since its slice began: @gran, less what
 * the wakee's negative latency offset @lat_off buys beyond the running
 * task's own (@curr_off), never below 0. Only the difference counts, as in
 * the latency nice series' wakeup_latency_gran(): a wakee at -20 preempts a
 * latency nice 0 task at once, but two tasks at -20 that wake each other
 * (a messaging workload in a -20 cgroup) keep the whole protection, or
 * they preempt each other at every message. Positive offsets count as 0
 * here: they act through the keys.
 */
static inline u64 preempt_protect(u64 gran, s64 lat_off, s64 curr_off)
{
	u64 want = lat_off < 0 ? (u64)0 - (u64)lat_off : 0;
	u64 has = curr_off < 0 ? (u64)0 - (u64)curr_off : 0;
	u64 cut;

	if (want <= has)
		return gran;
	cut = want - has;
	return cut >= gran ? 0 : gran - cut;
}

/*
 * What a task preempted at @now for a wakee resumes with (preempt.bpf.h):
 * the rest of its slice, which ends at @slice_end, but at least the larger
 * of @gran and @floor. A slice end already past (the tick or timer had not
 * yet ended it) counts as nothing left.
 */
static inline u64 preempt_resume_slice(u64 slice_end, u64 now, u64 gran, u64 floor)
{
	u64 least = gran > floor ? gran : floor;

	if (vt_before(now, slice_end) && slice_end - now > least)
		return slice_end - now;
	return least;
}

/*
 * What a resumed task preempted again at @now resumes with: only what is
 * left of the resumed slice, which ends at @slice_end, and nothing when that
 * is no more than @slack. No floor: the first resumption's floor is the
 * only time added to a granted slice, so a chain of resumptions, however
 * many wakeups break it up, runs no longer in all than that first
 * resumption's slice.
 */
static inline u64 preempt_resume_again(u64 slice_end, u64 now, u64 slack)
{
	if (vt_before(now, slice_end) && slice_end - now > slack)
		return slice_end - now;
	return 0;
}

#endif /* __LATCFS_ARITH_H */
