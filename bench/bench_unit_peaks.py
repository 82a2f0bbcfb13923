"""The arithmetic units' peak against tf.matmul's, on this CPU.

    python bench/bench_unit_peaks.py [--rounds 5] [--seconds 1] [--emulate avx2]
        [--out bench/results/unit_peaks.md]

MFU in the other benches is read against a tf.matmul probe of the dtype (the rate
oneDNN reaches). This says how far that probe sits from the hardware: bench/unit_peaks.cc,
built here with -march=native, runs independent multiply-adds in registers (float32 FMA;
bfloat16 pair dot products where the CPU has AVX512_BF16) on one thread and on all of
them; interleaved with it, round by round, tf.matmul 2048^3 in float32 and bfloat16 on all
threads. Medians over --rounds with their ranges; the ratio is the probe's median over the
units' median on all threads. --emulate avx2: the units built as for a CPU without AVX-512
and oneDNN held to AVX2 (bench_model.EMULATED_ISAS).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_model as bm  # noqa: E402  (machine description, probes, result file)

UNITS = {"float32_fma": "float32", "bfloat16_dot": "bfloat16"}


def build(directory: str) -> str:
    """bench/unit_peaks.cc built for this CPU (with $ALBERT_TF_KERNEL_FLAGS after
    -march=native, as our kernels are); its path."""
    from albert_tf.cpu import native_kernels

    cxx = native_kernels.compiler()
    if cxx is None:
        sys.exit("bench_unit_peaks: no C++ compiler found ($CXX, c++, g++)")
    target = os.path.join(directory, "unit_peaks")
    source = os.path.join(HERE, "unit_peaks.cc")
    extra = os.environ.get("ALBERT_TF_KERNEL_FLAGS", "").split()
    command = [cxx, "-O2", "-march=native", *extra, source, "-o", target, "-lpthread"]
    subprocess.run(command, check=True)
    return target


def _spread(values):
    """'median (min-max)' of GFLOP/s figures."""
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.0, help="per unit and thread count")
    p.add_argument("--out", default=os.path.join(HERE, "results", "unit_peaks.md"))
    bm.add_emulate_flag(p)
    args = p.parse_args(argv)
    bm.run_emulated(args.emulate)
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    nproc = os.cpu_count() or 1
    load_start = bm._machine()[3]
    with tempfile.TemporaryDirectory() as directory:
        binary = build(directory)
        # oneDNN held to AVX2 has no bfloat16 product at all (it refuses the primitive).
        dtypes = ["float32"] if args.emulate else UNITS.values()
        probes = {dtype: bm.matmul_probe(dtype, 2048, 2048, 2048) for dtype in dtypes}
        for call, _ in probes.values():
            call()  # traced and warm
        units = {}  # (unit, threads) -> [GFLOP/s]
        matmul = {dtype: [] for dtype in probes}
        for _ in range(args.rounds):
            for threads in sorted({1, nproc}):
                out = subprocess.run(
                    [binary, str(threads), str(args.seconds)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                for unit, rate in json.loads(out).items():
                    units.setdefault((unit, threads), []).append(rate)
            for dtype, (call, flops) in probes.items():
                seconds = bm.paired_seconds({dtype: call}, 3)[dtype]
                matmul[dtype].append(flops / statistics.median(seconds) / 1e9)
    rows = []
    for unit, dtype in UNITS.items():
        if (unit, nproc) not in units:
            probe = _spread(matmul[dtype]) if dtype in matmul else "-"
            rows.append(f"| {unit} | - | - | {probe} | no such unit here |")
            continue
        peak = statistics.median(units[(unit, nproc)])
        rows.append(
            f"| {unit} | {_spread(units[(unit, 1)])} | {_spread(units[(unit, nproc)])} "
            f"| {_spread(matmul[dtype])} | {statistics.median(matmul[dtype]) / peak:.0%} |"
        )
    bm.write_markdown(
        args.out,
        [
            *bm.result_header(
                "The arithmetic units' peak against tf.matmul's",
                "bench_unit_peaks.py",
                argv,
                load_start,
                args.emulate,
            ),
            f"GFLOP/s, median (range) over {args.rounds} rounds. Units: bench/unit_peaks.cc "
            f"(multiply-adds in registers, {args.seconds:g} s per count of threads); "
            "tf.matmul: 2048^3 in the unit's dtype on all threads, median of 3 calls a round, "
            "interleaved with the units.",
            "",
            f"| unit | 1 thread | {nproc} threads | tf.matmul, {nproc} threads "
            "| tf.matmul / unit peak |",
            "|---|---:|---:|---:|---:|",
            *rows,
        ],
    )


if __name__ == "__main__":
    main()
