"""The bfloat16 CPU kernels' loops against the memory traffic they cannot avoid.

    python bench/bench_loops.py [--rounds 15] [--against REV] [--out bench/results/loops.md]

Builds albert_tf/cpu/native/loops.cc twice as a plain shared library (no TensorFlow; as the
tests do): as the kernels run it (`-march=native`, AVX-512 vector code where the CPU has
it) and with -DALBERT_PLAIN_LOOPS (the loops other CPUs run). Calls each loop on one
thread through ctypes at ALBERT-base's shapes (hidden 768, intermediate 3072, 12 heads,
seq 128; forward+backward at batch 16, inference at batch 32), --rounds interleaved
rounds, and reports the median time per call of both builds next to a floor: the bytes
the loop must read and write, at the rate of a plain copy (numpy, one thread) of the
same size measured in the same rounds. --against REV adds a third build, loops.cc as
git revision REV has it (the same flags as `vector`), timed in the same rounds: what a
change to the loops gained. A loop near its floor is bound by memory and no
rewriting of its arithmetic will speed it up; only fusing it into a neighbouring pass
(or into a matrix product, which TensorFlow's oneDNN products do not offer for these
passes) removes its traffic. The last lines sum the loops per step (calls per step as in
bench/profile_ops.py's profiles).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_model as bm  # noqa: E402  (machine description)

from albert_tf.cpu import native_kernels  # noqa: E402

HIDDEN, INTERMEDIATE, HEADS, HEAD_SIZE, SEQ = 768, 3072, 12, 64, 128
# Shared kernels whose gradients AlbertSumTerms adds over the 12 layers: [in, out].
KERNELS = ((768, 768),) * 4 + ((768, 3072), (3072, 768))


def _bits(rng, shape, scale=1.0):
    """Random bfloat16 bit patterns (uint16) of normal values times `scale`."""
    values = (rng.normal(size=shape) * scale).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


def _ptr(a):
    return ctypes.c_void_p(a.ctypes.data)


def loop_calls(batch: int, training: bool, seed: int = 0):
    """[(name, calls per step, bytes read and written, fn(lib) -> None)] for one step of
    ALBERT-base at `batch` x SEQ; each fn makes one call of its loop over all rows."""
    rng = np.random.default_rng(seed)
    rows, n64 = batch * SEQ, ctypes.c_int64
    f32 = np.float32
    y, dz = _bits(rng, (rows, INTERMEDIATE), 2), _bits(rng, (rows, INTERMEDIATE))
    bias_i, out_i = _bits(rng, INTERMEDIATE), np.zeros((rows, INTERMEDIATE), np.uint16)
    dbias_i = np.zeros(INTERMEDIATE, f32)
    x, bias_h = _bits(rng, (rows, HIDDEN)), _bits(rng, HIDDEN)
    residual = rng.normal(size=(rows, HIDDEN)).astype(f32)
    gamma, beta = rng.normal(size=(2, HIDDEN)).astype(f32)
    out, xhat = np.zeros((rows, HIDDEN), f32), np.zeros((rows, HIDDEN), f32)
    out16, rstd = np.zeros((rows, HIDDEN), np.uint16), np.ones(rows, f32)
    copies = [_bits(rng, (rows, HIDDEN)) for _ in range(3)]
    copy_ptrs = (ctypes.c_void_p * 3)(*[c.ctypes.data for c in copies])
    sums = np.zeros((3, HIDDEN), f32)
    heads = np.zeros((rows, HIDDEN), np.uint16)
    prob_rows = batch * HEADS * SEQ
    dprobs = _bits(rng, (prob_rows, SEQ))
    probs = (rng.dirichlet(np.ones(SEQ), prob_rows).astype(f32).view(np.uint32) >> 16).astype(
        np.uint16
    )
    dscores = np.zeros((prob_rows, SEQ), np.uint16)
    eps = ctypes.c_float(1e-12)
    ln_in = [_ptr(t) for t in (x, bias_h, residual, gamma, beta)] + [eps]
    gi, h = rows * INTERMEDIATE * 2, rows * HIDDEN  # bytes of a bf16 [rows, 3072]; elements
    calls = [
        (
            "bias + GELU `[rows, 3072]`",
            12,
            2 * gi,
            lambda lib: lib.albert_bias_gelu_rows(
                _ptr(y), _ptr(bias_i), _ptr(out_i), n64(rows), n64(INTERMEDIATE)
            ),
        )
    ]
    if not training:
        calls.append(
            (
                "residual layer norm `[rows, 768]`",
                24,
                h * (2 + 4 + 4 + 2),
                lambda lib: lib.albert_residual_layer_norm_rows(
                    *ln_in, _ptr(out), _ptr(out16), n64(rows), n64(HIDDEN)
                ),
            )
        )
        calls.append(_heads_call(x, bias_h, heads))
        return calls
    calls += [
        (
            "GELU gradient `[rows, 3072]`",
            12,
            3 * gi,
            lambda lib: lib.albert_bias_gelu_backward_rows(
                _ptr(dz),
                _ptr(y),
                _ptr(bias_i),
                _ptr(out_i),
                _ptr(dbias_i),
                n64(rows),
                n64(INTERMEDIATE),
            ),
        ),
        (
            "residual layer norm + moments `[rows, 768]`",
            24,
            h * (2 + 4 + 4 + 2 + 4),
            lambda lib: lib.albert_residual_layer_norm_moments_rows(
                *ln_in, _ptr(out), _ptr(out16), _ptr(xhat), _ptr(rstd), n64(rows), n64(HIDDEN)
            ),
        ),
    ]
    for count in (3, 1):  # the FFN layer norm's output feeds Q, K and V; the other's one product
        calls.append(
            (
                f"layer-norm gradient, {count} bfloat16 cop{'ies' if count > 1 else 'y'}",
                12,
                h * (4 + 2 * count + 4 + 4 + 2),
                lambda lib, count=count: lib.albert_layer_norm_backward_rows(
                    _ptr(residual),
                    copy_ptrs,
                    n64(count),
                    _ptr(xhat),
                    _ptr(rstd),
                    _ptr(gamma),
                    _ptr(out),
                    _ptr(out16),
                    _ptr(sums[0]),
                    _ptr(sums[1]),
                    _ptr(sums[2]),
                    n64(rows),
                    n64(HIDDEN),
                ),
            )
        )
    calls += [
        _heads_call(x, bias_h, heads),
        (
            "heads gradient `[rows, 768]`",
            36,
            2 * 2 * h,
            lambda lib: lib.albert_heads_backward_rows(
                _ptr(x),
                _ptr(heads),
                _ptr(sums[0]),
                n64(0),
                n64(rows),
                n64(SEQ),
                n64(HEADS),
                n64(HEAD_SIZE),
            ),
        ),
        (
            "softmax gradient `[batch * 12 * 128, 128]`",
            12,
            3 * 2 * prob_rows * SEQ,
            lambda lib: lib.albert_softmax_backward_rows(
                _ptr(dprobs),
                _ptr(probs),
                ctypes.c_float(0.125),
                _ptr(dscores),
                n64(prob_rows),
                n64(SEQ),
            ),
        ),
    ]
    for size in sorted({a * b for a, b in KERNELS}):
        terms = [_bits(rng, size) for _ in range(12)]
        pointers = (ctypes.c_void_p * 12)(*[t.ctypes.data for t in terms])
        total = np.zeros(size, np.uint16)
        calls.append(
            (
                f"sum of 12 kernel gradients `[{size}]`",
                sum(a * b == size for a, b in KERNELS),
                13 * 2 * size,
                lambda lib, p=pointers, t=total, n=size, keep=terms: lib.albert_sum_terms(
                    p, n64(12), _ptr(t), n64(0), n64(n)
                ),
            )
        )
    return calls


def _heads_call(x, b, out):
    """loop_calls' entry for the bias + split into heads of x [rows, 768] (both steps)."""
    rows = x.shape[0]
    n64 = ctypes.c_int64
    return (
        "bias + split into heads `[rows, 768]`",
        36,
        2 * 2 * x.size,
        lambda lib: lib.albert_bias_add_heads_rows(
            _ptr(x), _ptr(b), _ptr(out), n64(0), n64(rows), n64(SEQ), n64(HEADS), n64(HEAD_SIZE)
        ),
    )


def _source_at(revision: str) -> str:
    """albert_tf/cpu/native/loops.cc as git revision `revision` of this checkout has it; exits
    with one line naming --against where git cannot show it."""
    import subprocess

    shown = subprocess.run(
        ["git", "show", f"{revision}:albert_tf/cpu/native/loops.cc"],
        cwd=os.path.dirname(HERE),
        capture_output=True,
        text=True,
    )
    if shown.returncode != 0:
        reason = (shown.stderr.strip().splitlines() or ["git failed"])[-1]
        sys.exit(f"bench_loops: --against {revision}: no loops.cc there ({reason})")
    return shown.stdout


def copy_rate(nbytes: int):
    """fn() -> seconds of one numpy copy of nbytes (so 2 * nbytes moved)."""
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)

    def run():
        start = time.perf_counter()
        np.copyto(dst, src)
        return time.perf_counter() - start

    return run


def measure(libs, calls, rounds):
    """{(name, variant): median seconds per call}; variant 'floor' is the copy estimate."""
    times = {}
    copies = {name: copy_rate(nbytes // 2) for name, _, nbytes, _ in calls}
    for _, _, _, fn in calls:  # pages touched once
        for lib in libs.values():
            fn(lib)
    for round_ in range(rounds):
        order = list(libs.items())[:: 1 if round_ % 2 == 0 else -1]  # ABBA...
        for name, _, _, fn in calls:
            # Each timed call right after an untimed one on the same data: warm caches, as
            # in a step, where a loop reads what the product before it has just written.
            for variant, lib in order:
                fn(lib)
                start = time.perf_counter()
                fn(lib)
                times.setdefault((name, variant), []).append(time.perf_counter() - start)
            copies[name]()
            times.setdefault((name, "floor"), []).append(copies[name]())
    return {key: statistics.median(values) for key, values in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--against", help="git revision whose loops.cc is timed beside ours")
    p.add_argument("--out", default=os.path.join(HERE, "results", "loops.md"))
    args = p.parse_args(argv)
    start = time.strftime("%Y-%m-%d %H:%M:%S")
    load_start = bm._machine()[3]
    with tempfile.TemporaryDirectory() as work:
        libs = {}
        builds = [("vector", (), None), ("plain", ("-DALBERT_PLAIN_LOOPS",), None)]
        if args.against:
            source = os.path.join(work, "against.cc")
            with open(source, "w") as f:
                f.write(_source_at(args.against))
            builds.append(("against", (), source))
        for variant, flags, source in builds:
            target = os.path.join(work, f"{variant}.so")
            native_kernels.build_loops(target, *flags, source=source)
            libs[variant] = ctypes.CDLL(target)
        sections = []
        for title, batch, training in (
            ("forward+backward, batch 16", 16, True),
            ("inference, batch 32", 32, False),
        ):
            calls = loop_calls(batch, training)
            sections.append((title, batch * SEQ, calls, measure(libs, calls, args.rounds)))
    model, nproc, isa, load = bm._machine()
    command = shlex.join(sys.argv[1:] if argv is None else argv)
    lines = [
        "# The bfloat16 kernels' loops against their memory floor",
        "",
        f"Command: `python bench/bench_loops.py {command}`",
        "",
        f"Machine: {model}, nproc {nproc}, ISA flags {' '.join(isa)}, load average at start "
        f"{load_start}, at end {load}; started {start}. One thread, median of {args.rounds} "
        "interleaved rounds. `vector`: loops.cc as the kernels build it here; `plain`: "
        "with -DALBERT_PLAIN_LOOPS"
        + (f"; `against`: loops.cc of {args.against}" if args.against else "")
        + ". Floor: the loop's bytes read and written at the rate of a numpy copy of the "
        "same size in the same rounds.",
    ]
    against = ("against",) if args.against else ()
    for title, rows, calls, times in sections:
        lines += [
            "",
            f"## {title} ({rows} rows)",
            "",
            "| loop | calls / step | MB moved | vector ms | plain ms | floor ms | vector / floor | "
            "plain / vector |" + (" against ms | against / vector |" if against else ""),
            "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if against else ""),
        ]
        step = {"vector": 0.0, "plain": 0.0, "floor": 0.0, **{a: 0.0 for a in against}}
        for name, count, nbytes, _ in calls:
            t = {v: times[(name, v)] for v in step}
            for v in step:
                step[v] += count * t[v]
            lines.append(
                f"| {name} | {count} | {nbytes / 1e6:.1f} | {t['vector'] * 1e3:.2f} | "
                f"{t['plain'] * 1e3:.2f} | {t['floor'] * 1e3:.2f} | "
                f"{t['vector'] / t['floor']:.2f} | {t['plain'] / t['vector']:.2f} |"
                + "".join(f" {t[a] * 1e3:.2f} | {t[a] / t['vector']:.2f} |" for a in against)
            )
        lines += [
            "",
            f"Per step, one thread: vector {step['vector'] * 1e3:.0f} ms, plain "
            f"{step['plain'] * 1e3:.0f} ms, floor {step['floor'] * 1e3:.0f} ms"
            + "".join(f", against {step[a] * 1e3:.0f} ms" for a in against)
            + ".",
        ]
    bm.write_markdown(args.out, lines)


if __name__ == "__main__":
    main()
