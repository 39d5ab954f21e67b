//! Host-side tests of the BPF side's arithmetic (bpf/arith.h), compiled
//! for the host by build.rs: vtime scaling, the vtime clamps and the hweight
//! step, at the extremes where the old code overflowed.

#[cfg(test)]
mod tests {
    #[link(name = "latcfs_arith", kind = "static")]
    extern "C" {
        fn latcfs_vt_mul_div(x: u64, num: u64, den: u64) -> u64;
        fn latcfs_vt_scale_inv(d: u64, dfl: u64, w: u64, shift: u32) -> u64;
        fn latcfs_vt_floor(v: u64, r: u64, lag: u64) -> u64;
        fn latcfs_vt_cap(v: u64, r: u64, lead: u64) -> u64;
        fn latcfs_vt_advance(r: u64, cand: u64) -> u64;
        fn latcfs_vt_saved_lag(v: u64, r: u64, lag: u64, lead: u64) -> i64;
        fn latcfs_hw_step(hw: u64, w: u64, sum: i64) -> u64;
        fn latcfs_vt_before(a: u64, b: u64) -> i32;
        fn latcfs_awake_after(awake: u64, w: u64, cap: u64) -> u64;
        fn latcfs_preempt_protect(gran: u64, lat_off: i64, curr_off: i64) -> u64;
        fn latcfs_credit_share(credit: u64, n: u64, q: u64) -> u64;
        fn latcfs_preempt_resume_slice(end: u64, now: u64, gran: u64, floor: u64) -> u64;
        fn latcfs_preempt_resume_again(end: u64, now: u64, slack: u64) -> u64;
    }

    const SAT: u64 = 1 << 62;
    const SHIFT: u32 = 16; // CG_HW_SHIFT
    const DFL: u64 = 100; // LATCFS_WEIGHT_DFL

    fn mul_div(x: u64, n: u64, d: u64) -> u64 {
        unsafe { latcfs_vt_mul_div(x, n, d) }
    }
    fn scale(d: u64, w: u64, shift: u32) -> u64 {
        unsafe { latcfs_vt_scale_inv(d, DFL, w, shift) }
    }

    #[test]
    fn mul_div_is_exact_where_the_product_overflows() {
        for &(x, n, d) in &[
            (0u64, 5u64, 7u64),
            (1, 1, 1),
            (123_456_789, 100 << 16, 1 << 16),
            (u64::MAX / 3, 3, 7),
            (1 << 50, 6_553_600, 655_360_000),
            (2_800_000_000_000, 100 << 16, 100 << 16),
        ] {
            let exact = (x as u128 * n as u128 / d as u128).min(SAT as u128) as u64;
            assert_eq!(mul_div(x, n, d), exact, "{x} * {n} / {d}");
        }
        // den 0 counts as 1; saturation instead of wrapping
        assert_eq!(mul_div(7, 3, 0), 21);
        assert_eq!(mul_div(u64::MAX, u32::MAX as u64, 1), SAT);
    }

    #[test]
    fn mul_div_handles_one_operand_past_32_bits() {
        // The old version shifted both by 32 bits whenever either was that
        // large: 1000 * 2^40 / 100 came out as 1000 * 256.
        for &(x, n, d) in &[
            (1000u64, 1u64 << 40, 100u64),
            (3_000_000, (1 << 33) + 12_345, 7),
            (1 << 20, u64::MAX / 5, 1 << 31),
            (12_345, 100, 1 << 40),
            (1 << 40, 1 << 36, 1 << 40),
        ] {
            let exact = (x as u128 * n as u128 / d as u128).min(SAT as u128) as u64;
            let got = mul_div(x, n, d);
            // exact while den < 2^32; within 1 ppm beyond
            let err = (got as i128 - exact as i128).unsigned_abs();
            assert!(
                err <= exact as u128 / 1_000_000 + 1,
                "{x} * {n} / {d} = {exact}, got {got}"
            );
            if d < 1 << 32 {
                assert_eq!(got, exact, "{x} * {n} / {d}");
            }
        }
        assert_eq!(mul_div(5, u64::MAX, u64::MAX), 5);
        assert_eq!(mul_div(u64::MAX, u64::MAX, 1), SAT);
        assert_eq!(mul_div(0, u64::MAX, 1), 0);
    }

    #[test]
    fn cgroup_charge_does_not_overflow_after_47_minutes() {
        // The old (delta * 100) << 16 wrapped once delta reached 2.8e12 ns.
        let eff = 100u64 << SHIFT; // an effective weight of 100
        for delta in [2_800_000_000_000u64, 3_000_000_000_000, 1 << 60, u64::MAX] {
            let want = (delta as u128).min(SAT as u128) as u64;
            assert_eq!(scale(delta, eff, SHIFT), want, "delta {delta}");
        }
        // the nice path: weight 1 (nice 19) and 10000 (the top of scx's range)
        assert_eq!(scale(3_000_000, 1, 0), 300_000_000);
        assert_eq!(scale(3_000_000, 10_000, 0), 30_000);
        assert_eq!(scale(u64::MAX, 1, 0), SAT);
        // weight 0 is the smallest weight, not a division by zero
        assert_eq!(scale(1000, 0, 0), 100_000);
        // the smallest effective weight the hweight walk returns (1)
        assert_eq!(scale(1_000_000, 1, SHIFT), 1_000_000 * (100 << SHIFT));
    }

    #[test]
    fn clamps_hold_across_the_wrap() {
        unsafe {
            // sleeper credit: at most lag behind the reference
            assert_eq!(latcfs_vt_floor(0, 10_000, 3_000), 7_000);
            assert_eq!(latcfs_vt_floor(8_000, 10_000, 3_000), 8_000);
            // a reference near 0: ref - lag wraps, the order still holds
            assert_eq!(
                latcfs_vt_floor(u64::MAX - 5_000, 1_000, 3_000),
                u64::MAX - 1_999
            );
            assert_eq!(latcfs_vt_floor(500, 1_000, 3_000), 500);
            // lead cap
            assert_eq!(latcfs_vt_cap(1 << 40, 0, 100_000_000), 100_000_000);
            assert_eq!(latcfs_vt_cap(5, 0, 100), 5);
            assert_eq!(latcfs_vt_cap(5, u64::MAX - 50, 100), 5); // wraps: 5 is before MAX+50
            assert_eq!(latcfs_vt_cap(500, u64::MAX - 50, 100), 49);
            // ordering by the sign of the difference
            assert_eq!(latcfs_vt_before(u64::MAX, 0), 1);
            assert_eq!(latcfs_vt_before(0, u64::MAX), 0);
        }
    }

    #[test]
    fn the_reference_only_moves_forward() {
        unsafe {
            assert_eq!(latcfs_vt_advance(100, 50), 100);
            assert_eq!(latcfs_vt_advance(100, 150), 150);
            assert_eq!(latcfs_vt_advance(u64::MAX - 5, 3), 3); // forward across the wrap
            assert_eq!(latcfs_vt_advance(3, u64::MAX - 5), 3);
        }
    }

    #[test]
    fn saved_lag_is_bounded_both_ways() {
        unsafe {
            assert_eq!(latcfs_vt_saved_lag(1_000, 1_000, 3, 100), 0);
            assert_eq!(latcfs_vt_saved_lag(0, 1_000_000, 3_000, 100_000), -3_000);
            assert_eq!(latcfs_vt_saved_lag(u64::MAX, 0, 3_000, 100_000), -1);
            assert_eq!(latcfs_vt_saved_lag(1 << 62, 0, 3_000, 100_000), 100_000);
            assert_eq!(latcfs_vt_saved_lag(2, u64::MAX, 3_000, 100_000), 3);
        }
    }

    #[test]
    fn hweight_steps_stay_in_range() {
        let one = 1u64 << SHIFT;
        unsafe {
            assert_eq!(latcfs_hw_step(one, 100, 200), one / 2);
            // a sum below the weight (counts racing) is a share of 1, not more
            assert_eq!(latcfs_hw_step(one, 100, 50), one);
            assert_eq!(latcfs_hw_step(one, 100, -7), one);
            // never 0, however small the share
            assert_eq!(latcfs_hw_step(1, 1, 10_000), 1);
            // weight 10000 over the largest sum 16384 cgroups could reach
            let sum = 16_384i64 * 10_000;
            assert_eq!(
                latcfs_hw_step(one * 10_000, 10_000, sum),
                one * 10_000 / 16_384
            );
            // 16 levels of 1/2: still above 0
            let mut hw = one;
            for _ in 0..16 {
                hw = latcfs_hw_step(hw, 100, 200);
            }
            assert_eq!(hw, 1);
        }
    }

    #[test]
    fn awake_time_is_capped_without_wrapping() {
        unsafe {
            assert_eq!(latcfs_awake_after(0, 0, 3_000_000), 0);
            assert_eq!(latcfs_awake_after(1_000, 2_000, 3_000_000), 3_000);
            assert_eq!(
                latcfs_awake_after(2_000_000, 2_000_000, 3_000_000),
                3_000_000
            );
            // a sum that would wrap still caps
            assert_eq!(latcfs_awake_after(u64::MAX, 5, 3_000_000), 3_000_000);
            assert_eq!(latcfs_awake_after(5, u64::MAX, 3_000_000), 3_000_000);
        }
    }

    #[test]
    fn preemption_protection_shrinks_with_latency_offset() {
        let gran = 1_000_000;
        unsafe {
            // latency nice 0 and positive offsets wait out the granularity
            assert_eq!(latcfs_preempt_protect(gran, 0, 0), gran);
            assert_eq!(latcfs_preempt_protect(gran, 5_700_000, 0), gran);
            // a negative offset buys it down, to 0 and no further
            assert_eq!(latcfs_preempt_protect(gran, -300_000, 0), 700_000);
            assert_eq!(latcfs_preempt_protect(gran, -6_000_000, 0), 0);
            assert_eq!(latcfs_preempt_protect(gran, i64::MIN, 0), 0);
            assert_eq!(latcfs_preempt_protect(0, -1, 0), 0);
            // a running task at a positive latency nice keeps its protection
            assert_eq!(latcfs_preempt_protect(gran, -300_000, 5_700_000), 700_000);
        }
    }

    #[test]
    fn preemption_protection_counts_only_the_offset_difference() {
        let gran = 1_000_000;
        unsafe {
            // two -20 tasks waking each other keep the whole protection
            assert_eq!(latcfs_preempt_protect(gran, -6_000_000, -6_000_000), gran);
            // a less sensitive wakee buys nothing from a -20 task
            assert_eq!(latcfs_preempt_protect(gran, -300_000, -6_000_000), gran);
            assert_eq!(latcfs_preempt_protect(gran, 0, -6_000_000), gran);
            // a more sensitive one buys the difference
            assert_eq!(
                latcfs_preempt_protect(gran, -6_000_000, -5_700_000),
                700_000
            );
            assert_eq!(latcfs_preempt_protect(gran, -6_000_000, -3_000_000), 0);
            assert_eq!(latcfs_preempt_protect(gran, i64::MIN, i64::MIN), gran);
            assert_eq!(latcfs_preempt_protect(gran, i64::MIN, -1), 0);
        }
    }

    #[test]
    fn a_preempted_task_resumes_with_the_rest_of_its_slice_or_a_floor() {
        let (gran, floor) = (1_000_000, 200_000);
        unsafe {
            // the rest of the slice, when that is more than the floor
            assert_eq!(
                latcfs_preempt_resume_slice(10_000_000, 7_000_000, gran, floor),
                3_000_000
            );
            // little or nothing left, or the end already past: the floor
            assert_eq!(
                latcfs_preempt_resume_slice(10_000_000, 9_900_000, gran, floor),
                gran
            );
            assert_eq!(
                latcfs_preempt_resume_slice(10_000_000, 12_000_000, gran, floor),
                gran
            );
            assert_eq!(latcfs_preempt_resume_slice(0, 5, gran, floor), gran);
            // a granularity of 0 still leaves the fixed floor
            assert_eq!(latcfs_preempt_resume_slice(10, 20, 0, floor), floor);
            // across the u64 wrap
            assert_eq!(
                latcfs_preempt_resume_slice(2_000_000, u64::MAX - 999_999, gran, floor),
                3_000_000
            );
        }
    }

    #[test]
    fn a_resumed_task_preempted_again_keeps_only_what_is_left_and_no_floor() {
        let slack = 50_000;
        unsafe {
            assert_eq!(
                latcfs_preempt_resume_again(10_000_000, 7_000_000, slack),
                3_000_000
            );
            // within the slack of the end, at it, or past it: nothing
            assert_eq!(latcfs_preempt_resume_again(10_000_000, 9_960_000, slack), 0);
            assert_eq!(
                latcfs_preempt_resume_again(10_000_000, 10_000_000, slack),
                0
            );
            assert_eq!(
                latcfs_preempt_resume_again(10_000_000, 12_000_000, slack),
                0
            );
            // no slice end noted
            assert_eq!(latcfs_preempt_resume_again(0, 5, slack), 0);
            // across the u64 wrap
            assert_eq!(
                latcfs_preempt_resume_again(2_000_000, u64::MAX - 999_999, slack),
                3_000_000
            );
            // A chain of them never adds up to more than the first: a
            // resumption with 1 ms, preempted after every 300 us of it by a
            // wakee that runs 500 us.
            let (mut end, mut now, mut ran) = (1_000_000u64, 0u64, 0u64);
            loop {
                let run = 300_000u64.min(end - now);
                now += run;
                ran += run;
                let left = latcfs_preempt_resume_again(end, now, slack);
                if left == 0 {
                    break;
                }
                now += 500_000;
                end = now + left;
            }
            assert!(ran <= 1_000_000, "{ran}");
        }
    }

    #[test]
    fn sleeper_credit_shrinks_with_the_queue() {
        let c = 3_000_000;
        unsafe {
            assert_eq!(latcfs_credit_share(c, 2, 0), c);
            assert_eq!(latcfs_credit_share(c, 2, 2), c / 2);
            assert_eq!(latcfs_credit_share(c, 2, 78), c / 40);
            assert_eq!(latcfs_credit_share(0, 2, 5), 0);
            // no CPU count counts as one; a huge queue leaves nearly nothing
            assert_eq!(latcfs_credit_share(c, 0, 1), c / 2);
            assert_eq!(latcfs_credit_share(c, 1024, u64::MAX), 0);
            // a credit past 2^32 does not overflow the product
            assert_eq!(latcfs_credit_share(1 << 40, 3, 1), 3 << 38);
        }
    }
}
