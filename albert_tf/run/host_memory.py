"""Host (CPU) memory allocation settings for training.

TensorFlow's oneDNN CPU build allocates tensors from a BFC pool that never
returns memory and fragments: an ALBERT-xxlarge training step at batch 2 holds
at most 4.4 GiB of tensors, but the process reaches 6.0 GiB of resident memory,
growing from step to step. `configure_host_allocator("system")` makes TensorFlow take tensor
buffers from malloc instead and fixes glibc's mmap threshold, so that every
buffer of 1 MiB or more is its own mapping, returned to the system when freed
(glibc otherwise raises the threshold as large blocks are freed and serves
them from its heap, which fragments the same way). Measured peak RSS for that
step: 4.7 GiB instead of 6.0 GiB; see bench/results/pretraining_memory.md.

Both settings are process-wide and must be made before TensorFlow runs its
first op (the allocator is chosen then).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

from albert_tf.cpu.speed_paths import choose

_ENV = "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"
_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter number

ALLOCATORS = ("auto", "system", "tensorflow")
# "auto" takes malloc from this model size on: there weight-sized buffers
# (gradients, optimizer temporaries) dominate memory, and mapping them afresh
# costs a few percent of a step; below it, activations dominate and the fresh
# mappings cost ~35% of an ALBERT-base step.
AUTO_SYSTEM_MIN_PARAMETERS = 100_000_000


def _set_glibc_mmap_threshold(threshold: int) -> bool:
    """mallopt(M_MMAP_THRESHOLD, threshold) when the C library is glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return False
    if not hasattr(libc, "gnu_get_libc_version"):  # only glibc (and its mallopt numbering)
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))


def resolve_allocator(allocator: str, num_parameters: int | None = None) -> str:
    """ "auto" -> "system" for models of >= 100M parameters where the speed paths
    take it (CPU-only machines, albert_tf.cpu.speed_paths), else "tensorflow"."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"host allocator must be one of {ALLOCATORS}, got {allocator!r}")
    if allocator != "auto":
        return allocator
    big = num_parameters is not None and num_parameters >= AUTO_SYSTEM_MIN_PARAMETERS
    return "system" if big and choose().system_allocator_for_large_models else "tensorflow"


def configure_host_allocator(
    allocator: str = "system", mmap_threshold: int = 1 << 20, num_parameters: int | None = None
) -> bool:
    """Chooses how TensorFlow allocates host memory for the rest of the process.

    Args:
      allocator: "system" (malloc, buffers >= `mmap_threshold` mapped and
        unmapped individually: lowest peak memory), "tensorflow" (its
        default pool: no change) or "auto" (by `num_parameters`, see
        `resolve_allocator`).
      mmap_threshold: bytes; glibc's M_MMAP_THRESHOLD for "system".
      num_parameters: the model's size, for "auto".

    Returns:
      True when the setting is in effect; False (with a warning) when
      TensorFlow had already allocated from its pool, or the C library is
      not glibc (then only TensorFlow's allocator is switched).
    """
    allocator = resolve_allocator(allocator, num_parameters)
    if allocator == "tensorflow":
        return True
    if os.environ.get(_ENV) not in (None, "1", "true", "True"):
        logging.info(
            "%s=%s set by the user: leaving TensorFlow's allocator as is", _ENV, os.environ[_ENV]
        )
        return False
    os.environ[_ENV] = "1"
    ok = _set_glibc_mmap_threshold(mmap_threshold)
    if not ok:
        logging.warning(
            "could not set the malloc mmap threshold (not glibc?): "
            "freed tensor memory may not return to the system"
        )
    import tensorflow as tf

    try:
        stats = tf.config.experimental.get_memory_info("CPU:0")
    except (ValueError, RuntimeError):  # an allocator without statistics: not the pool
        return ok
    if stats.get("peak", 0) > 0:
        logging.warning(
            "TensorFlow already allocated from its memory pool before "
            "configure_host_allocator() was called; it keeps using it (call it "
            "before building models or datasets)"
        )
        return False
    return ok
