"""Benchmark: paired calls in one process, for ratios that hold on a noisy machine.

    python bench/bench_paired.py [--dtypes float32,mixed_bfloat16] [--modes infer,train]
        [--speed_paths_off native_products] [--pretraining_seqs 128:16,512:4] [--pairs 10]
        [--speed_paths auto|plain|native] [--seq 128] [--batch N] [--out bench/results/paired.md]

bench_model.py and bench_pretraining.py run each configuration in its own subprocess,
minutes apart; on a shared virtual machine the compute available drifts by 20% or more
within minutes (the same code measured 2.1 to 3.1 seq/s in one hour), which swamps
differences of a few percent. Here one subprocess per comparison builds both sides, warms
both, then times --pairs pairs of calls, alternating which goes first (ABBA...), so that
each pair's ratio sees the same machine state; tables give the median pair ratio with its
range and each side's median rate.

  * Encoder cells (--dtypes x --modes): ours vs keras-hub (bench_model.model_call: the same
    ALBERT-base, random weights, seq 128, inference batch 32 / forward+backward batch 16, no
    XLA; mode "classify": a GLUE classifier's eval at batch 32, class probabilities from
    [CLS], no MFU as its FLOPs depend on what each side computes), with our MFU against
    tf.matmul peak probes of the dtype timed in the same rotation (a 2048^3 product and the
    model's FFN product; each round's faster one): a probe taken minutes or even a minute
    away from the model's calls read from 0.5x to 2x of its neighbours on the bench machine.
    Each probe runs twice per round: once as a burst (two products, tens of milliseconds)
    and once sustained, repeated for as long as our model's call takes. The burst catches
    moments when a shared machine's neighbours are idle (one round's burst read 2.6x
    another's); the sustained probe averages over the same length of time as the call it is
    compared with, so its MFU (the headline) moves far less from round to round.
  * --speed_paths: the switch our side runs with (albert_tf.cpu.speed_paths; default auto).
    --seq and --batch: a smaller encoder cell than ALBERT-base's seq 128 at batch 32 / 16,
    for a quick check on a busy machine (its MFU and targets are not the goals' cells).
  * --speed_paths_off: instead of keras-hub, each encoder cell pits ours against ours
    with those speed paths (albert_tf.cpu.speed_paths.SpeedPaths fields) switched off: what
    a path is worth, measured in one process.
  * --emulate avx2: every worker as on a CPU with AVX2 and no AVX-512, on one that has it:
    oneDNN (ONEDNN_MAX_CPU_ISA), XLA's loops (--xla_cpu_max_isa) and our C++ kernels
    ($ALBERT_TF_KERNEL_FLAGS=-mno-avx512f) held to AVX2. The vector units are the same
    machine's at half their width: an emulation, not a measurement of such a CPU.
  * --pretraining_seqs: our full pretraining step (bench_pretraining's) in float32 vs
    mixed_bfloat16, the two models built side by side (each under its dtype policy).
  * Every run ends with a "Targets" table: each speed goal of docs/benchmarks.md that its
    cells measured (ENCODER_TARGETS, PRETRAINING_TARGET), the measured value and met or not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_model as bm  # noqa: E402  (model steps, FLOPs, peak probe, machine description)

PEERS = ("ours", "keras_hub")
MODE_NAMES = {"infer": "inference", "train": "fwd+bwd", "classify": "classifier eval"}
# The speed goals of docs/benchmarks.md ("Targets by machine"), checked by every run against
# what it measured. Encoder cells (dtype, mode): ratio to keras-hub, and our MFU against the
# sustained peak probe of the dtype, pooled over the run (None: no goal for that cell).
ENCODER_TARGETS = {
    ("float32", "infer"): {"ratio": 1.1, "mfu": 0.85},
    ("float32", "train"): {"ratio": 1.1, "mfu": None},
    ("mixed_bfloat16", "infer"): {"ratio": 1.2, "mfu": 0.80},
    ("mixed_bfloat16", "train"): {"ratio": 1.2, "mfu": 0.80},
}
PRETRAINING_TARGET = 2.2  # our bfloat16 pretraining step's speed over our float32 step's


def _ratio_summary(numerator, denominator):
    """Median, min and max of the per-pair ratios numerator / denominator."""
    ratios = [n / d for n, d in zip(numerator, denominator)]
    return {"ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}


# The encoder cells' size (--seq, --batch).
SIZE = {"seq": 128, "batch": None}


def _batch(mode):
    """The encoder cell's batch: --batch, else 16 for fwd+bwd and 32 otherwise."""
    return SIZE["batch"] or (16 if mode == "train" else 32)


def worker_encoder(dtype, mode, pairs):
    """Ours vs keras-hub, one encoder cell, with matmul peak probes in the same rotation."""
    from albert_tf.model import config as albert_config

    cfg = albert_config.preset("albert_base_v2")
    batch = _batch(mode)
    calls = {
        impl: bm.model_call(impl, dtype, False, mode, batch, SIZE["seq"], os.cpu_count())
        for impl in PEERS
    }
    bursts = {
        "2048^3": bm.matmul_probe(bm.peak_dtype(dtype), 2048, 2048, 2048),
        "FFN": bm.matmul_probe(
            bm.peak_dtype(dtype), batch * SIZE["seq"], cfg.hidden_size, cfg.intermediate_size
        ),
    }
    for call in list(calls.values()) * 2 + [call for call, _ in bursts.values()] * 2:
        call()
    # The sustained probes last as long as our call (the median of three).
    call_seconds = statistics.median(bm.paired_seconds({"ours": calls["ours"]}, 3)["ours"])
    probes = {f"{name} burst": probe for name, probe in bursts.items()}
    probes.update(
        {f"{name} sustained": _sustained(*probe, call_seconds) for name, probe in bursts.items()}
    )
    calls.update({name: call for name, (call, _) in probes.items()})
    seconds = bm.paired_seconds(calls, pairs)
    train = mode == "train"
    flops = None if mode == "classify" else bm.model_flops(cfg, batch, SIZE["seq"], train)
    probe_rates = {name: [f / s for s in seconds[name]] for name, (_, f) in probes.items()}
    ours_s = statistics.median(seconds["ours"])
    return {
        "dtype": dtype,
        "mode": mode,
        "batch": batch,
        "ours": batch / ours_s,
        "keras_hub": batch / statistics.median(seconds["keras_hub"]),
        **_ratio_summary(seconds["keras_hub"], seconds["ours"]),
        **{
            kind: flops and _mfu_summary(flops, seconds["ours"], probe_rates, kind)
            for kind in ("sustained", "burst")
        },
        "probes": {name: statistics.median(rates) for name, rates in probe_rates.items()},
        "probe_ranges": {name: (min(r), max(r)) for name, r in probe_rates.items()},
    }


def _sustained(call, flops, seconds):
    """(call, flops) of a probe repeated for about `seconds` per call."""
    single = statistics.median(bm.paired_seconds({"probe": call}, 3)["probe"])
    reps = max(1, round(seconds / single))
    return (lambda: [call() for _ in range(reps)]), flops * reps


def _mfu_summary(flops, seconds, probe_rates, kind):
    """Our model FLOP/s against the probes of `kind` ("sustained" or "burst"): pooled,
    all our calls' FLOPs over their summed time against the faster probe's FLOPs over
    its summed time (both interleaved over the whole run, so they see the same mix of
    machine states; a shared machine switches between states within a second, faster
    than a round), and per round against that round's faster probe: median, min, max."""
    rates = {name: r for name, r in probe_rates.items() if name.endswith(kind)}
    # A probe's pooled rate: its FLOPs over its time, i.e. the harmonic mean of its rates.
    pooled_peak = max(len(r) / sum(1 / x for x in r) for r in rates.values())
    round_peaks = [max(peaks) for peaks in zip(*rates.values())]
    per_round = [flops / s / peak for s, peak in zip(seconds, round_peaks)]
    return {
        "pooled": flops * len(seconds) / sum(seconds) / pooled_peak,
        "mfu": statistics.median(per_round),
        "min": min(per_round),
        "max": max(per_round),
        **_by_state(per_round, round_peaks),
    }


def _by_state(per_round, round_peaks):
    """Per-round MFU split by the machine's state in that round: rounds whose probe ran
    below the midpoint of the run's slowest and fastest probe ("slow") and the others
    ("fast"); one state only where the fastest probe is within 1.5x of the slowest.
    Returns {"slow": (median, rounds), "fast": (median, rounds)}, None for a state
    without rounds."""
    low, high = min(round_peaks), max(round_peaks)
    middle = (low + high) / 2 if high > 1.5 * low else float("inf")
    states = {"slow": [], "fast": []}
    for mfu, peak in zip(per_round, round_peaks):
        states["slow" if peak < middle else "fast"].append(mfu)
    return {
        state: (statistics.median(values), len(values)) if values else None
        for state, values in states.items()
    }


def _ratio_cell(result):
    """'1.23x (1.01-1.45)': a result's median pair ratio and its range."""
    return f"{result['ratio']:.2f}x ({result['ratio_min']:.2f}-{result['ratio_max']:.2f})"


def _states_cell(summary):
    """'slow, fast' per-round MFU medians with their round counts, '-' for none."""
    return ", ".join(
        "-" if summary[state] is None else f"{summary[state][0]:.0%} ({summary[state][1]})"
        for state in ("slow", "fast")
    )


def target_lines(encoder, pretraining):
    """Markdown rows "| goal | measured | met |" for each goal of ENCODER_TARGETS and
    PRETRAINING_TARGET that the run's results (worker_encoder's and
    worker_pretraining's) measured; [] when they measured none."""
    rows = []
    for r in encoder:
        goals = ENCODER_TARGETS.get((r["dtype"], r["mode"]), {})
        cell = f"{r['dtype']} {MODE_NAMES[r['mode']]}"
        if goals.get("ratio"):
            rows.append(
                (
                    f"{cell} >= {goals['ratio']}x keras-hub",
                    r["ratio"] >= goals["ratio"],
                    _ratio_cell(r),
                )
            )
        if goals.get("mfu") and r["sustained"]:
            pooled = r["sustained"]["pooled"]
            rows.append(
                (
                    f"{cell} >= {goals['mfu']:.0%} of the sustained peak probe (pooled)",
                    pooled >= goals["mfu"],
                    f"{pooled:.0%}",
                )
            )
    for r in pretraining:
        rows.append(
            (
                f"pretraining step at seq {r['seq']}: bfloat16 >= {PRETRAINING_TARGET}x "
                "our float32",
                r["ratio"] >= PRETRAINING_TARGET,
                _ratio_cell(r),
            )
        )
    if not rows:
        return []
    return [
        "",
        "## Targets",
        "",
        "The goals of docs/benchmarks.md against this run's medians (ranges: the pairs').",
        "",
        "| goal | measured | met |",
        "|---|---|---|",
        *(
            f"| {goal} | {measured} | {'yes' if met else '**no**'} |"
            for goal, met, measured in rows
        ),
    ]


def worker_pretraining(seq, batch, pairs):
    """Our full pretraining step (bench_pretraining's) in float32 vs mixed_bfloat16."""
    import bench_pretraining as bp

    dtypes = ("float32", "mixed_bfloat16")
    calls = {
        dtype: bp._step_fn("ours", "albert_base_v2", dtype, False, batch, seq, os.cpu_count())
        for dtype in dtypes
    }
    seconds = bm.paired_seconds(calls, pairs, warm=2)
    return {
        "seq": seq,
        "batch": batch,
        **{dtype: batch / statistics.median(seconds[dtype]) for dtype in dtypes},
        **_ratio_summary(seconds["float32"], seconds["mixed_bfloat16"]),
    }


def worker_speed_paths(cell, names, pairs):
    """Ours with the speed paths as chosen against ours with the SpeedPaths fields
    `names` (comma-separated) off, in the encoder cell `cell` ("dtype:mode")."""
    from albert_tf.cpu import speed_paths

    dtype, mode = cell.split(":")
    batch, seq = _batch(mode), SIZE["seq"]
    off = dataclasses.replace(speed_paths.choose(), **{name: False for name in names.split(",")})
    calls = {"on": bm.model_call("ours", dtype, False, mode, batch, seq, os.cpu_count())}
    with speed_paths.forced(off):  # the step is traced at its first call
        calls["off"] = bm.model_call("ours", dtype, False, mode, batch, seq, os.cpu_count())
        calls["off"]()
    seconds = bm.paired_seconds(calls, pairs, warm=2)
    return {
        "dtype": dtype,
        "mode": mode,
        "batch": batch,
        "paths": names,
        **{side: batch / statistics.median(seconds[side]) for side in calls},
        **_ratio_summary(seconds["off"], seconds["on"]),
    }


def _run_worker(args, *worker_args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *map(str, worker_args)]
    cmd += ["--pairs", str(args.pairs), "--speed_paths", args.speed_paths]
    cmd += ["--seq", str(args.seq)] + (["--batch", str(args.batch)] if args.batch else [])
    emulated = bm.EMULATED_ISAS[args.emulate] if args.emulate else {}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=args.timeout, env=bm.worker_env(**emulated)
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        sys.exit(f"{' '.join(map(str, worker_args))} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(line[-1][len("RESULT ") :])
    print(result, flush=True)
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="float32,mixed_bfloat16", help="encoder cells' dtypes")
    p.add_argument(
        "--modes", default="infer,train", help="encoder cells' modes: infer, train, classify"
    )
    p.add_argument(
        "--pretraining_seqs",
        default="",
        help="seq:batch list: our float32 vs bfloat16 pretraining step at each (e.g. 128:16,512:4)",
    )
    p.add_argument(
        "--speed_paths_off",
        default="",
        help="SpeedPaths fields (comma-separated): instead of keras-hub, each encoder cell "
        "compares ours with them on and off (albert_tf.cpu.speed_paths)",
    )
    bm.add_emulate_flag(p)
    p.add_argument("--pairs", type=int, default=10, help="timed pairs per configuration")
    p.add_argument(
        "--speed_paths",
        default="auto",
        choices=("auto", "plain", "native"),
        help="the switch our side runs with (albert_tf.cpu.speed_paths)",
    )
    p.add_argument("--seq", type=int, default=128, help="encoder cells' sequence length")
    p.add_argument("--batch", type=int, help="encoder cells' batch (default 32; fwd+bwd 16)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per configuration")
    p.add_argument("--out", default=os.path.join(HERE, "results", "paired.md"))
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    SIZE.update(seq=args.seq, batch=args.batch)
    if args.worker:
        from albert_tf.cpu import speed_paths

        speed_paths.use(args.speed_paths)
        kind, a, b = args.worker
        if kind == "encoder":
            result = worker_encoder(a, b, args.pairs)
        elif kind == "speed_paths":
            result = worker_speed_paths(a, b, args.pairs)
        else:
            result = worker_pretraining(int(a), int(b), args.pairs)
        print("RESULT " + json.dumps(result))
        return
    cells = [
        (dtype, mode)
        for dtype in args.dtypes.split(",")
        for mode in filter(None, args.modes.split(","))
    ]
    if args.speed_paths_off:
        from albert_tf.cpu import speed_paths

        known = {field.name for field in dataclasses.fields(speed_paths.SpeedPaths)}
        unknown = sorted(set(args.speed_paths_off.split(",")) - known)
        if unknown:
            sys.exit(f"--speed_paths_off: unknown {unknown}; expected some of {sorted(known)}")
    model, nproc, isa, load = bm._machine()
    ablations = [
        _run_worker(args, "speed_paths", f"{dtype}:{mode}", args.speed_paths_off)
        for dtype, mode in (cells if args.speed_paths_off else [])
    ]
    encoder = [
        _run_worker(args, "encoder", dtype, mode)
        for dtype, mode in ([] if args.speed_paths_off else cells)
    ]
    pretraining = [
        _run_worker(args, "pretraining", *pair.split(":"))
        for pair in filter(None, args.pretraining_seqs.split(","))
    ]
    lines = [
        "# Paired calls in one process",
        "",
        f"Command: `python bench/bench_paired.py {shlex.join(argv or sys.argv[1:])}`",
        "",
        f"Commit measured: {bm.commit_measured()}",
        "",
        f"Machine: {model}, nproc {nproc}, ISA flags {' '.join(isa)}, "
        f"TF_ENABLE_ONEDNN_OPTS={bm.onednn_setting()}, load average at start {load}; "
        f"{bm._versions()}.",
        "",
        *bm.emulated_note(args.emulate),
        f"ALBERT-base, random weights, no XLA, ours with --speed_paths={args.speed_paths}. "
        "Rates: median over "
        f"{args.pairs} pairs. Ratios: median of the per-pair ratios with their range.",
    ]
    if encoder:
        lines += [
            "",
            "## Encoder: ours vs keras-hub",
            "",
            f"Seq {args.seq}, sequences/s. Ratio: keras-hub time / our time. Two tf.matmul "
            "peak probes of the dtype take part in every round of the rotation: a 2048^3 "
            f"product and the model's own FFN product ([batch*{args.seq}, 768] x [768, 3072]), "
            "each as a "
            "burst (two products) and sustained (repeated for as long as our call takes). "
            "MFU: our model's FLOPs over its summed time against the faster probe's FLOPs "
            "over its summed time (pooled over the run), then per round against that "
            "round's faster probe, median (range). By state: the per-round sustained MFU "
            "of the rounds whose sustained probe ran below the midpoint of the run's "
            "slowest and fastest (slow) and above it (fast), median (rounds); the machine "
            "switches between the two within seconds. Probes: median GFLOP/s (range).",
            "",
            "| dtype | mode | batch | ours | keras-hub | ratio (range) "
            "| our MFU, sustained peak: pooled, per round (range) "
            "| our MFU, burst peak: pooled, per round (range) "
            "| sustained MFU by state: slow, fast | "
            + " | ".join(f"{name} probe" for name in encoder[0]["probes"])
            + " |",
            "|---|---|---:|---:|---:|---|---|---|---|" + "---|" * len(encoder[0]["probes"]),
        ]
        for r in encoder:
            mode = MODE_NAMES[r["mode"]]
            probes = [
                f"{r['probes'][name] / 1e9:.0f} ({lo / 1e9:.0f}-{hi / 1e9:.0f})"
                for name, (lo, hi) in r["probe_ranges"].items()
            ]
            lines.append(
                f"| {r['dtype']} | {mode} | {r['batch']} | {r['ours']:.2f} "
                f"| {r['keras_hub']:.2f} "
                f"| {_ratio_cell(r)} "
                + "".join(
                    f"| {m['pooled']:.0%}, {m['mfu']:.0%} ({m['min']:.0%}-{m['max']:.0%}) "
                    if m
                    else "| - "
                    for m in (r["sustained"], r["burst"])
                )
                + f"| {_states_cell(r['sustained']) if r['sustained'] else '-'} "
                + f"| {' | '.join(probes)} |"
            )
    if ablations:
        lines += [
            "",
            "## Ours with and without speed paths",
            "",
            f"Seq {args.seq}, sequences/s; 'off': the speed paths named switched off "
            "(albert_tf.cpu.speed_paths), each side traced in the same process. Ratio: off time "
            "/ on time.",
            "",
            "| dtype | mode | batch | paths off | on | off | ratio (range) |",
            "|---|---|---:|---|---:|---:|---|",
        ]
        for r in ablations:
            mode = MODE_NAMES[r["mode"]]
            lines.append(
                f"| {r['dtype']} | {mode} | {r['batch']} | {r['paths']} | {r['on']:.2f} "
                f"| {r['off']:.2f} | {_ratio_cell(r)} |"
            )
    if pretraining:
        lines += [
            "",
            "## Our pretraining step: float32 vs mixed_bfloat16",
            "",
            "bench_pretraining's step (MLM + SOP, LAMB, clipping), examples/s. Ratio: float32 "
            "time / bfloat16 time.",
            "",
            "| seq | batch | float32 | mixed_bfloat16 | ratio (range) |",
            "|---:|---:|---:|---:|---|",
        ]
        for r in pretraining:
            lines.append(
                f"| {r['seq']} | {r['batch']} | {r['float32']:.2f} | {r['mixed_bfloat16']:.2f} "
                f"| {_ratio_cell(r)} |"
            )
    if args.seq == 128 and args.batch is None:
        lines += target_lines(encoder, pretraining)
    else:  # the goals are ALBERT-base's cells at seq 128
        lines += ["", "Targets: not checked (--seq or --batch other than the goals' cells)."]
    bm.write_markdown(args.out, lines)


if __name__ == "__main__":
    main()
