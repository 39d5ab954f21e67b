// SPDX-License-Identifier: GPL-2.0
// bpf/arith.h compiled for the host, with each function exported under a
// latcfs_ name, so that the Rust unit tests (src/arith.rs) run the very
// code the BPF side runs. Built by build.rs into a static library.
#include "arith.h"

u64 latcfs_vt_mul_div(u64 x, u64 num, u64 den) { return vt_mul_div(x, num, den); }
u64 latcfs_vt_scale_inv(u64 d, u64 dfl, u64 w, u32 shift) { return vt_scale_inv(d, dfl, w, shift); }
u64 latcfs_vt_floor(u64 v, u64 ref, u64 lag) { return vt_floor(v, ref, lag); }
u64 latcfs_vt_cap(u64 v, u64 ref, u64 lead) { return vt_cap(v, ref, lead); }
u64 latcfs_vt_advance(u64 ref, u64 cand) { return vt_advance(ref, cand); }
s64 latcfs_vt_saved_lag(u64 v, u64 ref, u64 lag, u64 lead) { return vt_saved_lag(v, ref, lag, lead); }
u64 latcfs_hw_step(u64 hw, u64 w, s64 sum) { return hw_step(hw, w, sum); }
int latcfs_vt_before(u64 a, u64 b) { return vt_before(a, b); }
u64 latcfs_awake_after(u64 awake, u64 w, u64 cap) { return awake_after(awake, w, cap); }
u64 latcfs_preempt_protect(u64 gran, s64 lat_off, s64 curr) { return preempt_protect(gran, lat_off, curr); }
u64 latcfs_preempt_resume_slice(u64 end, u64 now, u64 gran, u64 floor) { return preempt_resume_slice(end, now, gran, floor); }
u64 latcfs_credit_share(u64 credit, u64 n, u64 q) { return credit_share(credit, n, q); }
u64 latcfs_preempt_resume_again(u64 end, u64 now, u64 slack) { return preempt_resume_again(end, now, slack); }
