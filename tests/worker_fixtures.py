"""Test worker scripts run as separate processes: one plain, or a local
MultiWorkerMirroredStrategy cluster (one process per worker, TF_CONFIG set)."""

import json
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def script_env():
    """The environment of a worker script: tests/ and the repository importable, no TF_CONFIG."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.path.dirname(HERE)]))
    env.pop("TF_CONFIG", None)
    return env


def run_script(script, *args, timeout=300):
    """Runs tests/<script> with args in one process; fails the test with its output if it fails."""
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, script), *map(str, args)],
        env=script_env(),
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_cluster(script, args_of_worker, workers=2, timeout=300):
    """Runs tests/<script> as `workers` MultiWorkerMirroredStrategy workers on
    localhost, worker i with the arguments `args_of_worker(i)`; waits for all."""
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(workers)]}
    procs = []
    for index in range(workers):
        env = dict(
            script_env(),
            TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, os.path.join(HERE, script), *map(str, args_of_worker(index))],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for p in procs:
        output, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0, output.decode()[-3000:]


def strategy_named(name):
    """The strategy of a worker script: "mirrored2" (MirroredStrategy over two logical CPU
    devices; call before TensorFlow's first op) or "default"."""
    import tensorflow as tf

    if name == "mirrored2":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    return tf.distribute.get_strategy()
