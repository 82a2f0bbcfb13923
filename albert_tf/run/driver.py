"""The one driver of every run (pretraining, GLUE, SQuAD, RACE): the steps that are the
same whatever the task. A `Task` supplies what differs: its model, loss, data, dev
metrics and output files.

    summary = driver.run(ClassifierTask(ClassifierOptions(task_name="MRPC", ...)))

1. plan        options checked, `Task.resolve` (files and data checked, the config), then
   and check   every check before any work, in one order (albert_tf/run/preflight.py):
               outputs, lock, the output folder's task and checkpoints, resume fit,
               --init_checkpoint, memory. Nothing is written.
2. start       host allocator, dtype policy, seeds, distribution strategy.
3. build       `Task.build_model` under the strategy; then the checks that need it
               (`preflight.check_model`): the checkpoints already in output_dir fit it,
               and so does --init_checkpoint when output_dir's own win.
4. initialize  --init_checkpoint (either checkpoint format or a release folder) or
               --albert_hub_module_handle (a TF-Hub module folder), unless a training
               run resumes from its own checkpoint in output_dir.
5. prepare     the output folder (and its task.json), then `Task.prepare` (features,
               eval data).
6. train       one training loop to the last step (albert_tf/run/training.py); after every
               checkpoint the dev metrics (`Task.evaluator`) and model.ckpt-best selection
               (albert_tf/run/selection.py). Every checkpoint is model.ckpt-<step> (the
               original's format, named by the `checkpoint` file) plus the input position
               and random state (albert_tf/run/output_folder.py); a task whose
               folder is a release folder (`Task.release_folder`) gets its config
               and tokenizer beside them.
7. select      checkpoints of either format not evaluated yet (a resumed run, or the
               original's second "evaluate every checkpoint" command); with none, the
               initial weights.
8. predict     the final weights (model.ckpt-best, else the last checkpoint, else the
               initial weights) -> `Task.predict`, `Task.export`.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

import keras
import tensorflow as tf

from albert_tf.cpu.speed_paths import SpeedPathOptions
from albert_tf.errors import UserError
from albert_tf.options import REQUIRED, option
from albert_tf.run import checkpoint_checks, preflight, run_lock, run_record, selection
from albert_tf.run.output_folder import BEST_NAME, OutputFolder, is_resume_point
from albert_tf.weights import checkpoints
from albert_tf.weights.init_checkpoint import InitCheckpoint

_logger = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)
class RunOptions(SpeedPathOptions):
    """What every script accepts: the output folder, the training loop's flags, devices
    (the original's TPU flags; ours: strategy, dtype, XLA), seed and host memory.
    Scripts whose original had other defaults re-declare them with `RunOptions.default`."""

    output_dir: str = option(
        REQUIRED,
        "Checkpoints, summaries, eval_results.txt and predictions go here.",
        output="folder",
    )
    init_checkpoint: str | None = option(
        None,
        "Initial weights: an original-format checkpoint (as our runs write), a ckpt-<step>, "
        "or a release folder.",
    )
    do_train: bool = option(False, "Train.")
    train_batch_size: int = option(32, "Global training batch size.", minimum=1)
    learning_rate: float = option(5e-5, "Peak learning rate.", minimum=0.0)
    optimizer: str = option("adamw", "Optimizer.", choices=("adamw", "lamb"))
    save_checkpoints_steps: int = option(
        1000, "Checkpoint (and dev evaluation) interval.", minimum=1
    )
    iterations_per_loop: int = option(1000, "Steps per tf.function call.", minimum=1)
    keep_checkpoint_max: int | None = option(
        None,
        "Checkpoints kept, in each format (the best is kept separately as "
        "model.ckpt-best); unset or 0: all, as the original's fine-tuning scripts, "
        "which ignored this flag.",
        minimum=0,
    )
    use_tpu: bool = option(False, "Run on a Cloud TPU (TPUStrategy).")
    clip_norm_like: str = option(
        "auto",
        "Which original the gradient-clipping norm follows: gpu = the original off TPU "
        "(embedding lookups' gradient rows counted one per token position, repeated ids "
        "not added up), tpu = the original on TPU (the added-up gradient); auto = tpu with "
        "--use_tpu, else gpu, and a resumed run keeps the value it was started with. "
        "docs/original.md 7.2.",
        choices=("auto", "gpu", "tpu"),
    )
    tpu_name: str | None = option(None, "Cloud TPU name or grpc:// address.")
    tpu_zone: str | None = option(None, "GCE zone of the TPU.")
    gcp_project: str | None = option(None, "GCP project of the TPU.")
    master: str | None = option(None, "TPU master address (alternative to --tpu_name).")
    num_tpu_cores: int = option(8, "Accepted for compatibility; the TPU topology decides.")
    strategy: str = option(
        "default",
        "Distribution strategy when not on TPU.",
        choices=("default", "mirrored", "multi_worker"),
    )
    random_seed: int = option(12345, "Seed of initialization and data order.")
    host_allocator: str = option(
        "auto",
        "CPU tensor memory: TensorFlow's pool (fastest for small models) or malloc "
        "with a 1 MiB mmap threshold (lowest peak memory: ALBERT-xxlarge b2 step 4.8 "
        "vs 6.0 GB; ALBERT-base steps ~35% slower); auto = malloc from 100M "
        "parameters on. See albert_tf/run/host_memory.py.",
        choices=("auto", "tensorflow", "system"),
    )
    tpu_timeout_s: float = option(
        300.0, "Seconds to wait for the TPU (--use_tpu) before giving up.", minimum=0.0
    )
    worker_timeout_s: float = option(
        300.0,
        "Seconds to wait for every worker of TF_CONFIG to join (--strategy=multi_worker) "
        "before giving up.",
        minimum=0.0,
    )
    init_from_other_depth: bool = option(
        False,
        "Let --init_checkpoint's own albert_config.json differ from --albert_config_file in "
        "num_hidden_layers (a deeper shared network warm-started from a shallower one, the "
        "paper's Table 11); every other field must still agree.",
    )
    force_memory: bool = option(
        False,
        "Build the model even if its weights and optimizer state need more than this "
        "machine's memory (albert_tf/run/memory_check.py).",
    )
    dtype: str = option(
        "float32",
        "Keras dtype policy: the matrix products in bfloat16 (TPUs, A100/H100, CPUs with "
        "AVX512_BF16 or AMX) or float16 with dynamic loss scaling (T4, V100, P100); layer "
        "norm, softmax, the losses and the optimizer stay float32 (docs/pretraining.md).",
        choices=("float32", "mixed_bfloat16", "mixed_float16"),
    )
    use_xla: bool = option(
        False, "Compile the training and evaluation steps with XLA (always on a TPU)."
    )

    @classmethod
    def default(cls, name, value):
        """The field `name` with another default, for a subclass (help and bounds kept)."""
        field = cls.__dataclass_fields__[name]
        return dataclasses.field(default=value, metadata=field.metadata)


@dataclasses.dataclass
class TrainingPlan:
    """What a task trains on, and for how long.

    dataset_fn(input_context) -> the per-replica dataset of (micro-)batches.
    """

    dataset_fn: Callable
    num_train_steps: int
    num_warmup_steps: int
    poly_power: float = 1.0
    start_warmup_step: int = 0
    gradient_accumulation_steps: int = 1


@dataclasses.dataclass
class Evaluation:
    """A task's dev evaluation: `evaluate()` -> metrics of the model's current weights;
    the checkpoint with the largest `key` becomes model.ckpt-best; `fmt`: the layout of
    eval_results.txt the original script wrote."""

    key: str
    evaluate: Callable[[], dict]
    fmt: selection.EvalFormat = selection.GLUE_FORMAT


@dataclasses.dataclass
class Run:
    """The run in progress, as the task's methods see it."""

    options: RunOptions
    config: object  # AlbertConfig
    strategy: tf.distribute.Strategy
    is_chief: bool
    model: keras.Model | None = None
    resuming: bool = False  # training continues from output_dir's own checkpoints
    initialized: bool = False  # the initial weights (--init_checkpoint or a hub module) were loaded
    # output_dir is a release folder: its config and tokenizer model beside the checkpoints
    release_folder: bool = False  # `Task.release_folder`
    tokenizer_model: str | None = None  # `Task.tokenizer_model`
    summary: dict = dataclasses.field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return self.strategy.num_replicas_in_sync

    @property
    def jit_compile(self) -> bool:
        """Whether the training and evaluation steps are compiled with XLA: --use_xla, and
        always on a TPU."""
        return self.options.use_xla or isinstance(self.strategy, tf.distribute.TPUStrategy)


class Task:
    """What differs between runs; subclasses implement the methods that raise.

    head: the model attribute holding the task's head (a key of checkpoints.HEAD_SCOPES).
    head_patterns: regexes of the head's original variable names, which an
      --init_checkpoint may lack (a pretrained encoder then gets a fresh head).
    metric_names: the extra scalars `loss_fn` returns, logged with the loss.
    init_from_group0: fill every group from the checkpoint's group_0 (pretraining).
    record_flags: the flags naming TFRecord files the run reads as they are (a damaged
      one can only show while it is read); the feature caches of the fine-tuning tasks
      are checked against their inputs instead.
    export_kind: the kind of output folder --export_dir holds, the only kind it replaces
      (albert_tf/run/output_writer.py).
    release_folder: the output folder is a release folder (albert_tf/weights/release.py):
      the config and the tokenizer (`tokenizer_model`) beside its checkpoints, written with
      each of them (and before the initial weights become model.ckpt-best), once
      --init_checkpoint loaded and any resume restored, so a run that fails before leaves
      none.
    """

    head: str = ""
    head_patterns: tuple[str, ...] = ()
    metric_names: tuple[str, ...] = ()
    init_from_group0: bool = False
    record_flags: tuple[str, ...] = ()
    export_kind: str = ""
    release_folder: bool = False

    def __init__(self, options: RunOptions):
        self.options = options

    def output_identity(self) -> dict:
        """What the checkpoints in output_dir are for beyond their shapes (a GLUE task
        name, a SQuAD version): kept in output_dir's task.json, which a later run into
        the folder must match. {} (no file): the shapes say it all."""
        return {}

    # --- before anything is written -----------------------------------------------
    def resolve(self):
        """Checks the options, files and data; returns the AlbertConfig. Writes nothing."""
        raise NotImplementedError

    def tokenizer_model(self) -> str | None:
        """The SentencePiece model a release folder carries (`release_folder`), or None."""
        return None

    def file_outputs(self) -> dict:
        """{flag: (path, feature names)}: the TFRecord files this run writes outside its
        output folder's own names; each must not be an input and, where it exists, must
        be records of those features (albert_tf/output_paths.py)."""
        return {}

    def file_inputs(self) -> dict:
        """{flag: [paths]}: the files this run reads that an output must not replace."""
        opts = self.options
        names = (
            "albert_config_file",
            "spm_model_file",
            "vocab_file",
            "init_checkpoint",
            "data_dir",
        )
        return {f"--{n}": [getattr(opts, n)] for n in names if getattr(opts, n, None)}

    def input_shape(self) -> dict:
        """{flag: value} of the flags that shape the training input (files, batch size,
        sequence length, masking): recorded with a training run and compared when it
        resumes (albert_tf/run/run_record.py)."""
        return {}

    def batch_divisor(self) -> int:
        """Micro-batches per step: the training batch is split over replicas x this."""
        return 1

    # --- model ------------------------------------------------------------------------
    def build_model(self, config) -> keras.Model:
        """The task model (built under the strategy's scope)."""
        raise NotImplementedError

    def loss_fn(self, model, features, training):
        """(loss [], {metric name: []}) of one replica's batch: means over the batch, or
        with `loss_normalizers`, called with a 4th argument, the batch's shares of the
        global batch's values (see albert_tf.run.training.Trainer)."""
        raise NotImplementedError

    def loss_normalizers(self):
        """None (the loss is a mean over each replica's batch, exact for fixed-size
        batches), or `fn(features) -> tuple of []`: what the loss terms divide by, from
        the input alone, totalled over each step's global batch by the Trainer."""
        return None

    # --- data and evaluation ----------------------------------------------------------
    def prepare(self, run: Run) -> None:
        """Features and files the run needs (output_dir exists)."""

    def evaluator(self, run: Run) -> Evaluation | None:
        """The dev evaluation, or None when the run selects no checkpoint."""
        return None

    def training_plan(self, run: Run) -> TrainingPlan:
        raise NotImplementedError

    # --- outputs ----------------------------------------------------------------------
    def wants_final_weights(self) -> bool:
        """Whether predict/export run (they see the final weights)."""
        return False

    def predict(self, run: Run) -> None:
        """Writes the task's prediction files; adds to run.summary."""

    def export(self, run: Run) -> None:
        """Writes the task's exports; adds to run.summary."""


def run(task: Task) -> dict:
    """Runs the task as its options ask (steps 1-8 of the module docstring): its plan,
    the checks before any work (albert_tf/run/preflight.py), then the work. Returns the
    summary dict (init, train_step, best, eval, prediction files, ...)."""
    plan = preflight.plan(task)
    preflight.check(plan)
    current = start(plan.options, plan.config, task.batch_divisor())
    with current.strategy.scope():
        current.model = task.build_model(plan.config)
        current.model.build()
    preflight.check_model(plan, current.model)
    current.resuming = plan.resuming
    current.release_folder, current.tokenizer_model = task.release_folder, task.tokenizer_model()
    return work(plan, current)


def work(plan: preflight.Plan, current: Run) -> dict:
    """Steps 4-8 of the module docstring, once every check passed: the initial weights,
    then the output folder (its lock held, its task.json) and the training, selection
    and predictions in it."""
    task, opts, folder = plan.task, plan.options, plan.folder
    if plan.initial and not current.resuming:
        flag, path = plan.initial
        current.summary["init"] = init_from_checkpoint(
            current.model,
            path,
            task.head,
            task.head_patterns,
            task.init_from_group0,
            flag=flag,
        )
        current.initialized = True
        _logger.info("%s: %s", flag, current.summary["init"])
    elif plan.initial:  # checked to fit (`preflight.check_model`), not loaded
        resumed = plan.found.resume_points() or plan.found.original_checkpoints()
        checkpoint_checks.log_resume_wins(plan.initial[1], resumed[-1][1])
    tf.io.gfile.makedirs(folder.path)  # only once the inputs proved usable
    with run_lock.hold(folder.path, current.is_chief):
        if task.output_identity() and current.is_chief:
            folder.write_task(task.output_identity())
        # A record cut short or corrupted after the first, which `resolve` checks, or a
        # checkpoint whose bytes do not match its checksums: one line; the checkpoints
        # written so far stay, and a rerun resumes and stops at the same place.
        named = " or ".join(
            f"{flag}={getattr(opts, flag[2:])}"
            for flag in task.record_flags
            if getattr(opts, flag[2:], None)
        )
        init = plan.initial[1] if plan.initial else None
        try:
            with checkpoint_checks.damaged_reads_reported(named, folder.path, init):
                return _train_evaluate_predict(task, current)
        finally:
            if current.is_chief:  # a save cut short (full disk, a signal): its temporaries
                folder.remove_unfinished()


def _train_evaluate_predict(task: Task, current: Run) -> dict:
    """Steps 5-8 of the module docstring once the output folder is made."""
    opts = task.options
    task.prepare(current)

    evaluation = task.evaluator(current)
    selector = None
    if evaluation is not None:
        selector = selection.CheckpointSelector(
            evaluation.key,
            opts.output_dir,
            current.model,
            evaluation.evaluate,
            task.head,
            current.is_chief,
            evaluation.fmt,
        )
    skip = resume_points(opts) if opts.do_train else None
    if opts.do_train:
        if selector is not None:
            selector.evaluate_pending(skip)  # checkpoints of an interrupted run
        current.summary["train_step"] = train(task, current, selector)
    if selector is not None:
        finish_selection(selector, current, skip)
    if task.wants_final_weights():
        current.summary["predict_weights"] = final_weights(current, task.head)
        task.predict(current)
        task.export(current)
    return current.summary


def start(opts: RunOptions, config, batch_divisor: int = 1) -> Run:
    """Host allocator, dtype policy, seeds and distribution strategy; checks that the
    training batch splits evenly over replicas x batch_divisor."""
    from albert_tf.run.distribute import get_strategy, is_chief
    from albert_tf.run.host_memory import configure_host_allocator

    configure_host_allocator(
        opts.host_allocator,  # before TensorFlow's first op
        num_parameters=config.num_parameters(),
    )
    keras.mixed_precision.set_global_policy(opts.dtype)
    keras.utils.set_random_seed(opts.random_seed)
    strategy = get_strategy(
        opts.strategy,
        opts.use_tpu,
        opts.tpu_name,
        opts.tpu_zone,
        opts.gcp_project,
        opts.master,
        opts.tpu_timeout_s,
        opts.worker_timeout_s,
    )
    replicas = strategy.num_replicas_in_sync
    if opts.train_batch_size % (replicas * batch_divisor):
        split = f"the {replicas} replicas" + (
            f" x {batch_divisor} accumulation steps" if batch_divisor > 1 else ""
        )
        raise UserError(
            f"--train_batch_size={opts.train_batch_size}: expected a multiple of {split}"
        )
    return Run(opts, config, strategy, is_chief(strategy))


def train(task: Task, current: Run, selector) -> int:
    """Trains the task's model to its last step, evaluating on dev after every checkpoint
    (albert_tf/run/output_folder.py) and describing its weights (`describe_weights`).
    Returns the step reached."""
    from albert_tf.run import training
    from albert_tf.run.optimization import create_optimizer

    opts, plan = current.options, task.training_plan(current)
    with current.strategy.scope():
        optimizer = create_optimizer(
            opts.learning_rate,
            plan.num_train_steps,
            plan.num_warmup_steps,
            opts.optimizer,
            plan.poly_power,
            plan.start_warmup_step,
        )
    # The input flags, recorded with the first checkpoint this run writes (a fresh run),
    # or kept as they are (a resumed one: `preflight.check` compared them).
    recorded = run_record.read(opts.output_dir) if current.resuming else None
    clip_like = clip_norm_like(opts, recorded)
    record = {}  # emptied once written
    if current.is_chief and recorded is None:
        record["values"] = {**task.input_shape(), "clip_norm_like": clip_like}
    loop = training.LoopConfig(
        num_train_steps=plan.num_train_steps,
        global_batch_size=opts.train_batch_size,
        iterations_per_loop=opts.iterations_per_loop,
        save_checkpoints_steps=opts.save_checkpoints_steps,
        keep_checkpoint_max=opts.keep_checkpoint_max,
        gradient_accumulation_steps=plan.gradient_accumulation_steps,
        clip_norm_over_lookup_rows=clip_like == "gpu",
        loss_scaling=opts.dtype == "mixed_float16",
        jit_compile=current.jit_compile,
    )
    trainer = training.Trainer(
        current.strategy,
        current.model,
        optimizer,
        task.loss_fn,
        task.metric_names,
        opts.output_dir,
        loop,
        current.is_chief,
        save_hook=lambda step: describe_saved_step(current, record),
        loss_normalizers=task.loss_normalizers(),
    )
    trainer.train(
        plan.dataset_fn, after_save=selector.evaluate_current if selector is not None else None
    )
    return int(optimizer.iterations.numpy())


def clip_norm_like(opts: RunOptions, recorded: dict | None) -> str:
    """ "gpu" or "tpu": --clip_norm_like, or for auto the value a resumed run was started
    with (its run record), else the original's on this hardware. A record written
    before the flag existed says nothing: those runs clipped as "tpu" does, and auto
    resumes them so, for the same weights as an uninterrupted run."""
    if opts.clip_norm_like != "auto":
        return opts.clip_norm_like
    if recorded is not None:
        return recorded.get("clip_norm_like", "tpu")
    return "tpu" if opts.use_tpu else "gpu"


def describe_weights(current: Run) -> None:
    """Writes the files that describe the weights in output_dir (chief only): a release
    folder's config and tokenizer (`Task.release_folder`)."""
    if current.is_chief and current.release_folder:
        folder = OutputFolder(current.options.output_dir)
        folder.write_release_files(current.config, current.tokenizer_model)


def describe_saved_step(current: Run, record) -> None:
    """After each checkpoint on the schedule, and after a resume from one (chief only):
    the input flags' record (`record["values"]`, written once:
    albert_tf/run/run_record.py) and the files describing the weights."""
    if current.is_chief and record:
        run_record.write(current.options.output_dir, record.pop("values"))
    describe_weights(current)


def resume_points(opts: RunOptions):
    """For `CheckpointSelector.evaluate_pending` in a training run: whether (step, prefix)
    is a signal's resume point (albert_tf/run/output_folder.py): a ckpt-<step> without a
    model.ckpt-<step>, off the --save_checkpoints_steps schedule. An uninterrupted run
    never evaluates one (the final step, if off the schedule, is a regular save)."""

    def skip(step, prefix):
        return is_resume_point(prefix) and step % opts.save_checkpoints_steps != 0

    return skip


def finish_selection(selector, current: Run, skip=None) -> None:
    """Evaluates the checkpoints not evaluated yet (but those `skip` names, see
    `resume_points`); with none ever evaluated, the initial weights as step 0 (with the
    files describing them). Puts the best into the summary."""
    selector.evaluate_pending(skip)
    if not selector.results and selector.best is None:
        if not current.initialized:
            raise UserError(
                "no checkpoint (model.ckpt-<step> or ckpt-<step>) in "
                f"{current.options.output_dir} and no --init_checkpoint to evaluate"
            )
        describe_weights(current)
        selector.evaluate_current(0)  # the --init_checkpoint weights
    selector.write_final_block()
    current.summary["best"] = selector.best and {
        k: v for k, v in selector.best.items() if k != "previous"
    }
    if selector.results:
        last = max(selector.results)
        current.summary["eval_step"], current.summary["eval"] = last, selector.results[last]
    if current.is_chief and selector.best is not None:
        _logger.info(
            "best checkpoint on dev: step %d, %s = %.4f (best-on-dev, as the "
            "original's reported numbers)",
            selector.best["global_step"],
            selector.best["key"],
            selector.best["value"],
        )


def init_from_checkpoint(
    model, path, head: str, head_patterns=(), init_from_group0=False, flag="--init_checkpoint"
):
    """Fills `model` from --init_checkpoint (or the TF-Hub module `flag` names); returns
    a one-line description.

    Accepts an original-format checkpoint (a pretraining one: the task head stays fresh;
    a fine-tuned one: head restored), one of our object-based checkpoints (encoder
    restored, head where present), a release folder (albert_config.json +
    model.ckpt-best), a TF-Hub module folder (albert_tf/weights/hub.py; the head stays fresh) or
    a Hugging Face folder / keras-hub preset (albert_tf/weights; its head where it has one).
    `head_patterns`: regexes of the head's original names, which may be missing. Raises
    UserError when the checkpoint cannot fill the encoder.
    """
    from albert_tf.weights import hub
    from albert_tf.weights.foreign_weights import FORMAT_NAMES

    init = InitCheckpoint(path, flag)
    allow_missing = list(head_patterns)
    try:
        if init.is_hub_module:
            module = hub.open_module(path, flag)
            kind, where = "TF-Hub module", module.description
            load = lambda: hub.load_module(model, module, allow_missing)
        elif init.foreign_format:
            kind, where = FORMAT_NAMES[init.foreign_format], path
            load = lambda: checkpoints.load_original_checkpoint(
                model, path, allow_missing=allow_missing, init_from_group0=init_from_group0
            )
        else:
            where = init.prefix
            object_based = checkpoints.is_object_based(where)
            kind = "object checkpoint" if object_based else "original-format checkpoint"
            load = lambda: checkpoints.init_from_checkpoint(
                model, where, allow_missing=allow_missing, init_from_group0=init_from_group0
            )
    except FileNotFoundError as err:
        raise UserError(f"{flag}={path}: {err}") from None
    try:
        report = load()
    except tf.errors.OpError as err:  # bytes that do not match the index's checksums
        detail = err.message.strip().splitlines()[0] if err.message else type(err).__name__
        raise UserError(
            f"{flag}={path}: damaged, nothing loaded ({detail}); expected intact checkpoint "
            "files: copy or download them again"
        ) from None
    except checkpoints.CheckpointMismatchError as err:
        raise UserError(
            f"{flag}={path}: nothing loaded; the checkpoint cannot fill this model: {err.summary()}"
        ) from None
    except UserError as err:  # a file of it refused (a tensor's type, size or values)
        if str(err).startswith(f"{flag}="):
            raise
        raise UserError(f"{flag}={path}: {err}") from None
    if not report.loaded:
        raise UserError(f"{flag}={path}: no variable matched")
    fresh = f"; fresh {head} head" if report.missing_allowed else ""
    return f"loaded {len(report.loaded)} variables from {kind} {where}{fresh}"


def final_weights(current: Run, head: str) -> str:
    """Loads the weights predict/export use: output_dir's model.ckpt-best, else its latest
    training checkpoint, else the initial weights already loaded (--init_checkpoint or the TF-Hub
    module). Returns their path."""
    folder = OutputFolder(current.options.output_dir)
    found = folder.contents()
    initial = preflight.initial_weights(current.options)
    trained = found.trained_checkpoints()
    chosen = found.best or (trained[-1][1] if trained else None)
    if chosen:
        selection.restore_checkpoint(current.model, chosen, head)
        return chosen
    if initial:
        return initial[1]
    raise UserError(
        f"nothing to predict with: no {BEST_NAME}, model.ckpt-<step> or ckpt-<step> in "
        f"{folder.path} and no --init_checkpoint"
    )


def best_checkpoint_line(summary) -> str | None:
    """The line the scripts print about a run's dev selection ("best checkpoint on dev:
    step <n>, <metric> = <value>"), or None when the summary has no best checkpoint."""
    best = summary.get("best")
    if not best:
        return None
    step, key, value = best["global_step"], best["key"], best["value"]
    return f"best checkpoint on dev: step {step}, {key} = {value:.4f}"


__all__ = [
    "RunOptions",
    "best_checkpoint_line",
    "TrainingPlan",
    "Evaluation",
    "Run",
    "Task",
    "run",
    "start",
    "train",
    "work",
    "finish_selection",
    "init_from_checkpoint",
    "final_weights",
]
