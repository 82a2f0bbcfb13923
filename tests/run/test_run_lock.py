"""albert_tf/run/run_lock.py: one writer per output folder."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from albert_tf.errors import UserError
from albert_tf.run import run_lock
from albert_tf.run.output_folder import LOCK_NAME


def _dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_acquire_writes_host_pid_and_start_and_release_removes_it(tmp_path):
    owner = run_lock.acquire(str(tmp_path))
    path = tmp_path / LOCK_NAME
    held = json.loads(path.read_text())
    assert held == owner
    assert (held["host"], held["pid"]) == (socket.gethostname(), os.getpid())
    assert held["started"].endswith("Z")
    run_lock.release(str(tmp_path), owner)
    assert not path.exists()


def test_a_running_process_holds_the_folder(tmp_path):
    holder = {"host": socket.gethostname(), "pid": os.getppid(), "started": "t0"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(holder))
    for call in (run_lock.check_free, run_lock.acquire):
        with pytest.raises(UserError, match=f"another run writes in it \\(process {os.getppid()} "):
            call(str(tmp_path))
    assert json.loads((tmp_path / LOCK_NAME).read_text()) == holder


def test_the_lock_of_a_dead_process_of_this_host_is_taken_over(tmp_path):
    stale = {"host": socket.gethostname(), "pid": _dead_pid(), "started": "t0"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(stale))
    run_lock.check_free(str(tmp_path))
    with run_lock.hold(str(tmp_path)):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()


def test_another_hosts_lock_is_never_taken_over(tmp_path):
    other = {"host": "another-host.invalid", "pid": _dead_pid(), "started": "t0"}
    (tmp_path / LOCK_NAME).write_text(json.dumps(other))
    with pytest.raises(UserError, match="on another-host.invalid.*remove .*albert_tf.lock"):
        run_lock.acquire(str(tmp_path))


def test_a_non_chief_takes_no_lock(tmp_path):
    with run_lock.hold(str(tmp_path), enabled=False):
        assert not (tmp_path / LOCK_NAME).exists()
