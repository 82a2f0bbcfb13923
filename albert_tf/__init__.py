"""albert_tf: a faithful TensorFlow 2 / Keras 3 reproduction of ALBERT.

Only the configuration and the speed-path switch are imported eagerly (neither imports
TensorFlow); the submodules (`albert_tf.modeling`, `albert_tf.checkpoints`, ...) import
TensorFlow when first used. The switch (albert_tf.speed_paths) installs the CPU speed
paths' encoder runner here, so that the model's own modules need not import them.
"""

from albert_tf import speed_paths
from albert_tf.config import AlbertConfig, preset

__all__ = ["AlbertConfig", "preset", "speed_paths"]
__version__ = "0.1.0"
