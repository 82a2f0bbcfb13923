"""Benchmark: ours vs keras-hub as paired calls in one process, for ratios that hold on a
noisy machine.

    python bench/bench_paired.py [--dtypes float32,mixed_bfloat16] [--modes infer,train]
        [--pairs 10] [--out bench/results/paired.md]

bench_model.py runs each configuration in its own subprocess, minutes apart; on a shared
virtual machine the compute available drifts by 20% or more within minutes (the same code
measured 2.1 to 3.1 seq/s in one hour), which swamps differences of a few percent. Here,
for each (dtype, mode), one subprocess builds both models (bench_model.model_call: the
same ALBERT-base, random weights, seq 128, inference batch 32 / forward+backward batch
16, no XLA), warms both, then times --pairs pairs of calls, alternating which goes first
(ABBA...). Each pair's ratio keras-hub time / our time sees the same machine state; the
table gives the median pair ratio with its range, each side's median rate, and our MFU
against tf.matmul peak probes (2048^3, the dtype's) taken before, between and after the
pairs (the median probe).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_model as bm  # noqa: E402  (model steps, FLOPs, peak probe, machine description)

PEERS = ("ours", "keras_hub")


def worker(dtype, mode, pairs):
    from albert_tf import config as albert_config

    batch = 16 if mode == "train" else 32
    calls = {
        impl: bm.model_call(impl, dtype, False, mode, batch, 128, os.cpu_count()) for impl in PEERS
    }
    for call in list(calls.values()) * 2:
        call()
    peak_dtype = "bfloat16" if dtype == "mixed_bfloat16" else "float32"
    peaks = [bm._local_peak(peak_dtype)]
    seconds = {impl: [] for impl in PEERS}
    for i in range(pairs):
        order = PEERS if i % 2 == 0 else PEERS[::-1]
        for impl in order:
            start = time.perf_counter()
            calls[impl]()
            seconds[impl].append(time.perf_counter() - start)
        if i == pairs // 2:
            peaks.append(bm._local_peak(peak_dtype))
    peaks.append(bm._local_peak(peak_dtype))
    flops = bm.model_flops(albert_config.preset("albert_base_v2"), batch, 128, mode == "train")
    ratios = [k / o for o, k in zip(seconds["ours"], seconds["keras_hub"])]
    ours_s = statistics.median(seconds["ours"])
    return {
        "dtype": dtype,
        "mode": mode,
        "batch": batch,
        "ours": batch / ours_s,
        "keras_hub": batch / statistics.median(seconds["keras_hub"]),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "mfu": flops / ours_s / statistics.median(peaks),
        "peaks": peaks,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float32,mixed_bfloat16")
    p.add_argument("--modes", default="infer,train")
    p.add_argument("--pairs", type=int, default=10, help="timed pairs per configuration")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    p.add_argument("--out", default=os.path.join(HERE, "results", "paired.md"))
    p.add_argument("--worker", nargs=2, metavar=("DTYPE", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(worker(*args.worker, args.pairs)))
        return
    model, nproc, isa, load = bm._machine()
    rows = []
    for dtype in args.dtypes.split(","):
        for mode in args.modes.split(","):
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", dtype, mode]
            cmd += ["--pairs", str(args.pairs)]
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=args.timeout,
                env=bm.worker_env(),
            )
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                sys.exit(f"{dtype} {mode} failed:\n{proc.stderr[-3000:]}")
            rows.append(json.loads(line[-1][len("RESULT ") :]))
            print(rows[-1], flush=True)
    lines = [
        "# ours vs keras-hub, paired calls in one process",
        "",
        f"Command: `python bench/bench_paired.py {' '.join(argv or sys.argv[1:])}`",
        "",
        f"Machine: {model}, nproc {nproc}, ISA flags {' '.join(isa)}, "
        f"TF_ENABLE_ONEDNN_OPTS={bm.onednn_setting()}, load average at start {load}; "
        f"{bm._versions()}.",
        "",
        "ALBERT-base, seq 128, random weights, no XLA. Rates: median over "
        f"{args.pairs} pairs (sequences/s). Ratio: median of the per-pair ratios "
        "(keras-hub time / our time) with their range. MFU: our model FLOP/s against the "
        "median tf.matmul 2048^3 probe of the dtype (GFLOP/s listed).",
        "",
        "| dtype | mode | batch | ours | keras-hub | ratio (range) | our MFU | peak probes |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for r in rows:
        mode = "inference" if r["mode"] == "infer" else "fwd+bwd"
        peaks = ", ".join(f"{x / 1e9:.0f}" for x in r["peaks"])
        lines.append(
            f"| {r['dtype']} | {mode} | {r['batch']} | {r['ours']:.2f} | {r['keras_hub']:.2f} "
            f"| {r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) "
            f"| {r['mfu']:.0%} | {peaks} |"
        )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
