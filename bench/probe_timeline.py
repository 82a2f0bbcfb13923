"""How the machine's matrix-product rate moves over time: the denominator of MFU.

    python bench/probe_timeline.py [--dtype bfloat16] [--seconds 60] [--window 0.5] [--shapes]
        [--out bench/results/probe_timeline.md] [--plot bench/results/probe_timeline.png]

Runs one tf.matmul 2048^3 product of --dtype back to back for --seconds and reports its
rate (GFLOP/s) per --window seconds: the median of the products finished in each window,
the distribution of the window rates, and how long the rate stays above or below the
run's midpoint between its 10th and 90th percentiles (a "spell"). On a shared virtual
machine the cores' matrix units are shared with whatever runs on their sibling threads,
so the rate can switch between states within a second; an MFU measured against a probe
of a few tens of milliseconds then depends on which state the probe caught
(bench/bench_paired.py's sustained probes average over as long as the model's call).
--plot (needs matplotlib) draws the windows' rates against time.

--shapes then runs rounds of the 2048^3 product and ALBERT-base's own dense product shapes
(batch 16, seq 128: `SHAPES`) for another --seconds, each round one call of each, and reports
each shape's rate as a fraction of the 2048^3 product's in the same round, for the rounds
above and below the threshold: whether the model's products keep up with the probe in both
states.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_model as bm  # noqa: E402  (matmul probe, machine description)

# ALBERT-base's dense products at batch 16, seq 128: [rows, in] x [in, out].
SHAPES = {
    "[2048,768]x[768,3072]": (2048, 768, 3072),
    "[2048,3072]x[3072,768]": (2048, 3072, 768),
    "[2048,768]x[768,768]": (2048, 768, 768),
    "[768,2048]x[2048,3072] (a dW)": (768, 2048, 3072),
}


def shapes_by_state(dtype, seconds, threshold):
    """{"fast"/"slow": (rounds, median 2048^3 GFLOP/s, {shape: median fraction of it})}:
    rounds of one call of the 2048^3 probe and of each of `SHAPES` for `seconds`, split
    by the round's 2048^3 rate against `threshold` (GFLOP/s)."""
    calls = {"2048^3": bm.matmul_probe(dtype, 2048, 2048, 2048, reps=1)}
    calls.update({name: bm.matmul_probe(dtype, *mkn, reps=1) for name, mkn in SHAPES.items()})
    for call, _ in calls.values():
        call()
    rounds = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        rates = {}
        for name, (call, flops) in calls.items():
            begin = time.perf_counter()
            call()
            rates[name] = flops / (time.perf_counter() - begin) / 1e9
        rounds.append(rates)
    states = {}
    for state in ("fast", "slow"):
        group = [r for r in rounds if (r["2048^3"] > threshold) == (state == "fast")]
        if group:
            fractions = {
                name: statistics.median(r[name] / r["2048^3"] for r in group) for name in SHAPES
            }
            states[state] = (len(group), statistics.median(r["2048^3"] for r in group), fractions)
    return states


def window_rates(call, flops, seconds, window):
    """[(window start s, median GFLOP/s of the calls that ended in it)] over `seconds`."""
    windows = {}
    start = time.perf_counter()
    while (now := time.perf_counter()) - start < seconds:
        call()
        end = time.perf_counter()
        windows.setdefault(int((end - start) / window), []).append(flops / (end - now) / 1e9)
    return [(i * window, statistics.median(rates)) for i, rates in sorted(windows.items())]


def spells(rates, threshold):
    """Lengths (in windows) of the runs of consecutive windows above and below
    `threshold`: ({"above": [...], "below": [...]})."""
    runs = {"above": [], "below": []}
    for i, rate in enumerate(rates):
        side = "above" if rate > threshold else "below"
        if i and (rates[i - 1] > threshold) == (side == "above"):
            runs[side][-1] += 1
        else:
            runs[side].append(1)
    return runs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", default="bfloat16", help="the product's dtype")
    p.add_argument("--seconds", type=float, default=60.0, help="how long to run the probe")
    p.add_argument("--window", type=float, default=0.5, help="seconds per reported window")
    p.add_argument("--out", default=os.path.join(HERE, "results", "probe_timeline.md"))
    p.add_argument("--plot", default="", help="PNG of the rates over time (needs matplotlib)")
    p.add_argument(
        "--shapes", action="store_true", help="also the model's product shapes in each state"
    )
    args = p.parse_args(argv)
    model, nproc, isa, load = bm._machine()
    call, flops = bm.matmul_probe(args.dtype, 2048, 2048, 2048, reps=1)
    for _ in range(3):
        call()
    timeline = window_rates(call, flops, args.seconds, args.window)
    rates = [rate for _, rate in timeline]
    deciles = statistics.quantiles(rates, n=10)
    threshold = (deciles[0] + deciles[-1]) / 2
    runs = spells(rates, threshold)
    lines = [
        "# The matmul probe's rate over time",
        "",
        f"Command: `python bench/probe_timeline.py {shlex.join(argv or sys.argv[1:])}`",
        "",
        f"Machine: {model}, nproc {nproc}, ISA flags {' '.join(isa)}, "
        f"TF_ENABLE_ONEDNN_OPTS={bm.onednn_setting()}, load average at start {load}; "
        f"{bm._versions()}.",
        "",
        f"tf.matmul 2048^3 in {args.dtype}, back to back for {args.seconds:g} s; GFLOP/s per "
        f"{args.window:g} s window (median of the products that ended in it).",
        "",
        "| windows | min | 10th pct | median | 90th pct | max | max / min |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {len(rates)} | {min(rates):.0f} | {deciles[0]:.0f} | {statistics.median(rates):.0f} "
        f"| {deciles[-1]:.0f} | {max(rates):.0f} | {max(rates) / min(rates):.2f} |",
        "",
        f"Spells above / below {threshold:.0f} GFLOP/s (midway between the 10th and 90th "
        "percentiles), in seconds:",
        "",
        "| side | spells | share of the time | median length | longest |",
        "|---|---:|---:|---:|---:|",
    ]
    for side, lengths in runs.items():
        if lengths:
            lines.append(
                f"| {side} | {len(lengths)} | {sum(lengths) / len(rates):.0%} "
                f"| {statistics.median(lengths) * args.window:g} "
                f"| {max(lengths) * args.window:g} |"
            )
    if args.shapes:
        states = shapes_by_state(args.dtype, args.seconds, threshold)
        lines += [
            "",
            f"ALBERT-base's products in rounds with the 2048^3 product for {args.seconds:g} s, "
            f"each as a fraction of the 2048^3 rate of its round (median), rounds split at "
            f"{threshold:.0f} GFLOP/s:",
            "",
            "| state | rounds | 2048^3 GFLOP/s | " + " | ".join(SHAPES) + " |",
            "|---|---:|---:|" + "---:|" * len(SHAPES),
        ]
        for state, (count, probe, fractions) in states.items():
            lines.append(
                f"| {state} | {count} | {probe:.0f} | "
                + " | ".join(f"{fractions[name]:.2f}" for name in SHAPES)
                + " |"
            )
    lines += ["", "Window rates in order:", "", " ".join(f"{r:.0f}" for r in rates)]
    bm.write_markdown(args.out, lines)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 3))
        ax.step([t for t, _ in timeline], rates, where="post")
        ax.axhline(threshold, color="grey", linestyle=":")
        ax.set_xlabel("seconds")
        ax.set_ylabel(f"{args.dtype} 2048^3 GFLOP/s")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
