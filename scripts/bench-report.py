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
        if r["m"] not in ms:
            ms.append(r["m"])
        runs[(r["m"], r["sched"])].append(r["data"])
    out = []
    for m in ms:
        out += ["", "schbench -m {} (foreground; stress-ng at 50% in the background), usec".format(m), ""]
        out += ["| percentile | " + " | ".join(scheds) + " |", "|---" * (len(scheds) + 1) + "|"]
        for kind in ("wakeup", "request"):
            for p in PCTS:
                key = "{}_latency_pct{}".format(kind, p)
                base = med([d[key] for d in runs[(m, "eevdf")]])
                out.append("| {} {}th | ".format(kind, p) + " | ".join(
                    cell([d[key] for d in runs[(m, s)]], base, fmt="{:.0f}") for s in scheds) + " |")
        base = med([d["rps_pct50.0"] for d in runs[(m, "eevdf")]])
        out.append("| RPS p50 | " + " | ".join(
            cell([d["rps_pct50.0"] for d in runs[(m, s)]], base, fmt="{:.0f}") for s in scheds) + " |")
    return out, runs, ms


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
    out = []
    def ratio(a, b):
        return a / b if a and b else None
    # hackbench: default within 3% of EEVDF and not slower than bpfland
    for k in hb_keys:
        name = "{} -g {}".format(k[0], k[1])
        r = ratio(med(hb[(k, "latcfs")]), med(hb[(k, "eevdf")]))
        line = "- hackbench {}: latcfs/eevdf = {}".format(name, "{:.2f}".format(r) if r else "-")
        line += " (target <= 1.03: {})".format("met" if r and r <= 1.03 else "missed")
        if hb.get((k, "scx_bpfland")):
            rb = ratio(med(hb[(k, "latcfs")]), med(hb[(k, "scx_bpfland")]))
            line += "; latcfs/bpfland = {:.2f} (target <= 1.00: {})".format(rb, "met" if rb <= 1.0 else "missed")
        out.append(line)
    for m in sb_ms:
        key = "wakeup_latency_pct99.0"
        e = med([d[key] for d in sb[(m, "eevdf")]])
        l20 = med([d[key] for d in sb[(m, "latcfs-ln-20")]])
        d0 = med([d[key] for d in sb[(m, "latcfs")]])
        if e and l20:
            out.append("- schbench -m {} wakeup p99: eevdf/ln-20 = {:.1f}x (target >= 5x: {})".format(
                m, e / l20, "met" if e / l20 >= 5 else "missed"))
        if e and d0:
            out.append("- schbench -m {} wakeup p99: latcfs/eevdf = {:.2f} (target <= 1.00: {})".format(
                m, d0 / e, "met" if d0 <= e else "missed"))
    if avg.get("latcfs") and avg.get("scx_bpfland"):
        out.append("- BPF ns per call: latcfs {:.0f}, bpfland {:.0f} (target: not above: {})".format(
            avg["latcfs"], avg["scx_bpfland"], "met" if avg["latcfs"] <= avg["scx_bpfland"] else "missed"))
    if load.get("latcfs") and load.get("scx_bpfland"):
        out.append("- load to attached: latcfs {:.0f} ms, bpfland {:.0f} ms (target: not above: {})".format(
            load["latcfs"], load["scx_bpfland"], "met" if load["latcfs"] <= load["scx_bpfland"] else "missed"))
    return out


def charts(out, scheds, hb, hb_keys, sb, sb_ms):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["(no charts: matplotlib is not installed)"]
    made = []
    for m in sb_ms:
        fig, ax = plt.subplots(figsize=(7, 4))
        for s in scheds:
            ds = sb[(m, s)]
            if not ds:
                continue
            ys = [med([d["wakeup_latency_pct" + p] for d in ds]) for p in PCTS]
            ax.plot([0.5, 0.9, 0.99, 0.999], ys, marker="o", label=s)
        ax.set_xscale("logit")
        ax.set_yscale("log")
        ax.set_xlabel("percentile")
        ax.set_ylabel("wakeup latency, usec")
        ax.set_title("schbench -m {} with 50% background load".format(m))
        ax.legend(fontsize=8)
        name = "schbench-m{}.png".format(m)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=100)
        plt.close(fig)
        made.append("![schbench -m {}]({})".format(m, name))
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
