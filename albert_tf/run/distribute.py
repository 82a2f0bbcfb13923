"""Distribution strategy from the original's TPU flags or a strategy name.

`--use_tpu --tpu_name --tpu_zone --gcp_project --master` select TPUStrategy
as the original's TPUEstimator did; `--strategy` picks `default` (one
device), `mirrored` (all local GPUs, or the CPU) or `multi_worker`
(MultiWorkerMirroredStrategy from the TF_CONFIG environment variable).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time

import tensorflow as tf

from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)

STRATEGIES = ("default", "mirrored", "multi_worker")


def _with_timeout(fn, seconds, what, report_every=10.0):
    """Runs fn() in a thread; logs a line every `report_every` seconds while waiting and
    raises TimeoutError instead of hanging past `seconds`. SIGINT and SIGTERM end the
    wait (RunInterrupted, albert_tf/interrupts.py), also when TensorFlow took SIGTERM
    for itself meanwhile. A thread still blocked in TensorFlow afterwards makes the
    script leave at once (cli.exit_now_if_stuck)."""
    from albert_tf import interrupts
    from albert_tf.cli import STUCK_THREAD_PREFIX

    result, error = [], []

    def target():
        try:
            result.append(fn())
        except Exception as err:  # re-raised in the caller's thread
            error.append(err)

    thread = threading.Thread(target=target, daemon=True, name=f"{STUCK_THREAD_PREFIX}: {what}")
    thread.start()
    start = time.monotonic()
    deadline, next_report = start + seconds, start + report_every
    while thread.is_alive() and time.monotonic() < deadline:
        thread.join(min(0.25, max(deadline - time.monotonic(), 0.0)))
        interrupts.install()
        now = time.monotonic()
        if thread.is_alive() and now >= next_report and now < deadline:
            next_report += report_every
            _logger.info("%s: waiting (%.0f of %.0f s)", what, now - start, seconds)
    if thread.is_alive():
        raise TimeoutError(f"{what}: no answer after {seconds:.0f} s")
    if error:
        raise error[0]
    return result[0]


def tpu_strategy(tpu_name=None, tpu_zone=None, gcp_project=None, master=None, timeout_s=300.0):
    """Connects to a Cloud TPU and returns a TPUStrategy (clear error if unreachable)."""
    target = tpu_name or master
    flags = (
        f"--tpu_name={tpu_name!r} --tpu_zone={tpu_zone!r} "
        f"--gcp_project={gcp_project!r} --master={master!r}"
    )

    def connect():
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=target, zone=tpu_zone, project=gcp_project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)

    try:
        return _with_timeout(connect, timeout_s, "connecting to the TPU")
    except Exception as err:
        raise UserError(
            f"cannot reach a TPU with {flags}: {err}. Check --tpu_name (or --master "
            "grpc://host:8470), --tpu_zone and --gcp_project; --tpu_timeout_s sets the "
            "wait."
        ) from None


def get_strategy(
    strategy="default",
    use_tpu=False,
    tpu_name=None,
    tpu_zone=None,
    gcp_project=None,
    master=None,
    tpu_timeout_s=300.0,
    worker_timeout_s=300.0,
):
    """Returns the tf.distribute strategy the flags ask for. A multi-worker strategy waits
    up to `worker_timeout_s` for every worker of TF_CONFIG to join."""
    if use_tpu:
        return tpu_strategy(tpu_name, tpu_zone, gcp_project, master, tpu_timeout_s)
    if strategy == "default":
        return tf.distribute.get_strategy()
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    if strategy == "multi_worker":
        raw = os.environ.get("TF_CONFIG")
        if not raw:
            raise UserError(
                "--strategy=multi_worker needs the TF_CONFIG environment "
                "variable (cluster and task of this worker)"
            )
        try:
            tf_config = json.loads(raw)
            tf_config["cluster"]["worker"], tf_config["task"]["index"]
        except (ValueError, KeyError, TypeError) as err:
            raise UserError(f"TF_CONFIG is not a valid cluster spec ({err!r}): {raw}") from None
        return multi_worker_strategy(tf_config, worker_timeout_s)
    raise ValueError(f"unknown --strategy={strategy!r}; expected one of {STRATEGIES}")


def _address(entry: str) -> tuple[str, int]:
    host, _, port = entry.rpartition(":")
    return host.strip("[]"), int(port)


def wait_for_workers(tf_config: dict, timeout_s: float, report_every: float = 10.0) -> None:
    """Returns once every other task of TF_CONFIG's cluster accepts connections on its
    address; UserError naming those that do not after `timeout_s` seconds.

    TensorFlow's own wait (inside MultiWorkerMirroredStrategy()) holds Python's lock for
    as long as it lasts, so nothing in the process (no timeout, no signal handler) can
    run until every worker came. This wait comes first, in Python: meanwhile this task
    listens on its own address (so the others' waits see it) and SIGINT/SIGTERM end it
    (RunInterrupted). Then TensorFlow's wait finds everyone.
    """
    from albert_tf import interrupts

    task, cluster = tf_config["task"], tf_config["cluster"]
    tasks = [a for role in ("chief", "worker") for a in cluster.get(role, [])]
    own = cluster.get(task.get("type"), [])[task.get("index", 0)]
    others = [a for a in tasks if a != own]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("", _address(own)[1]))
        listener.listen(64)
    except OSError as err:  # taken: whatever holds it answers for this task
        _logger.warning("cannot listen on %s while waiting for the workers: %s", own, err)
    interrupts.install()
    _logger.info(
        "waiting up to %g s for the workers of TF_CONFIG: %s", timeout_s, ", ".join(others)
    )
    start = time.monotonic()
    next_report = start + report_every
    waiting = list(others)
    try:
        while waiting:
            for address in list(waiting):
                try:
                    with socket.create_connection(_address(address), timeout=1.0):
                        waiting.remove(address)
                except OSError:
                    pass
            now = time.monotonic()
            if not waiting:
                break
            if now - start >= timeout_s:
                raise UserError(
                    f"--strategy=multi_worker: not every worker joined within "
                    f"--worker_timeout_s={timeout_s:g} s (no answer from "
                    f"{', '.join(waiting)}); expected all of TF_CONFIG's workers started "
                    "with the same command and reachable at those addresses"
                )
            if now >= next_report:
                next_report += report_every
                _logger.info(
                    "waiting for the workers of TF_CONFIG (%.0f of %.0f s): no answer from %s",
                    now - start,
                    timeout_s,
                    ", ".join(waiting),
                )
            time.sleep(0.2)
    finally:
        listener.close()


def multi_worker_strategy(tf_config: dict, timeout_s: float):
    """MultiWorkerMirroredStrategy once every worker of `tf_config` answers (UserError
    after `timeout_s` seconds; TensorFlow itself would wait forever)."""
    wait_for_workers(tf_config, timeout_s)
    return tf.distribute.MultiWorkerMirroredStrategy()


def is_chief(strategy) -> bool:
    """Whether this process writes checkpoints, summaries and result files."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return resolver.task_type in ("chief", None) or (
        resolver.task_type == "worker" and resolver.task_id == 0
    )
