"""Every private TensorFlow module the CPU speed paths use, imported in this one place.

TensorFlow does not promise to keep these where they are. If a release moves one, this
import fails, and with it `import albert_tf.cpu`: albert_tf.cpu.speed_paths then warns once
and runs the plain model (albert_tf.model.layers), which uses public TensorFlow only.
"""

from __future__ import annotations

from tensorflow.core.framework.attr_value_pb2 import AttrValue
from tensorflow.python.framework.op_def_registry import get as registered_op
from tensorflow.python.ops.control_flow_util import GraphOrParentsInXlaContext
from tensorflow.python.saved_model.save_context import in_save_context
from tensorflow.python.util._pywrap_util_port import IsMklEnabled

__all__ = [
    "AttrValue",
    "GraphOrParentsInXlaContext",
    "IsMklEnabled",
    "in_save_context",
    "registered_op",
]
