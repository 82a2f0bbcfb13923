"""Our products against oneDNN's product plus the work they carry, per shape.

    python bench/bench_products.py [--dtype bfloat16|float32] [--pairs 20] [--batch 32]
        [--emulate avx2] [--out bench/results/native_products.md]

Where this CPU has them (albert_tf.cpu.native_kernels.products_ready(dtype): bfloat16 with
AVX512_BF16, on its AMX tiles where it has them; float32 with AVX-512 or AVX2; --emulate
avx2 runs it as on a CPU without AVX-512, bench_model.EMULATED_ISAS), for each dense
product of an ALBERT-base layer at `--batch` x 128 rows, times in one process, in pairs
(ABBA...):

  * ours: our product that finishes its float32 accumulators itself
    (`dense_heads`, `dense_bias_gelu`, `dense_residual_layer_norm`), its
    kernel packed beforehand (once per pass in the model, where all 12 layers share it);
    and our attention kernel (`fused_elementwise.attention`) against the block's path
    with it off (two batched products, the softmax, the transpose into rows);
  * oneDNN: `tf.matmul` of the same operands, then what the model does after it with
    `SpeedPaths.native_products` off. bfloat16: our native kernel for the same finishing
    work (`bias_add_heads` over the three groups' heads, `bias_gelu`,
    `residual_layer_norm`; the model's query/key/value product there is a broadcast batch
    product with an XLA bias loop, here the plain product with the native heads kernel,
    the faster of the two). float32: the block's own `bias_and_activation` (bias and GELU
    that Grappler fuses into oneDNN's product), the transpose to heads, and
    `fused_elementwise.layer_norm` (oneDNN's layer norm).

Reports each side's median time per call and the median pair ratio (oneDNN time / ours).
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


def product_pairs(batch: int, dtype: str):
    """[(name, ours, onednn)]: zero-argument callables (each a tf.function over fixed
    random operands in `dtype`) for the four products of a layer at batch x SEQ rows."""
    import numpy as np
    import tensorflow as tf

    from albert_tf.cpu import block
    from albert_tf.cpu import fused_elementwise as fe
    from albert_tf.cpu import native_kernels as nk

    rng = np.random.default_rng(0)
    rows = batch * SEQ
    bfloat16 = dtype == "bfloat16"

    def operand(*shape, scale=1.0):
        return tf.constant(rng.normal(size=shape) * scale, dtype)

    def f32(*shape):
        return tf.constant(rng.normal(size=shape), tf.float32)

    def timed(fn, *args):
        call = tf.function(fn)
        return lambda: call(*args)[0, 0].numpy()  # waits for the result, copies one value

    def onednn_heads(x, kernel, bias):  # [rows, 768] -> heads [3, B, N, S, D] as rows
        if bfloat16:
            y = tf.reshape(tf.matmul(x, kernel), [batch, SEQ, -1])
            return nk.bias_add_heads(y, bias, 3 * HEADS)
        y = block.bias_and_activation(tf.matmul(x, kernel), bias)
        return tf.transpose(tf.reshape(y, [batch, SEQ, 3, HEADS, -1]), [2, 0, 3, 1, 4])

    def onednn_gelu(x, kernel, bias):
        if bfloat16:
            return nk.bias_gelu(tf.matmul(x, kernel), bias)
        return block.bias_and_activation(tf.matmul(x, kernel), bias, "gelu")

    def onednn_layer_norm(a, kernel, bias, residual, gamma, beta):
        if bfloat16:
            return nk.residual_layer_norm(tf.matmul(a, kernel), bias, residual, gamma, beta, 1e-12)[
                0
            ]
        y = block.bias_and_activation(tf.matmul(a, kernel), bias)
        return fe.layer_norm(y, residual, gamma, beta, 1e-12)

    pairs = []
    x, x_wide = operand(rows, HIDDEN), operand(rows, INTERMEDIATE)
    qkv, qkv_bias = operand(HIDDEN, 3 * HIDDEN, scale=0.03), operand(3 * HIDDEN)
    packed = nk.pack_kernel(qkv)
    pairs.append(
        (
            f"query/key/value + biases as heads `[{rows}, 768] x [768, 2304]`",
            timed(
                lambda x: tf.reshape(
                    nk.dense_heads(
                        tf.reshape(x, [batch, SEQ, HIDDEN]), qkv, packed, qkv_bias, 3, HEADS
                    ),
                    [-1, HIDDEN],
                ),
                x,
            ),
            timed(lambda x: tf.reshape(onednn_heads(x, qkv, qkv_bias), [-1, HIDDEN]), x),
        )
    )
    ffn, ffn_bias = operand(HIDDEN, INTERMEDIATE, scale=0.03), operand(INTERMEDIATE)
    packed_ffn = nk.pack_kernel(ffn)
    pairs.append(
        (
            f"FFN + bias + GELU `[{rows}, 768] x [768, 3072]`",
            timed(lambda x: nk.dense_bias_gelu(x, ffn, packed_ffn, ffn_bias), x),
            timed(lambda x: onednn_gelu(x, ffn, ffn_bias), x),
        )
    )
    residual, gamma, beta = f32(rows, HIDDEN), f32(HIDDEN), f32(HIDDEN)
    for name, a, k_size in (("attention output", x, HIDDEN), ("FFN output", x_wide, INTERMEDIATE)):
        kernel, bias = operand(k_size, HIDDEN, scale=0.03), operand(HIDDEN)
        packed_out = nk.pack_kernel(kernel)
        pairs.append(
            (
                f"{name} + bias + residual + layer norm `[{rows}, {k_size}] x [{k_size}, 768]`",
                timed(
                    lambda a, k=kernel, p=packed_out, b=bias: nk.dense_residual_layer_norm(
                        a, k, p, b, residual, gamma, beta, 1e-12
                    )[0],
                    a,
                ),
                timed(
                    lambda a, k=kernel, b=bias: onednn_layer_norm(a, k, b, residual, gamma, beta),
                    a,
                ),
            )
        )
    # The attention of a layer: our kernel against the block's path with it off.
    q, k, v = (operand(batch, HEADS, SEQ, HIDDEN // HEADS) for _ in range(3))
    adder = tf.zeros([batch, 1, 1, SEQ])
    scale = (HIDDEN // HEADS) ** -0.5

    def onednn_attention(q, k, v):
        scores = tf.matmul(q, k, transpose_b=True)
        if bfloat16:  # the product fused with oneDNN's softmax
            probs = block.attention_probs(scores, adder, scale)
        else:
            probs = tf.nn.softmax(tf.cast(scores, tf.float32) * scale + adder, axis=-1)
        context = tf.matmul(tf.cast(probs, q.dtype), v)
        return tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, HIDDEN])

    pairs.append(
        (
            f"attention: scores, softmax, . values, as rows `[{batch}, 12, 128, 64]`",
            timed(lambda q, k, v: fe.attention(q, k, v, adder, scale), q, k, v),
            timed(onednn_attention, q, k, v),
        )
    )
    return pairs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--out", default=os.path.join(HERE, "results", "native_products.md"))
    bm.add_emulate_flag(p)
    args = p.parse_args(argv)
    bm.run_emulated(args.emulate)
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    from albert_tf.cpu import native_kernels

    if not native_kernels.products_ready(args.dtype):
        sys.exit(f"bench_products: no {args.dtype} products here (see products_ready)")
    bm.write_paired_table(
        args,
        argv,
        "bench_products.py",
        f"Our {args.dtype} products against oneDNN's product plus what it carries",
        f"{args.dtype}, batch {args.batch} x seq {SEQ} rows, all threads; median ms per call "
        f"over {args.pairs} pairs; ratio: the median of the per-pair ratios oneDNN time / "
        "our time, with its range.",
        ("product and what it carries", "ours", "oneDNN + the rest"),
        product_pairs(args.batch, args.dtype),
    )


if __name__ == "__main__":
    main()
