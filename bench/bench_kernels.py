"""Our elementwise kernels against what the training step runs without them.

    python bench/bench_kernels.py [--dtype bfloat16|float32] [--pairs 15] [--batch 16]
        [--emulate avx2] [--out bench/results/native_kernels.md]

For each native elementwise kernel of the training step (albert_tf.cpu.native_kernels) at
ALBERT-base's shapes, `--batch` x 128 rows, times in one process, in pairs (ABBA...), on
all threads, each side a tf.function over the same fixed random operands:

  * ours: the functions of albert_tf.cpu.fused_elementwise the layers call, traced with the
    kernels on: bias + GELU, its gradient with the bias's sum, the query/key/value bias with
    the split into heads and its gradient, the softmax's gradient, and the sum of twelve
    shared-kernel gradients;
  * without: the same functions traced with `SpeedPaths.native_cpu_kernels` off, as the
    step runs them then: XLA loops (with `block.bias_gradient` for the bias's sum), the
    bias and a transpose into heads and back, and a running sum of the terms (which
    Grappler may turn into AddNs). (A float32 step without the kernels differentiates the
    softmax's op chain instead of the loop timed here.)

Reports each side's median time per call and the median pair ratio (without / ours).
"""

from __future__ import annotations

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bench_model as bm  # noqa: E402  (machine description, result file)

HIDDEN, INTERMEDIATE, HEADS, SEQ = 768, 3072, 12, 128
TERMS = 12  # one shared kernel's gradients over ALBERT-base's layers


def kernel_pairs(batch: int, dtype: str):
    """[(name, ours, without)]: zero-argument callables, each a tf.function over fixed random
    operands in `dtype`, for the elementwise kernels of a training step at batch x SEQ: the
    same code traced with `SpeedPaths.native_cpu_kernels` on and off."""

    import numpy as np
    import tensorflow as tf

    from albert_tf.cpu import block, speed_paths
    from albert_tf.cpu import fused_elementwise as fe

    without_kernels = speed_paths.CPU_AUTO
    rng = np.random.default_rng(0)
    rows = batch * SEQ

    def operand(*shape, scale=1.0):
        return tf.constant(rng.normal(size=shape) * scale, dtype)

    def both(fn, *args):
        """(ours, without): fn traced with the kernels on and off; each callable waits for
        every output and copies one value."""
        sides = []
        for paths in (speed_paths.CPU_NATIVE, without_kernels):
            call = tf.function(fn)
            with speed_paths.forced(paths):
                call.get_concrete_function(*args)  # the path is chosen when traced

            def run(call=call):
                return [tf.reshape(t, [-1])[0].numpy() for t in tf.nest.flatten(call(*args))]

            sides.append(run)
        return tuple(sides)

    def gelu_gradients(dz, y, b):  # as the block's hand-written gradient takes them
        dy, dbias = fe.bias_gelu_tanh_backward(dz, y, b)
        return dy, block.bias_gradient(dy) if dbias is None else dbias

    def biased_heads(y, b):  # as the attention's query/key/value: [B * S, H] -> heads
        joined = fe.bias_add_heads(y, b, HEADS, batch)
        if joined is not None:
            return joined
        y = block.bias_and_activation(y, b, training=True)
        return tf.transpose(tf.reshape(y, [batch, SEQ, HEADS, -1]), [0, 2, 1, 3])

    def heads_gradients(y, b, dheads):
        with tf.GradientTape() as tape:
            tape.watch([y, b])
            out = biased_heads(y, b)
        return tape.gradient(out, [y, b], output_gradients=dheads)

    y, dz = operand(rows, INTERMEDIATE, scale=2.0), operand(rows, INTERMEDIATE)
    bias = operand(INTERMEDIATE)
    q, q_bias = operand(rows, HIDDEN), operand(HIDDEN)
    dheads = operand(batch, HEADS, SEQ, HIDDEN // HEADS)
    probs = tf.cast(tf.nn.softmax(rng.normal(size=(batch, HEADS, SEQ, SEQ)) * 3), dtype)
    dprobs = operand(batch, HEADS, SEQ, SEQ)
    terms = [operand(HIDDEN, INTERMEDIATE, scale=0.01) for _ in range(TERMS)]
    return [
        (f"bias + GELU `[{rows}, 3072]`", *both(fe.bias_gelu_tanh, y, bias)),
        (f"GELU gradient + the bias's sum `[{rows}, 3072]`", *both(gelu_gradients, dz, y, bias)),
        (f"bias + split into heads `[{rows}, 768]`", *both(biased_heads, q, q_bias)),
        (
            f"heads gradient + the bias's sum `[{rows}, 768]`",
            *both(heads_gradients, q, q_bias, dheads),
        ),
        (
            f"softmax gradient `[{batch}, 12, 128, 128]`",
            *both(lambda dp, p: fe.attention_softmax_backward(dp, p, 0.125), dprobs, probs),
        ),
        (
            f"sum of {TERMS} kernel gradients `[768, 3072]`",
            *both(lambda *t: fe.sum_terms(list(t)), *terms),
        ),
    ]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--pairs", type=int, default=15)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--out", default=os.path.join(HERE, "results", "native_kernels.md"))
    bm.add_emulate_flag(p)
    args = p.parse_args(argv)
    bm.run_emulated(args.emulate)
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    from albert_tf.cpu import native_kernels

    if native_kernels.library() is None:
        sys.exit("bench_kernels: the native kernels could not be built here")
    bm.write_paired_table(
        args,
        argv,
        "bench_kernels.py",
        f"Our {args.dtype} elementwise kernels against what the step runs without them",
        f"{args.dtype}, batch {args.batch} x seq {SEQ}, all threads; median ms per call over "
        f"{args.pairs} pairs; ratio: the median of the per-pair ratios (time without / our "
        "time), with its range.",
        ("kernel", "ours", "without"),
        kernel_pairs(args.batch, args.dtype),
    )


if __name__ == "__main__":
    main()
