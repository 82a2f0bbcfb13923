"""Refuses, before anything is allocated, a model whose weights and optimizer state
cannot fit in this machine's memory.

A config of 51 GB of weights on a 23 GB machine would otherwise allocate until the
kernel kills the process. The estimate counts only what certainly exists, float32
throughout:

    not training: weights                                   4 bytes per parameter
    training:     weights + gradients + Adam/LAMB m and v  16 bytes per parameter

(activations come on top, so a model that passes may still not train). The memory is
the machine's physical memory, or the cgroup (container) limit when that is lower.
Only CPU runs are checked: on GPUs and TPUs the weights live in the accelerator's
memory. `--force_memory` skips the check.
"""

from __future__ import annotations

import os

from albert_tf.errors import UserError

BYTES_PER_PARAMETER = {False: 4, True: 16}  # training: weights, gradients, two slots
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory_bytes() -> int | None:
    """Physical memory, or the cgroup limit where lower; None where unknown."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for path in _CGROUP_LIMITS:  # machine-local: read with the OS
        try:
            with open(path) as f:  # machine-local
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):  # "max" or a huge number: no limit
            sizes.append(int(text))
    return min(sizes) if sizes else None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def check_model_fits(num_parameters: int, training: bool, memory: int | None = None) -> None:
    """UserError when `num_parameters` float32 weights (with gradients and two optimizer
    slots when `training`) need more than `memory` bytes (default: this machine's)."""
    memory = machine_memory_bytes() if memory is None else memory
    if memory is None:
        return
    needed = num_parameters * BYTES_PER_PARAMETER[bool(training)]
    if needed > memory:
        what = "weights, gradients and optimizer state" if training else "weights"
        raise UserError(
            f"the model has {num_parameters:,} parameters: its {what} need {_gb(needed)}, "
            f"this machine has {_gb(memory)} of memory; expected a smaller config "
            "(--albert_config_file), or --force_memory to build it anyway"
        )


__all__ = ["machine_memory_bytes", "check_model_fits", "BYTES_PER_PARAMETER"]
