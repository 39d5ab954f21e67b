#!/usr/bin/python3
"""Turn a scripts/bench.sh result directory into report.md and PNG charts.

usage: scripts/bench-report.py DIR

Reads DIR/raw.jsonl and the schbench JSON files it names (schbench's own
"int" layout, so a real schbench's output works too). Tables follow the
latency nice thread: one column per scheduler, the median over rounds with
its spread (min-max), and the ratio to EEVDF. Charts need matplotlib
(python3-matplotlib, installed by scripts/setup.sh); without it the report
says so and has the tables only.
"""
import json
import os
import statistics
import sys
from collections import defaultdict

PCTS = ["50.0", "90.0", "99.0", "99.9"]


def load(out):
    rows = []
    with open(os.path.join(out, "raw.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    for r in rows:
        if r["bench"] == "schbench":
            with open(os.path.join(out, r["file"])) as f:
                r["data"] = json.load(f)["int"]
    return rows


def order(rows):
    seen = []
    for r in rows:
        if r["sched"] not in seen:
            seen.append(r["sched"])
    return seen


def med(vals):
    return statistics.median(vals) if vals else None


def cell(vals, base, higher_better=False, fmt="{:.3f}"):
    """median (min-max) and the ratio to the EEVDF median."""
    if not vals:
        return "-"
    m = med(vals)
    s = fmt.format(m)
    if len(vals) > 1:
        s += " ({}-{})".format(fmt.format(min(vals)), fmt.format(max(vals)))
    if base:
        s += " **x{:.2f}**".format(m / base)
    return s


def hackbench_table(rows, scheds):
    data = defaultdict(list)
    keys = []
    for r in rows:
        if r["bench"] != "hackbench":
            continue
        k = (r["mode"], r["groups"], r["loops"])
        if k not in keys:
            keys.append(k)
        data[(k, r["sched"])].append(r["seconds"])
    out = ["| hackbench | " + " | ".join(scheds) + " |", "|---" * (len(scheds) + 1) + "|"]
    for k in keys:
        base = med(data[(k, "eevdf")])
        name = "{} -g {} -l {}".format(*k)
        out.append("| " + name + " | " + " | ".join(cell(data[(k, s)], base) for s in scheds) + " |")
    return out, data, keys


def schbench_tables(rows, scheds):
    runs = defaultdict(list)
    ms = []
    for r in rows:
        if r["bench"] != "schbench":
            continue
        mt = (r["m"], r.get("t"))
        if mt not in ms:
            ms.append(mt)
        runs[(mt, r["sched"])].append(r["data"])
    out = []
    for mt in ms:
        out += ["", "schbench {} (foreground; stress-ng at 50% in the background), usec".format(mt_name(mt)), ""]
        out += ["| percentile | " + " | ".join(scheds) + " |", "|---" * (len(scheds) + 1) + "|"]
        for kind in ("wakeup", "request"):
            for p in PCTS:
                key = "{}_latency_pct{}".format(kind, p)
                base = med([d[key] for d in runs[(mt, "eevdf")]])
                out.append("| {} {}th | ".format(kind, p) + " | ".join(
                    cell([d[key] for d in runs[(mt, s)]], base, fmt="{:.0f}") for s in scheds) + " |")
        base = med([d["rps_pct50.0"] for d in runs[(mt, "eevdf")]])
        out.append("| RPS p50 | " + " | ".join(
            cell([d["rps_pct50.0"] for d in runs[(mt, s)]], base, fmt="{:.0f}") for s in scheds) + " |")
    return out, runs, ms


def mt_name(mt):
    m, t = mt
    return "-m {}".format(m) + (" -t {}".format(t) if t is not None else "")


def bpf_table(rows, scheds):
    per = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    load = defaultdict(list)
    for r in rows:
        if r["bench"] == "bpf":
            for p in r["progs"]:
                acc = per[r["sched"]][p["name"]]
                acc[0] += p["ns"]
                acc[1] += p["cnt"]
        elif r["bench"] == "load":
            load[r["sched"]].append(r["ms"])
    out = ["| scheduler | load to attached, ms | ns per call, all programs | busiest programs (ns/call, calls) |",
           "|---|---|---|---|"]
    avg = {}
    for s in scheds:
        if s not in per:
            continue
        progs = per[s]
        ns = sum(v[0] for v in progs.values())
        cnt = sum(v[1] for v in progs.values())
        avg[s] = ns / cnt if cnt else None
        top = sorted(progs.items(), key=lambda kv: -kv[1][1])[:5]
        tops = ", ".join("{} {:.0f} ({})".format(n, v[0] / v[1], v[1]) for n, v in top if v[1])
        out.append("| {} | {} | {} | {} |".format(
            s, "{:.0f}".format(med(load[s])) if load[s] else "-",
            "{:.0f}".format(avg[s]) if avg[s] else "-", tops))
    return out, avg, {s: med(v) for s, v in load.items()}


def targets(hb, hb_keys, sb, sb_ms, avg, load):
    """Issue 13's targets: each line says met or missed, with the ratio."""
    out = []

    def ratio(a, b):
        return a / b if a and b else None

    def verdict(ok):
        return "met" if ok else "missed"

    def fmt(r):
        return "{:.2f}".format(r) if r is not None else "-"

    for k in hb_keys:
        r = ratio(med(hb[(k, "latcfs")]), med(hb[(k, "eevdf")]))
        out.append("- hackbench {} -g {}: latcfs/eevdf = {} (target <= 1.00: {})".format(
            k[0], k[1], fmt(r), verdict(r is not None and r <= 1.0)))
    for k in hb_keys:
        r = ratio(med(hb[(k, "latcfs-ln0")]), med(hb[(k, "latcfs")]))
        if r is not None:
            out.append("- hackbench {} -g {}: latency nice 0 rule / no rules = {} "
                       "(target: the same, within 10%: {})".format(k[0], k[1], fmt(r), verdict(0.9 <= r <= 1.1)))

    def sbm(mt, sched, key):
        return med([d[key] for d in sb[(mt, sched)]])

    p99, p50, rps = "wakeup_latency_pct99.0", "wakeup_latency_pct50.0", "rps_pct50.0"
    for mt in sb_ms:
        name = "schbench " + mt_name(mt)
        e = sbm(mt, "eevdf", p99)
        r = ratio(sbm(mt, "latcfs", p99), e)
        line = "- {} wakeup p99: latcfs/eevdf = {} (target <= 0.50: {})".format(
            name, fmt(r), verdict(r is not None and r <= 0.5))
        b = sbm(mt, "scx_bpfland", p99)
        if b:
            rb = ratio(sbm(mt, "latcfs", p99), b)
            line += "; latcfs/bpfland = {} (target <= 1.00: {})".format(fmt(rb), verdict(rb is not None and rb <= 1.0))
        out.append(line)
        r = ratio(sbm(mt, "latcfs-ln-20", p99), e)
        out.append("- {} wakeup p99 at latency nice -20: /eevdf = {} (target <= 0.10: {})".format(
            name, fmt(r), verdict(r is not None and r <= 0.1)))
        for sched in ("latcfs", "latcfs-ln-20"):
            r = ratio(sbm(mt, sched, p50), sbm(mt, "eevdf", p50))
            out.append("- {} wakeup p50, {}: /eevdf = {} (target <= 1.00: {})".format(
                name, sched, fmt(r), verdict(r is not None and r <= 1.0)))
        r = ratio(sbm(mt, "latcfs", rps), sbm(mt, "eevdf", rps))
        out.append("- {} RPS: latcfs/eevdf = {} (target >= 1.00: {})".format(
            name, fmt(r), verdict(r is not None and r >= 1.0)))
        r = ratio(sbm(mt, "latcfs-ln0", p99), sbm(mt, "latcfs", p99))
        if r is not None:
            out.append("- {} wakeup p99, latency nice 0 rule / no rules = {} "
                       "(target: the same, within the spread of rounds)".format(name, fmt(r)))
    if avg.get("latcfs") and avg.get("scx_bpfland"):
        out.append("- BPF ns per call: latcfs {:.0f}, bpfland {:.0f}".format(avg["latcfs"], avg["scx_bpfland"]))
    if load.get("latcfs") and load.get("scx_bpfland"):
        out.append("- load to attached: latcfs {:.0f} ms, bpfland {:.0f} ms".format(
            load["latcfs"], load["scx_bpfland"]))
    return out


def charts(out, scheds, hb, hb_keys, sb, sb_ms):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(no charts: matplotlib is not installed)"]
    made = []
    for mt in sb_ms:
        fig, ax = plt.subplots(figsize=(7, 4))
        for s in scheds:
            ds = sb[(mt, s)]
            if not ds:
                continue
            ys = [med([d["wakeup_latency_pct" + p] for d in ds]) for p in PCTS]
            ax.plot([0.5, 0.9, 0.99, 0.999], ys, marker="o", label=s)
        ax.set_xscale("logit")
        ax.set_yscale("log")
        ax.set_xlabel("percentile")
        ax.set_ylabel("wakeup latency, usec")
        ax.set_title("schbench {} with 50% background load".format(mt_name(mt)))
        ax.legend(fontsize=8)
        name = "schbench-m{}{}.png".format(mt[0], "-t{}".format(mt[1]) if mt[1] is not None else "")
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=100)
        plt.close(fig)
        made.append("![schbench {}]({})".format(mt_name(mt), name))
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(1, len(scheds))
    for i, s in enumerate(scheds):
        base = [med(hb[(k, "eevdf")]) for k in hb_keys]
        ys = [(med(hb[(k, s)]) or 0) / b if b else 0 for k, b in zip(hb_keys, base)]
        ax.bar([j + i * width for j in range(len(hb_keys))], ys, width, label=s)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(hb_keys))])
    ax.set_xticklabels(["{}\n-g {}".format(k[0], k[1]) for k in hb_keys], fontsize=7)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel("time / EEVDF's (lower is better)")
    ax.set_title("hackbench")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "hackbench.png"), dpi=100)
    plt.close(fig)
    made.append("![hackbench](hackbench.png)")
    return made


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench-report.py DIR")
    out = sys.argv[1]
    rows = load(out)
    if not rows:
        sys.exit("bench-report: no measurements in " + out)
    scheds = order(rows)
    rounds = max(r["round"] for r in rows)
    hb_lines, hb, hb_keys = hackbench_table(rows, scheds)
    sb_lines, sb, sb_ms = schbench_tables(rows, scheds)
    bpf_lines, avg, load_ms = bpf_table(rows, scheds)
    lines = ["# scx_latcfs benchmark report", "",
             "{} rounds, schedulers interleaved in each round. Cells: median (min-max) over rounds, "
             "**ratio to EEVDF** (for times and latencies lower is better, for RPS higher).".format(rounds), "",
             "## hackbench, seconds", ""] + hb_lines
    lines += ["", "## schbench"] + sb_lines
    lines += ["", "## BPF cost and load time", "",
              "Run time per call of the scheduler's BPF programs over the whole round "
              "(kernel.bpf_stats_enabled), and the time from starting the loader to attached.", ""] + bpf_lines
    lines += ["", "## Targets", ""] + targets(hb, hb_keys, sb, sb_ms, avg, load_ms)
    lines += ["", "## Charts", ""] + charts(out, scheds, hb, hb_keys, sb, sb_ms)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
