"""The CPU speed paths: code that replaces the plain encoder's stack of blocks on CPUs.

albert_tf.speed_paths decides whether they run (the switch `--speed_paths`, and the
devices); `run_encoder` is what it calls in place of `AlbertModel.run_blocks`. The
pieces:

  * shared_kernels: each block's weights cast once per pass, fused inference QKV, row
    selection in the last block, and shared kernels' gradients as one product.
  * block: the block's forward pass with the faster pieces below substituted.
  * fused_elementwise: XLA-fused elementwise work, hand-written gradients, oneDNN's
    layer norm, and the dispatch to the C++ kernels.
  * native_kernels (with native/*.cc): the C++ kernels, built only for "native".
  * tf_internals: the private TensorFlow modules all of this uses, in one place.
"""

from __future__ import annotations

from albert_tf.cpu.block import apply_block
from albert_tf.cpu.shared_kernels import EncoderKernels


def run_encoder(model, paths, x, attention_adder, training, output_rows):
    """What `model.run_blocks(x, attention_adder, training, output_rows)` returns
    (model an albert_tf.modeling.AlbertModel), computed on the speed paths `paths`."""
    config = model.config
    kernels = EncoderKernels(model.blocks(), paths, training, output_rows, config.shares_weights)

    def layers(x, weights, last_weights, last_rows):
        outputs = []
        for layer in range(config.num_hidden_layers):
            blocks = model.blocks_of(layer)
            for block in blocks:
                last = layer == config.num_hidden_layers - 1 and block is blocks[-1]
                x = apply_block(
                    block,
                    x,
                    attention_adder,
                    (last_weights if last else weights)[block],
                    training=training,
                    query_positions=last_rows if last else None,
                )
                outputs.append(x)
        return outputs

    return kernels.run(layers, x)
