"""Shared pytest set-up: quiet TensorFlow, one thread pool per process."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The same CPU kernels on every machine and in the scripts' subprocesses (which call
# cli.prefer_onednn): TensorFlow turns oneDNN on by itself only on AVX-512 CPUs.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# Tests import helpers (numpy references) from this folder.
sys.path.insert(0, os.path.dirname(__file__))
