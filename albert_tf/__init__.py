"""albert_tf: a faithful TensorFlow 2 / Keras 3 reproduction of ALBERT.

Only the configuration is imported eagerly (it has no TensorFlow dependency);
the submodules (`albert_tf.modeling`, `albert_tf.checkpoints`, ...) import
TensorFlow when first used.
"""

from albert_tf.config import AlbertConfig, preset

__all__ = ["AlbertConfig", "preset"]
__version__ = "0.1.0"
