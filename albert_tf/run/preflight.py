"""The stage before any work: what a run will do (`plan`), then every check that can
refuse it, in one order, before anything is built or written (`check`), and the checks
that need the built model, before anything is written (`check_model`).

    plan = preflight.plan(task)       # options checked, config resolved: reads only
    preflight.check(plan)             # inputs, outputs, lock, the folder, init, memory
    ... build the model ...
    preflight.check_model(plan, model)  # the folder's checkpoints and --init_checkpoint fit it

Each check raises UserError with one line naming the flag or file and what was
expected (albert_tf/errors.py); a run that passes them all writes its output folder.
"""

from __future__ import annotations

import dataclasses
import functools

import tensorflow as tf

from albert_tf import options, output_paths
from albert_tf.cpu import speed_paths
from albert_tf.errors import UserError
from albert_tf.run import checkpoint_checks, memory_check, output_writer, run_lock, run_record
from albert_tf.run.output_folder import BEST_NAME, Contents, OutputFolder
from albert_tf.weights import checkpoints
from albert_tf.weights.init_checkpoint import InitCheckpoint


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a run will do, known before any check or work.

    task: the `driver.Task`; config: its AlbertConfig (`Task.resolve`); folder: the
    output folder, and `found`, the checkpoints it holds (listed once: nothing writes
    before the checks end); initial: (flag, value) of the weights it starts from, or
    None; resuming: a training run that continues from the folder's own checkpoints;
    folder_task: the task the folder's task.json names (read when this run's task has an
    identity, `Task.output_identity`), None without one.
    """

    task: object
    config: object
    folder: OutputFolder
    found: Contents
    initial: tuple[str, str] | None
    resuming: bool
    folder_task: object | None = None

    @property
    def options(self):
        return self.task.options

    @functools.cached_property
    def init_checkpoint(self) -> InitCheckpoint | None:
        """--init_checkpoint with its files looked up once, or None when not given."""
        if self.initial and self.initial[0] == "--init_checkpoint":
            return InitCheckpoint(self.initial[1])
        return None


def plan(task) -> Plan:
    """The run's plan: its options checked (output_dir a folder, writable, before anything
    is read or built), the speed paths chosen (before anything is traced: the task's own
    checks see them), the task's options, files and data checked (`Task.resolve`)."""
    opts = task.options
    options.check(opts)
    speed_paths.use(opts.speed_paths)
    config = task.resolve()
    folder = OutputFolder(opts.output_dir)
    found = folder.contents()
    resuming = opts.do_train and bool(found.trained_checkpoints())
    folder_task = folder.read_task() if task.output_identity() else None
    return Plan(task, config, folder, found, initial_weights(opts), resuming, folder_task)


def check(plan: Plan) -> None:
    """The checks of a run's files that need no model, in this order, before anything
    is built or written."""
    check_weights_to_use(plan.options, plan.found)  # a run that does not train has some
    check_outputs(plan)  # no output replaces an input or a file of someone else
    check_lock(plan)  # no other run writes in the output folder
    check_output_identity(plan)  # the output folder holds a run of this task, if any
    checkpoint_checks.check_output_checkpoints_intact(plan.folder.path, plan.found.steps)  # whole
    check_resume(plan)  # a resumed run's input flags are those it was started with
    check_init(plan)  # --init_checkpoint is complete, its config agrees, it stays
    check_memory(plan)  # the model fits in this machine's memory


def check_model(plan: Plan, model) -> None:
    """The checks that need the built model, before anything is written: the output
    folder's latest original-format checkpoint fits it; a resumed run's --init_checkpoint
    (not loaded) fits it too (a TF-Hub module and group-0 initialisation are checked when
    they are loaded). Reads the checkpoints' indexes, then compares."""
    originals, init, task = plan.found.original_checkpoints(), plan.init_checkpoint, plan.task
    init_checked = init and plan.resuming and not (init.is_hub_module or task.init_from_group0)
    variables = checkpoints.original_variable_map(model)
    latest = checkpoints.check_checkpoint_readable(originals[-1][1]) if originals else None
    latest_shapes = checkpoints.checkpoint_variable_shapes(latest) if latest else None
    init_shapes = init.variable_shapes() if init_checked else None
    if latest:
        check_output_checkpoints(variables, plan.folder.path, latest, latest_shapes)
    if init_checked:
        checkpoint_checks.check_init_fits(variables, init, init_shapes, task.head_patterns)


def initial_weights(opts) -> tuple[str, str] | None:
    """(flag, value) naming the weights a run starts from: --init_checkpoint, or the
    fine-tuning scripts' --albert_hub_module_handle (a TF-Hub module folder); None when
    neither is given (an empty value, as run_glue.sh passes, is not given)."""
    for flag in ("init_checkpoint", "albert_hub_module_handle"):
        value = getattr(opts, flag, None)
        if value:
            return f"--{flag}", value
    return None


def check_weights_to_use(opts, found: Contents) -> None:
    """Refuses, before the output folder or any feature file is written, a run that does
    not train and has no weights to evaluate, predict or export with: no initial weights
    and no checkpoint in output_dir (`driver.finish_selection` and `driver.final_weights`
    would refuse it only after `Task.prepare`)."""
    if opts.do_train or initial_weights(opts):
        return
    if found.trained_checkpoints() or found.best:
        return
    uses = {"do_eval": "evaluate", "do_predict": "predict", "export_dir": "export"}
    asked = [(f"--{name}", verb) for name, verb in uses.items() if getattr(opts, name, None)]
    flags = " and ".join(flag for flag, _ in asked) or "this run"
    verbs = " or ".join(verb for _, verb in asked) or "use"
    raise UserError(
        f"{flags} {'have' if len(asked) > 1 else 'has'} nothing to {verbs} with: no "
        "--init_checkpoint and no checkpoint "
        f"({BEST_NAME}, model.ckpt-<step> or ckpt-<step>) in "
        f"--output_dir={opts.output_dir}; expected one of them, or --do_train"
    )


def check_outputs(plan: Plan) -> None:
    """No output replaces an input or a file of someone else: --export_dir, replaced as
    a whole by the export, is no input and not the output folder
    (albert_tf/run/output_writer.py); a fresh run's checkpoints do not replace
    --init_checkpoint; no file output replaces an input (albert_tf/output_paths.py)."""
    task, opts = plan.task, plan.options
    inputs = task.file_inputs()
    export_dir = getattr(opts, "export_dir", None)
    if export_dir:
        guarded = {**inputs, "--output_dir": [opts.output_dir]}
        output_writer.check_destination(
            export_dir, task.export_kind, flag="--export_dir", inputs=guarded
        )
    if plan.init_checkpoint and not plan.resuming:
        checkpoint_checks.check_init_not_replaced(plan.init_checkpoint, plan.folder.path)
    for flag, (path, features) in task.file_outputs().items():
        if not tf.io.gfile.isdir(path):  # a folder: check_replaceable says so
            output_paths.check_not_an_input({f"--{flag}": path}, inputs)
        output_paths.check_replaceable(flag, path, features)


def check_lock(plan: Plan) -> None:
    """No other run writes in the output folder (albert_tf/run/run_lock.py)."""
    if plan.options.strategy != "multi_worker":  # workers share the chief's folder
        run_lock.check_free(plan.folder.path)


def check_resume(plan: Plan) -> None:
    """A resumed run's input flags (and a --clip_norm_like it sets) are those its
    checkpoints were trained with (albert_tf/run/run_record.py)."""
    if not plan.resuming:
        return
    opts = plan.options
    chosen = {} if opts.clip_norm_like == "auto" else {"clip_norm_like": opts.clip_norm_like}
    run_record.check_resume(plan.folder.path, {**plan.task.input_shape(), **chosen})


def check_init(plan: Plan) -> None:
    """--init_checkpoint's files are complete and its albert_config.json agrees with the
    run's config."""
    init = plan.init_checkpoint
    if init is None:
        return
    opts = plan.options
    config_file = getattr(opts, "albert_config_file", None)
    checkpoint_checks.check_init(
        init, plan.config, config_file, other_depth=opts.init_from_other_depth
    )


def check_memory(plan: Plan) -> None:
    """The model's weights (and optimizer state) fit in this machine's memory: CPU runs
    only, unless --force_memory (albert_tf/run/memory_check.py)."""
    opts = plan.options
    if not (opts.force_memory or opts.use_tpu or tf.config.list_physical_devices("GPU")):
        memory_check.check_model_fits(plan.config.num_parameters(), opts.do_train)


def check_output_checkpoints(variables: dict, output_dir: str, prefix: str, shapes: dict) -> None:
    """Refuses an output folder whose checkpoints cannot fill the model (trained with
    another config or for another task): its latest original-format checkpoint
    (`prefix`, whose variables have `shapes`) must hold every variable of the model
    (`variables`: `checkpoints.original_variable_map`) in the model's shape."""
    problems = []
    for name, variable in variables.items():
        if name not in shapes:
            problems.append(f"{name}: not in the checkpoint")
        elif list(shapes[name]) != list(variable.shape):
            problems.append(
                f"{name}: checkpoint {list(shapes[name])}, model {list(variable.shape)}"
            )
    if problems:
        more = f" and {len(problems) - 1} more" if len(problems) > 1 else ""
        raise UserError(
            f"--output_dir={output_dir}: its checkpoints do not fit this model ({prefix}: "
            f"{problems[0]}{more}); expected the config and task they were trained with, "
            "or another --output_dir"
        )


def check_output_identity(plan: Plan) -> None:
    """Refuses an output folder whose task.json names another task than this run's (a
    GLUE folder of another task: its checkpoints have the same shapes, so only this tells
    them apart; resuming or evaluating them would mix two tasks' results)."""
    identity, recorded, folder = plan.task.output_identity(), plan.folder_task, plan.folder
    if not identity or recorded is None:
        return
    if recorded != identity:
        theirs = ", ".join(f"{k}={v}" for k, v in sorted(recorded.items()))
        ours = ", ".join(f"{k}={v}" for k, v in sorted(identity.items()))
        raise UserError(
            f"--output_dir={folder.path}: holds a run for {theirs} ({folder.task_path}), "
            f"this run is for {ours}; expected the same task, or another --output_dir"
        )


__all__ = [
    "Plan",
    "plan",
    "check",
    "check_model",
    "initial_weights",
    "check_weights_to_use",
    "check_outputs",
    "check_lock",
    "check_resume",
    "check_init",
    "check_memory",
    "check_output_checkpoints",
    "check_output_identity",
]
