"""The CPU speed paths' tests run with the switch at "auto" (as the scripts set it by
default; in Python the plain model runs until `use` is called), and the pieces called
directly get what the switch hands down on a CPU-only machine under "auto"
(albert_tf.cpu.paths.taken). A test that wants other paths forces them."""

import pytest

from albert_tf.cpu import paths, speed_paths


@pytest.fixture(autouse=True)
def auto_speed_paths(monkeypatch):
    monkeypatch.setattr(speed_paths, "_mode", speed_paths.mode())  # restored afterwards
    speed_paths.use("auto")
    previous = paths.taken()
    paths.take(paths.CPU_AUTO)
    yield
    paths.take(previous)
