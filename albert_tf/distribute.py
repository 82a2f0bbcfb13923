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


def multi_worker_strategy(tf_config: dict, timeout_s: float):
    """MultiWorkerMirroredStrategy once every worker of `tf_config` joined; UserError naming
    the other workers after `timeout_s` seconds (TensorFlow itself would wait forever)."""
    try:
        return _with_timeout(
            tf.distribute.MultiWorkerMirroredStrategy,
            timeout_s,
            "waiting for the other workers of TF_CONFIG",
        )
    except TimeoutError:
        task = tf_config["task"]
        cluster = tf_config["cluster"]
        own = cluster.get(task.get("type"), [None] * (task["index"] + 1))[task["index"]]
        others = [a for role in ("chief", "worker") for a in cluster.get(role, []) if a != own]
        raise UserError(
            f"--strategy=multi_worker: not every worker joined within --worker_timeout_s="
            f"{timeout_s:g} s (the others: {', '.join(others)}); expected all of TF_CONFIG's "
            "workers started with the same command and reachable at those addresses"
        ) from None


def is_chief(strategy) -> bool:
    """Whether this process writes checkpoints, summaries and result files."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(resolver, "task_type", None):
        return True
    return resolver.task_type in ("chief", None) or (
        resolver.task_type == "worker" and resolver.task_id == 0
    )
