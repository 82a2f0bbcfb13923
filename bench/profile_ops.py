"""Where a step's time goes: TensorFlow profiler op breakdown and oneDNN primitives.

    python bench/profile_ops.py [--dtypes float32,mixed_bfloat16] [--modes infer,train,pretrain]
        [--steps 3] [--speed_paths auto|plain|native] [--emulate avx2]
        [--out bench/results/profile.md]

For each (dtype, mode), in its own subprocess, our model's step as the benchmarks run it:

  * infer / train: bench_model's inference (batch 32) and forward+backward (batch 16) of
    ALBERT-base at seq 128;
  * pretrain: bench_pretraining's full step (MLM + SOP loss, LAMB, clipping; seq 128 and
    batch 16 unless --pretrain_shape).

Two looks at the same step:

  * tf.profiler over --steps steps after two warm-up steps: the time of every kernel on
    TensorFlow's compute threads, by op class (`OP_CLASSES`), as a share of the summed
    kernel time (kernels on the two inter-op threads overlap, so the sum exceeds the wall
    time; shares stay comparable under background load). XLA loops count as one class.
    Also how long 0, 1 or 2 kernels ran at once on those threads (0: all idle).
  * ONEDNN_VERBOSE=1 over one step: every oneDNN primitive that ran, by kind,
    implementation (the ISA: `brg_matmul:avx10_1_512_amx` is AMX, `x64:gemm:jit` a
    non-AMX GEMM, `ref` a reference fallback) and source dtype, with calls and time
    per step. Then, in the same process, the model's dense products timed alone
    ([rows, in] x [in, out] of the query/key/value, intermediate and output kernels):
    each shape's rate inside the step against its rate alone says whether the step
    loses time in its products or around them. (Inside a training step two products
    often run at once on the two inter-op threads, which halves each one's rate
    without losing throughput; compare inference there.)

Writes Markdown to --out.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_model as bm  # noqa: E402  (model steps, machine description, subprocess env)

MODES = ("infer", "train", "pretrain")
# Op class -> TensorFlow op types (oneDNN builds rename kernels: _Mkl*).
OP_CLASSES = {
    "matmul (oneDNN matmul)": (
        "_MklMatMul",
        "_MklBatchMatMulV2",
        "_MklFusedBatchMatMulV2",
        "MatMul",
        "BatchMatMulV2",
    ),
    "matmul (our products, with what follows them)": (
        "AlbertDenseBiasGelu",
        "AlbertDenseHeads",
        "AlbertDenseResidualLayerNorm",
    ),
    "attention (our kernel: scores, softmax, . values)": ("AlbertAttention",),
    "fused matmul (oneDNN inner product)": (
        "_MklNativeFusedMatMul",
        "_MklFusedMatMul",
        "_FusedMatMul",
    ),
    "casts": ("Cast",),
    "layer norm and softmax kernels": ("_MklLayerNorm", "_MklSoftmax", "Softmax", "LogSoftmax"),
    "transposes": ("_MklTranspose", "Transpose", "_MklConjugateTranspose"),
    "reductions (Sum, Mean, BiasAddGrad)": ("Sum", "Mean", "Max", "BiasAddGrad", "L2Loss"),
    "gradient sums (AddN)": ("AddN",),
    "gathers and scatters": ("GatherV2", "ResourceGather", "UnsortedSegmentSum"),
}
XLA_CLASS = "XLA loops (fused elementwise)"
TOP_SITES = 12
PROBE_REPEATS = 3  # calls of each dense product alone, after the logged step
OPTIMIZER_CLASS = "optimizer update"
OTHER_CLASS = "other elementwise (Mul, AddV2, Sub, Tanh, ...)"
# A profiler event of one kernel is named "<node name>:<op type>".
_KERNEL_EVENT = re.compile(r"^(?P<node>[^:]+(?:/[^:]*)*):(?P<op>[A-Za-z_][A-Za-z0-9_]*)$")


def kernel_site(node, op):
    """Where a kernel comes from, with layer numbers folded away: "<op>: <last three
    name scopes>", e.g. "Cast: group_#_inner_group_#/Cast/Cast" for all layers' casts."""
    stem = re.sub(r"\d+", "#", re.sub(r"_\d+(/|$)", r"\1", node))
    return f"{op}: {'/'.join(stem.split('/')[-3:])}"


def op_class(node, op):
    if re.search(r"(^|/)(lamb|adam|adamw)(/|$)", node, re.IGNORECASE):
        return OPTIMIZER_CLASS
    for name, ops in OP_CLASSES.items():
        if op in ops:
            return name
    return OTHER_CLASS


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------


def _step(dtype, mode, pretrain_shape):
    """(step callable, its analytic matmul FLOPs); pretrain_shape "seq:batch"."""
    import bench_pretraining as bp

    from albert_tf.model import config as albert_config

    cfg = albert_config.preset("albert_base_v2")
    if mode == "pretrain":
        seq, batch = map(int, pretrain_shape.split(":"))
        call = bp._step_fn("ours", "albert_base_v2", dtype, False, batch, seq, os.cpu_count())
        return call, bp.pretraining_flops(cfg, batch, seq)
    batch = 16 if mode == "train" else 32
    call = bm.model_call("ours", dtype, False, mode, batch, 128, os.cpu_count())
    return call, bm.model_flops(cfg, batch, 128, mode == "train")


def worker_profile(args):
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    call, flops = _step(args.dtype, args.mode, args.pretrain_shape)
    call()
    call()
    probe_dtype = bm.peak_dtype(args.dtype)
    peaks = [bm._local_peak(probe_dtype)]
    logdir = tempfile.mkdtemp(prefix="profile_ops_")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(args.steps):
        call()
    wall = (time.perf_counter() - start) / args.steps
    tf.profiler.experimental.stop()
    peaks.append(bm._local_peak(probe_dtype))
    space = xplane_pb2.XSpace()
    with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    seconds, calls = collections.Counter(), collections.Counter()
    sites, site_calls = collections.Counter(), collections.Counter()
    intervals = []
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if name == "CpuExecutable::ExecuteAsyncOnStream":
                    kind = XLA_CLASS
                else:
                    match = _KERNEL_EVENT.match(name)
                    if not match or "::" in name:
                        continue  # executor bookkeeping, not a kernel
                    kind = op_class(match["node"], match["op"])
                    if "matmul" not in kind:
                        site = kernel_site(match["node"], match["op"])
                        sites[site] += event.duration_ps / 1e12 / args.steps
                        site_calls[site] += 1 / args.steps
                seconds[kind] += event.duration_ps / 1e12 / args.steps
                calls[kind] += 1 / args.steps
                start = line.timestamp_ns * 1000 + event.offset_ps
                intervals.append((start, start + event.duration_ps))
    result = {"wall_s": wall, "seconds": seconds, "calls": calls, "flops": flops}
    result["concurrency"] = {
        count: ps / 1e12 / args.steps for count, ps in kernels_running(intervals).items()
    }
    result["sites"] = [(site, sec, site_calls[site]) for site, sec in sites.most_common(TOP_SITES)]
    print("RESULT " + json.dumps({**result, "peak": sum(peaks) / 2}))


def kernels_running(intervals):
    """{number of kernels running at once: picoseconds} over the span of `intervals`
    [(start_ps, end_ps)] of kernels on the compute threads; 0 is time with none."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    spans, running = collections.Counter(), 0
    for (t, change), (t_next, _) in zip(edges, edges[1:]):
        running += change
        spans[running] += t_next - t
    return spans


def dense_product_shapes(mode, pretrain_shape):
    """The (rows, in, out) of ALBERT-base's dense products in a step of `mode`: the
    query/key/value and attention-output kernels [H, H], the intermediate [H, F] and the
    FFN output [F, H], rows = batch * seq."""
    from albert_tf.model import config as albert_config

    cfg = albert_config.preset("albert_base_v2")
    if mode == "pretrain":
        seq, batch = map(int, pretrain_shape.split(":"))
    else:
        seq, batch = 128, (16 if mode == "train" else 32)
    rows, h, f = batch * seq, cfg.hidden_size, cfg.intermediate_size
    return [(rows, h, h), (rows, h, f), (rows, f, h)]


def worker_onednn(args):
    os.environ["ONEDNN_VERBOSE"] = "1"
    import tensorflow as tf

    call = _step(args.dtype, args.mode, args.pretrain_shape)[0]
    call()
    call()
    sys.stdout.flush()
    print("=== step begins ===", flush=True)
    call()
    sys.stdout.flush()
    print("=== step ends ===", flush=True)
    dtype = bm.peak_dtype(args.dtype)
    products = []
    for m, k, n in dense_product_shapes(args.mode, args.pretrain_shape):
        a = tf.cast(tf.random.normal([m, k]), dtype)
        b = tf.cast(tf.random.normal([k, n]), dtype)
        product = tf.function(lambda a=a, b=b: tf.matmul(a, b))
        product()  # traced and warm before the marker
        products.append(product)
    sys.stdout.flush()
    print("=== probes begin ===", flush=True)
    for product in products:
        for _ in range(PROBE_REPEATS):
            product()
    sys.stdout.flush()
    print("=== probes end ===", flush=True)


def _onednn_execs(stdout):
    """(section, kind, implementation, descriptors, shape, ms) of every primitive run
    between `worker_onednn`'s markers (section "step" or "probes"), and oneDNN's ISA
    line (None if absent)."""
    execs, isa, section = [], None, None
    for line in stdout.splitlines():
        if line.startswith("=== "):
            name, edge = line.split()[1:3]
            section = name if edge.startswith("begin") else None
        elif "info,cpu,isa:" in line:
            isa = line.split("isa:", 1)[1]
        elif section and line.startswith("onednn_verbose,") and ",exec," in line:
            fields = line.split(",")
            i = fields.index("exec")
            kind, impl, descs = fields[i + 2], fields[i + 3] or "-", fields[i + 5]
            execs.append((section, kind, impl, descs, fields[-2], float(fields[-1])))
    return execs, isa


def onednn_breakdown(stdout):
    """{(kind, implementation, source dtype): [calls, ms]} of the primitives of the step
    in `worker_onednn`'s output, and oneDNN's ISA line."""
    rows = collections.defaultdict(lambda: [0, 0.0])
    execs, isa = _onednn_execs(stdout)
    for section, kind, impl, descs, _, ms in execs:
        if section == "step":
            src = re.search(r"src[:_]([a-z0-9]+)", descs)
            row = rows[(kind, impl, src.group(1) if src else "-")]
            row[0] += 1
            row[1] += ms
    return dict(rows), isa


def product_rates(stdout):
    """{(m, k, n): (calls in the step, median GFLOP/s in the step, median GFLOP/s alone)}
    for each 2-D oneDNN matmul [m, k] x [k, n] that ran both in the step and among the
    probes of `worker_onednn`'s output (in the step: with any operand layout)."""
    rates = collections.defaultdict(lambda: {"step": [], "probes": []})
    for section, kind, _, _, shape, ms in _onednn_execs(stdout)[0]:
        match = re.fullmatch(r"(\d+)x(\d+):(\d+)x(\d+)", shape)
        if kind != "matmul" or not match or ms <= 0:
            continue
        m, k, _, n = map(int, match.groups())
        rates[(m, k, n)][section].append(2 * m * k * n / ms / 1e6)
    return {
        shape: (len(r["step"]), statistics.median(r["step"]), statistics.median(r["probes"]))
        for shape, r in rates.items()
        if r["step"] and r["probes"]
    }


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def _run(worker, dtype, mode, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", worker]
    cmd += ["--dtypes", dtype, "--modes", mode, "--steps", str(args.steps)]
    cmd += ["--pretrain_shape", args.pretrain_shape, "--speed_paths", args.speed_paths]
    proc = subprocess.run(
        cmd, env=bm.worker_env(), capture_output=True, text=True, timeout=args.timeout
    )
    if proc.returncode:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{worker} {dtype} {mode} failed: {tail[0][:300]}")
    return proc.stdout


def _profile_table(result):
    total = sum(result["seconds"].values())
    flops, peak, wall = result["flops"], result["peak"], result["wall_s"]
    matmul = sum(v for k, v in result["seconds"].items() if "matmul" in k)
    lines = [
        f"Wall time per step {wall:.3f} s; summed kernel time per step {total:.3f} s. "
        f"Model {flops / wall / 1e9:.0f} GFLOP/s against a tf.matmul 2048^3 peak of "
        f"{peak / 1e9:.0f} GFLOP/s measured right before and after (MFU "
        f"{100 * flops / wall / peak:.0f}%); the matrix-product kernels alone run the "
        f"model's FLOPs at {100 * flops / max(matmul, 1e-9) / peak:.0f}% of that peak. "
        "Kernels running at once on the compute threads, per step: "
        + ", ".join(
            f"{count}: {1000 * sec:.0f} ms"
            for count, sec in sorted((int(k), v) for k, v in result["concurrency"].items())
        )
        + " (0: the compute threads idle).",
        "",
        "| op class | kernel s / step | share | calls / step |",
        "|---|---|---|---|",
    ]
    for kind, sec in sorted(result["seconds"].items(), key=lambda kv: -kv[1]):
        lines.append(
            f"| {kind} | {sec:.3f} | {100 * sec / total:.1f}% | {result['calls'][kind]:.0f} |"
        )
    lines += [
        "",
        f"Largest TensorFlow kernels outside the matrix products and XLA loops (top {TOP_SITES}; "
        "op: last name scopes, layer numbers as #):",
        "",
        "| kernel | ms / step | share | calls / step |",
        "|---|---|---|---|",
    ]
    for site, sec, n in result["sites"]:
        lines.append(f"| {site} | {1000 * sec:.1f} | {100 * sec / total:.1f}% | {n:.0f} |")
    return lines


def _onednn_table(rows):
    total = sum(ms for _, ms in rows.values())
    lines = [
        "| oneDNN primitive | implementation | src dtype | calls / step | ms / step | share |",
        "|---|---|---|---|---|---|",
    ]
    for (kind, impl, src), (n, ms) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        lines.append(
            f"| {kind} | {impl} | {src} | {n} | {ms:.1f} | {100 * ms / max(total, 1e-9):.1f}% |"
        )
    return lines


def _product_rate_table(rates):
    lines = [
        "| product [rows, in] x [in, out] | calls in the step | GFLOP/s in the step | "
        "GFLOP/s alone | in the step / alone |",
        "|---|---:|---:|---:|---:|",
    ]
    for (m, k, n), (calls, inside, alone) in sorted(rates.items()):
        lines.append(
            f"| [{m}, {k}] x [{k}, {n}] | {calls} | {inside:.0f} | {alone:.0f} | "
            f"{inside / alone:.2f} |"
        )
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtypes", default="mixed_bfloat16", help="comma list of dtypes")
    p.add_argument("--modes", default="infer,train", help="comma list of " + ", ".join(MODES))
    p.add_argument("--steps", type=int, default=3, help="profiled steps per configuration")
    p.add_argument("--pretrain_shape", default="128:16", help="seq:batch of the pretrain mode")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per subprocess")
    p.add_argument("--out", default=os.path.join(HERE, "results", "profile.md"))
    p.add_argument(
        "--speed_paths",
        default="auto",
        choices=("auto", "plain", "native"),
        help="the switch our model runs with (albert_tf.cpu.speed_paths)",
    )
    p.add_argument("--worker", choices=("profile", "onednn"), help=argparse.SUPPRESS)
    bm.add_emulate_flag(p)
    args = p.parse_args(argv)
    bm.run_emulated(args.emulate)  # the subprocesses inherit its settings
    if args.worker:
        from albert_tf.cpu import speed_paths

        speed_paths.use(args.speed_paths)
        args.dtype, args.mode = args.dtypes, args.modes
        return (worker_profile if args.worker == "profile" else worker_onednn)(args)

    model, ncpu, isa_flags, load = bm._machine()
    cmd = "python bench/profile_ops.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# Step-time breakdown by op class and oneDNN primitive",
        "",
        f"Command: `{cmd.strip()}`",
        "",
        f"Machine: {model}, nproc {ncpu}, ISA flags {' '.join(isa_flags)}, "
        f"TF_ENABLE_ONEDNN_OPTS={bm.onednn_setting()}, load average at start {load}; "
        f"{bm._versions()}.",
        "",
        *bm.emulated_note(args.emulate),
    ]
    isa_line = None
    for dtype in args.dtypes.split(","):
        for mode in args.modes.split(","):
            profile = stdout_json(_run("profile", dtype, mode, args))
            onednn_stdout = _run("onednn", dtype, mode, args)
            rows, isa = onednn_breakdown(onednn_stdout)
            isa_line = isa_line or isa
            title = {"infer": "inference, batch 32", "train": "forward+backward, batch 16"}
            seq, batch = args.pretrain_shape.split(":")
            pretrain = f"pretraining step, seq {seq}, batch {batch}"
            lines += [f"## {dtype}, {title.get(mode, pretrain)}", ""]
            lines += _profile_table(profile) + [""] + _onednn_table(rows) + [""]
            lines += [
                "The dense products' rates (medians over calls of each shape; oneDNN's "
                f"timings) inside the step and alone right after it ({PROBE_REPEATS} calls "
                "each):",
                "",
                *_product_rate_table(product_rates(onednn_stdout)),
                "",
            ]
            print(f"{dtype} {mode}: done", flush=True)
    if isa_line:
        lines.insert(6, f"oneDNN's ISA: {isa_line}.\n")
    bm.write_markdown(args.out, lines)
    return 0


def stdout_json(stdout):
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError("no RESULT line: " + stdout[-300:])


if __name__ == "__main__":
    sys.exit(main())
