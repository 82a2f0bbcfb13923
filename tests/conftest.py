"""Shared pytest set-up: quiet TensorFlow, one thread pool per process."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Tests import helpers (numpy references) from this folder.
sys.path.insert(0, os.path.dirname(__file__))
