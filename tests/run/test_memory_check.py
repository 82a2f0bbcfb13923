"""albert_tf/run/memory_check.py: a model that cannot fit is refused before allocation."""

from __future__ import annotations

import pytest

from albert_tf.errors import UserError
from albert_tf.model.config import AlbertConfig
from albert_tf.run import memory_check


def test_weights_and_optimizer_state_are_counted_against_the_memory():
    memory_check.check_model_fits(1_000_000, training=True, memory=16_000_000)
    memory_check.check_model_fits(4_000_000, training=False, memory=16_000_000)
    with pytest.raises(UserError) as err:
        memory_check.check_model_fits(1_000_001, training=True, memory=16_000_000)
    assert str(err.value).startswith(
        "the model has 1,000,001 parameters: its weights, gradients and optimizer state need "
        "0.0 GB, this machine has 0.0 GB of memory"
    )
    assert str(err.value).endswith("or --force_memory to build it anyway")


def test_the_issues_config_is_refused_on_a_23_gb_machine():
    config = AlbertConfig(
        vocab_size=30000, hidden_size=32768, intermediate_size=131072, num_attention_heads=64
    )
    with pytest.raises(UserError, match=r"need \d+\.\d GB, this machine has 23\.0 GB"):
        memory_check.check_model_fits(config.num_parameters(), False, memory=23_000_000_000)


def test_this_machines_memory_is_known_on_linux():
    memory = memory_check.machine_memory_bytes()
    assert memory is not None and memory > 1 << 28
