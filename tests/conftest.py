"""Shared pytest set-up: quiet TensorFlow, one thread pool per process; a read-only folder."""

import os
import subprocess
import sys
import tempfile

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# The same CPU kernels on every machine and in the scripts' subprocesses (which call
# cli.prefer_onednn): TensorFlow turns oneDNN on by itself only on AVX-512 CPUs.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
# The C++ kernels (albert_tf.cpu.native_kernels) built once for all test processes, outside
# the user's cache.
os.environ.setdefault(
    "ALBERT_TF_KERNEL_CACHE",
    os.path.join(tempfile.gettempdir(), f"albert_tf_test_kernels_{os.getuid()}"),
)
# Tests import helpers (numpy references) from this folder.
sys.path.insert(0, os.path.dirname(__file__))


def _read_only_folder(folder):
    """Makes the empty folder `folder` refuse new files; returns how to undo it, or None
    where this machine cannot. Permissions do not stop root, so root mounts a read-only
    tmpfs there instead."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return lambda: os.chmod(folder, 0o755)
    try:
        mount = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
            capture_output=True,
        )
    except OSError:  # no mount command
        return None
    if mount.returncode:
        return None
    return lambda: subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def read_only_folder(tmp_path):
    """An existing empty folder this process cannot write in (skips where it cannot be
    made: root without mount)."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    undo = _read_only_folder(folder)
    if undo is None:
        pytest.skip("cannot make a read-only folder here (root, and mount refused)")
    yield str(folder)
    undo()
