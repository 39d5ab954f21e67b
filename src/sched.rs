//! Loading, attaching and running the BPF scheduler.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use libbpf_rs::skel::Skel as _;
use libbpf_rs::{MapCore, MapFlags, OpenObject};
use log::{debug, info, warn};
use scx_utils::{
    scx_ops_attach, scx_ops_load, scx_ops_open, uei_exited, uei_report, Topology, UserExitInfo,
};

use crate::bpf_intf;
use crate::bpf_skel::{BpfSkel, BpfSkelBuilder};
use crate::cli::Opts;
use crate::latency::{Key, PinGuard, RuleMaps};
use crate::stats::{Counters, Feed, NAMES};

/// How often the run loop looks at the exit state and the stop flag (it
/// answers stats requests in between).
const POLL: Duration = Duration::from_millis(100);

/// How often the run loop looks for cgroups the BPF side could not track
/// and for rules whose process or cgroup is gone.
const HOUSEKEEPING: Duration = Duration::from_secs(1);

/// Hand the CPU topology (LLC and NUMA node of each CPU, SMT) to the BPF
/// side, refusing machines beyond what its maps hold (intf.h).
fn set_topology(rodata: &mut crate::bpf_skel::types::rodata) -> Result<()> {
    let topo = Topology::new().context("reading the CPU topology")?;
    // Dense LLC and node ids in the order scx_utils lists them; nodes
    // without CPUs (memory-only, CXL) play no part in CPU selection.
    let llcs: Vec<usize> = topo.all_llcs.keys().copied().collect();
    let mut nodes: Vec<usize> = topo.all_cpus.values().map(|c| c.node_id).collect();
    nodes.sort_unstable();
    nodes.dedup();
    check_topology_size(topo.all_cpus.keys().copied().max(), llcs.len(), nodes.len())?;
    // Every id is below LATCFS_MAX_CPUS, the length of these arrays.
    let mut cpu_llc = Vec::with_capacity(topo.all_cpus.len());
    for (id, cpu) in &topo.all_cpus {
        let llc = llcs.iter().position(|l| *l == cpu.llc_id).unwrap_or(0);
        let node = nodes.iter().position(|n| *n == cpu.node_id).unwrap_or(0);
        rodata.cpu_llc_id[*id] = llc as u32;
        rodata.cpu_node_id[*id] = node as u32;
        cpu_llc.push((*id, llc));
    }
    let lists = llc_cpu_lists(&cpu_llc, llcs.len().max(1));
    rodata.llc_cpus[..lists.cpus.len()].copy_from_slice(&lists.cpus);
    rodata.llc_first[..lists.first.len()].copy_from_slice(&lists.first);
    rodata.llc_nr_cpus[..lists.nr.len()].copy_from_slice(&lists.nr);
    rodata.nr_llcs = llcs.len().max(1) as u32;
    rodata.nr_nodes = nodes.len().max(1) as u32;
    rodata.node_step = node_step(llcs.len(), nodes.len());
    rodata.smt_enabled = topo.smt_enabled;
    info!(
        "topology: {} CPUs, {} LLCs, NUMA nodes: {}, SMT {}",
        topo.all_cpus.len(),
        llcs.len(),
        nodes.len().max(1),
        if topo.smt_enabled { "on" } else { "off" }
    );
    Ok(())
}

/// Each LLC's CPUs as the BPF side walks them (bpf/topo.bpf.h): the CPU
/// ids grouped by LLC, in id order within each, and where each LLC's run
/// starts and how long it is.
#[derive(Debug, PartialEq, Eq)]
struct LlcCpuLists {
    cpus: Vec<u32>,
    first: Vec<u32>,
    nr: Vec<u32>,
}

/// The lists for `cpu_llc`, (CPU id, dense LLC index) pairs, with LLCs
/// 0 to `nr_llcs` - 1.
fn llc_cpu_lists(cpu_llc: &[(usize, usize)], nr_llcs: usize) -> LlcCpuLists {
    let mut sorted: Vec<(usize, usize)> = cpu_llc.iter().map(|&(cpu, llc)| (llc, cpu)).collect();
    sorted.sort_unstable();
    let mut lists = LlcCpuLists {
        cpus: sorted.iter().map(|&(_, cpu)| cpu as u32).collect(),
        first: vec![0; nr_llcs],
        nr: vec![0; nr_llcs],
    };
    for (i, &(llc, _)) in sorted.iter().enumerate() {
        if llc < nr_llcs {
            if lists.nr[llc] == 0 {
                lists.first[llc] = i as u32;
            }
            lists.nr[llc] += 1;
        }
    }
    lists
}

/// Whether idle selection should scan the target's NUMA node between its
/// LLC and the whole machine: only when there is more than one node and
/// some node holds more than one LLC (an LLC never spans nodes). Elsewhere
/// the node is one LLC or the whole machine, and its scan repeats another.
fn node_step(nr_llcs: usize, nr_nodes: usize) -> bool {
    nr_nodes > 1 && nr_llcs > nr_nodes
}

/// Refuse a machine whose highest CPU id, LLCs or NUMA nodes exceed what
/// the BPF side's maps hold (LATCFS_MAX_* in intf.h), naming the limit.
fn check_topology_size(max_cpu_id: Option<usize>, nr_llcs: usize, nr_nodes: usize) -> Result<()> {
    let max_cpus = bpf_intf::latcfs_consts_LATCFS_MAX_CPUS as usize;
    let max_llcs = bpf_intf::latcfs_consts_LATCFS_MAX_LLCS as usize;
    let max_nodes = bpf_intf::latcfs_consts_LATCFS_MAX_NODES as usize;
    if let Some(id) = max_cpu_id.filter(|id| *id >= max_cpus) {
        bail!("CPU {id}: scx_latcfs supports CPU ids below {max_cpus}");
    }
    if nr_llcs > max_llcs {
        bail!("{nr_llcs} LLCs: scx_latcfs supports at most {max_llcs}");
    }
    if nr_nodes > max_nodes {
        bail!("{nr_nodes} NUMA nodes: scx_latcfs supports at most {max_nodes}");
    }
    Ok(())
}

/// At -v, the verifier's instruction count of each loaded program
/// (bpf_prog_info.verified_insns), as "verifier: NAME COUNT": what
/// tests/verifier-baseline records per kernel.
fn log_verified_insns(obj: &libbpf_rs::Object) {
    use std::os::fd::{AsFd, AsRawFd};

    if !log::log_enabled!(log::Level::Debug) {
        return;
    }
    for prog in obj.progs() {
        let mut info = libbpf_rs::libbpf_sys::bpf_prog_info::default();
        let mut len = std::mem::size_of_val(&info) as u32;
        // SAFETY: the kernel writes at most `len` bytes into `info`, a
        // bpf_prog_info of that size, and keeps no reference to it.
        let ret = unsafe {
            libbpf_rs::libbpf_sys::bpf_prog_get_info_by_fd(
                prog.as_fd().as_raw_fd(),
                &mut info,
                &mut len,
            )
        };
        let name = prog.name().to_string_lossy();
        match ret {
            0 => debug!("verifier: {name} {}", info.verified_insns),
            e => debug!("verifier: {name}: no program info (error {e})"),
        }
    }
}

/// Why an attach failed: the kernel's exit info when the BPF side said why
/// (an error in ops.init() or in a task's or cgroup's init), and a plain
/// sentence when another scheduler took sched_ext first.
fn attach_error(e: anyhow::Error, why: Option<anyhow::Error>) -> anyhow::Error {
    if let Some(why) = why {
        return e.context(format!("{why:#}"));
    }
    // Another instance (or scheduler) won a race past our preflight check.
    match crate::preflight::check_sched_ext(std::path::Path::new(crate::preflight::SCHED_EXT_SYSFS))
    {
        Err(other) => other,
        Ok(()) => e,
    }
}

pub struct Scheduler<'a> {
    skel: BpfSkel<'a>,
    /// The struct_ops link: dropping it detaches the scheduler.
    link: Option<libbpf_rs::Link>,
    /// The maps `scx_latcfs latency-nice` reaches us through; unpinned on drop.
    _pins: PinGuard,
}

impl<'a> Scheduler<'a> {
    /// Open, configure, load (verify) and attach the BPF scheduler.
    /// `carry` holds the per-task values tasks inherited at fork under a
    /// previous scheduler (thread id, latency nice), empty at first start.
    pub fn init(
        opts: &Opts,
        rules: &[(Key, i32)],
        carry: &[(u32, i32)],
        open_object: &'a mut MaybeUninit<OpenObject>,
    ) -> Result<Self> {
        let mut builder = BpfSkelBuilder::default();
        builder.obj_builder.debug(opts.verbose);
        let mut skel = scx_ops_open!(
            builder,
            open_object,
            latcfs_ops,
            None::<libbpf_rs::libbpf_sys::bpf_object_open_opts>
        )?;

        let t = opts.tunables();
        let rodata = skel
            .maps
            .rodata_data
            .as_mut()
            .context("BPF object has no read-only data section")?;
        rodata.slice_ns = t.slice_ns;
        rodata.slice_lag_ns = t.slice_lag_ns;
        rodata.latency_range_ns = t.latency_range_ns;
        rodata.wakeup_gran_ns = t.wakeup_gran_ns;
        rodata.lat_budget_ns = t.lat_budget_ns;
        rodata.max_wait_ns = t.max_wait_ns;
        rodata.use_prev_cpu = !opts.no_prev_cpu;
        rodata.use_recent_cpu = !opts.no_recent_cpu;
        rodata.cg_fast_paths = !opts.no_cgroup_fast_paths;
        rodata.test_error_after_ns = opts.test_error_after_ms.unwrap_or(0) * 1_000_000;
        set_topology(rodata)?;
        if let Some(n) = opts.test_cgroup_capacity {
            skel.maps
                .cg_ctxs
                .set_max_entries(n)
                .context("setting the cgroup map's capacity")?;
        }

        let mut skel = scx_ops_load!(skel, latcfs_ops, uei)?;

        // Rules go in before attaching, so that every task already has its
        // latency nice when the scheduler takes it over.
        let maps = RuleMaps {
            rules: &skel.maps.lat_rules,
            comm: &skel.maps.lat_comm,
            ctl: &skel.maps.lat_ctl,
        };
        for (key, nice) in rules {
            maps.set(key, *nice)?;
        }
        for (tid, nice) in carry {
            skel.maps
                .lat_carry
                .update(&tid.to_ne_bytes(), &nice.to_ne_bytes(), MapFlags::ANY)
                .context("carrying a task's latency nice over")?;
        }
        // The kernel lets one scheduler attach: whoever loses a race of two
        // instances stops here, before it touches the winner's pins.
        let link = match scx_ops_attach!(skel, latcfs_ops) {
            Ok(link) => link,
            Err(e) => return Err(attach_error(e, uei_report!(&skel, uei).err())),
        };
        let m = &mut skel.maps;
        let pins = PinGuard::create(&mut [
            ("lat_rules", &mut m.lat_rules),
            ("lat_comm", &mut m.lat_comm),
            ("lat_ctl", &mut m.lat_ctl),
            ("task_ctx_stor", &mut m.task_ctx_stor),
        ])?;
        log_verified_insns(skel.object());
        info!(
            "scx_latcfs {} attached: slice {}us, sleeper credit {}us",
            crate::cli::VERSION,
            opts.slice_us,
            opts.slice_lag_us
        );
        Ok(Self {
            skel,
            link: Some(link),
            _pins: pins,
        })
    }

    /// The per-task values tasks inherited at fork, by thread id.
    pub fn inherited(&self) -> Vec<(u32, i32)> {
        crate::latency::inherited_values(&self.skel.maps.task_ctx_stor)
    }

    /// The latency nice rules in force, with those set at run time.
    pub fn rules(&self) -> Result<Vec<(Key, i32)>> {
        RuleMaps {
            rules: &self.skel.maps.lat_rules,
            comm: &self.skel.maps.lat_comm,
            ctl: &self.skel.maps.lat_ctl,
        }
        .dump()
    }

    /// Remove the rules of processes and cgroups that are gone.
    fn forget_dead_pids(&self) -> Result<()> {
        let n = RuleMaps {
            rules: &self.skel.maps.lat_rules,
            comm: &self.skel.maps.lat_comm,
            ctl: &self.skel.maps.lat_ctl,
        }
        .forget_dead()?;
        if n > 0 {
            debug!("removed {n} rules of exited processes and removed cgroups");
        }
        Ok(())
    }

    /// One counter, summed over CPUs.
    fn counter(&self, idx: usize) -> Result<u64> {
        let key = (idx as u32).to_ne_bytes();
        let per_cpu = self
            .skel
            .maps
            .stats
            .lookup_percpu(&key, MapFlags::ANY)
            .with_context(|| format!("reading stats counter {}", NAMES[idx]))?
            .unwrap_or_default();
        Ok(per_cpu
            .iter()
            .filter_map(|v| v.get(..8))
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])))
            // wrapping: a gauge's per-CPU parts may be "negative"
            .fold(0, u64::wrapping_add))
    }

    /// Sum every counter over CPUs.
    fn counters(&self) -> Result<Counters> {
        let mut c = Counters::default();
        for (idx, slot) in c.0.iter_mut().enumerate() {
            *slot = self.counter(idx)?;
        }
        Ok(c)
    }

    /// Log cgroups whose weights we no longer follow exactly, once per
    /// new batch: `seen` holds the counts already logged.
    fn log_degraded_cgroups(&self, seen: &mut [u64; 2]) -> Result<()> {
        const WHAT: [(u32, &str); 2] = [
            (
                bpf_intf::latcfs_stat_LATCFS_STAT_CG_UNTRACKED,
                "could not be tracked (no room or no memory in the BPF map): their tasks keep their own weight",
            ),
            (
                bpf_intf::latcfs_stat_LATCFS_STAT_CG_FLATTENED,
                "are deeper than the tracked depth: each is accounted as its ancestor at that depth",
            ),
        ];
        for ((idx, what), seen) in WHAT.iter().zip(seen.iter_mut()) {
            let n = self.counter(*idx as usize)?;
            if n > *seen {
                warn!("{} cgroups {what}", n - *seen);
                *seen = n;
            }
        }
        Ok(())
    }

    /// Run until `shutdown` is set or the kernel ends the scheduler,
    /// answering the stats server's requests for the counters through
    /// `feed`; then detach and return why it ended (an error if the BPF
    /// side failed).
    pub fn run(&mut self, shutdown: &Arc<AtomicBool>, feed: &mut Feed) -> Result<UserExitInfo> {
        let mut degraded = [0; 2];
        let mut checked = Instant::now();
        while !shutdown.load(Ordering::Relaxed) && !uei_exited!(&self.skel, uei) {
            feed.serve(POLL, || self.counters())?;
            if checked.elapsed() >= HOUSEKEEPING {
                checked = Instant::now();
                self.log_degraded_cgroups(&mut degraded)?;
                self.forget_dead_pids()?;
            }
        }
        self.link.take();
        // A restarted scheduler counts from 0 again: keep the totals going.
        match self.counters() {
            Ok(last) => feed.carry_over(&last),
            Err(e) => warn!("{e:#}"),
        }
        uei_report!(&self.skel, uei)
    }
}

#[cfg(test)]
mod tests {
    use super::{check_topology_size, llc_cpu_lists, node_step, LlcCpuLists};

    #[test]
    fn the_node_step_runs_only_where_a_node_holds_several_llcs() {
        assert!(!node_step(1, 1));
        assert!(!node_step(8, 1), "one node: its scan is the machine's");
        assert!(!node_step(2, 2), "a node per LLC: its scan is the LLC's");
        assert!(node_step(4, 2));
        assert!(node_step(16, 2));
    }

    #[test]
    fn topology_limits_are_refused_by_name() {
        assert!(check_topology_size(Some(1023), 256, 64).is_ok());
        assert!(check_topology_size(None, 1, 1).is_ok());
        let msg = |r: anyhow::Result<()>| format!("{:#}", r.unwrap_err());
        assert_eq!(
            msg(check_topology_size(Some(1024), 1, 1)),
            "CPU 1024: scx_latcfs supports CPU ids below 1024"
        );
        assert_eq!(
            msg(check_topology_size(Some(7), 257, 1)),
            "257 LLCs: scx_latcfs supports at most 256"
        );
        assert_eq!(
            msg(check_topology_size(Some(7), 2, 65)),
            "65 NUMA nodes: scx_latcfs supports at most 64"
        );
    }

    #[test]
    fn llc_cpu_lists_group_cpus_by_llc() {
        // SMT siblings 0/4 and 1/5 in LLC 0, 2/6 and 3/7 in LLC 1, as
        // Linux numbers them.
        let pairs: Vec<(usize, usize)> = (0..8).map(|c| (c, (c % 4) / 2)).collect();
        assert_eq!(
            llc_cpu_lists(&pairs, 2),
            LlcCpuLists {
                cpus: vec![0, 1, 4, 5, 2, 3, 6, 7],
                first: vec![0, 4],
                nr: vec![4, 4],
            }
        );
        let one = llc_cpu_lists(&[(1, 0), (0, 0)], 1);
        assert_eq!(
            (one.cpus, one.first, one.nr),
            (vec![0, 1], vec![0], vec![2])
        );
    }
}
