"""The CPU speed paths: code that replaces the plain encoder's stack of blocks on CPUs.

* speed_paths: the switch (`--speed_paths`), which decides whether they run, and the
  model's hook it fills.
* paths: the decision as a value, handed down to what is traced.
* encoder: the stack on the speed paths, run only where the model is the plain code.
* shared_kernels: each block's weights cast once per pass, fused inference QKV, row
  selection in the last block, and shared kernels' gradients as one product.
* block: the block's forward pass with the faster pieces below substituted.
* fused_elementwise: XLA-fused elementwise work, hand-written gradients, oneDNN's
  layer norm, and the dispatch to the C++ kernels.
* native_kernels (with native/*.cc): the C++ kernels, built only for "native".
* tf_internals: the private TensorFlow modules all of this uses, in one place.
"""
