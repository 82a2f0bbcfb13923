"""The training loop: learning, accumulation, resume, non-finite stop, workers."""

import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.model import losses
from albert_tf.run import training
from albert_tf.run.optimization import create_optimizer
from albert_tf.run.output_folder import OutputFolder
from albert_tf.tasks import classifier, pretraining
from albert_tf.tasks.classifier import AlbertClassifier

from training_fixtures import build, dataset_fn, loss_summaries, pretraining_config
from worker_fixtures import run_cluster, run_script


def make_trainer(
    model,
    opt,
    output_dir,
    steps,
    batch,
    accumulation=1,
    save_every=1000,
    strategy=None,
    loss_fn=pretraining.pretraining_loss_fn,
    jit_compile=False,
    normalization="global_batch",
    iterations_per_loop=4,
):
    strategy = strategy or tf.distribute.get_strategy()
    config = training.LoopConfig(
        num_train_steps=steps,
        global_batch_size=batch,
        iterations_per_loop=iterations_per_loop,
        save_checkpoints_steps=save_every,
        gradient_accumulation_steps=accumulation,
        jit_compile=jit_compile,
    )
    return training.Trainer(
        strategy,
        model,
        opt,
        loss_fn,
        pretraining.METRIC_NAMES,
        str(output_dir),
        config,
        loss_normalizers=NORMALIZERS[normalization],
    )


NORMALIZERS = {"global_batch": losses.pretraining_loss_normalizers, "per_replica": None}


def weights(model):
    return [v.numpy().copy() for v in model.weights]


def test_training_reduces_loss_and_writes_checkpoints(tmp_path):
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy, "adamw", lr=1e-2, steps=60, warmup=0)
    trainer = make_trainer(model, opt, tmp_path, steps=60, batch=16, save_every=20)
    assert os.listdir(tmp_path) == []  # train/ comes with the first report
    data = dataset_fn(16, n=16)  # one batch, seen 60 times: the loss must collapse
    first = pretraining.evaluate(strategy, model, data, 1)["loss"]
    metrics = trainer.train(data)
    assert metrics["loss"] < 0.4 * first
    assert int(opt.iterations.numpy()) == 60
    assert [step for step, _ in OutputFolder(str(tmp_path)).contents().resume_points()] == [
        20,
        40,
        60,
    ]
    # One copy of the weights per step (model.ckpt-N), the resume state beside it.
    bundle = (".data-00000-of-00001", ".index")
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint",
        *(f"model.ckpt-{s}{suffix}" for s in (20, 40, 60) for suffix in bundle),
        "train",
        "train_state",
    ]
    assert sorted(os.listdir(tmp_path / "train_state")) == [
        f"state-{s}{suffix}" for s in (20, 40, 60) for suffix in bundle
    ]
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-60")
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        "model.ckpt-20",
        "model.ckpt-40",
        "model.ckpt-60",
    ]
    names = {n for n, _ in tf.train.list_variables(str(tmp_path / "model.ckpt-60"))}
    assert "global_step" in names and "bert/pooler/dense/kernel/adam_m" in names
    # The input position (its size varies with what the prefetch buffer held): no weights.
    state = {n for n, _ in tf.train.list_variables(str(tmp_path / "train_state" / "state-60"))}
    assert state == {"_CHECKPOINTABLE_OBJECT_GRAPH", "iterator/.ATTRIBUTES/ITERATOR_STATE"}
    assert os.listdir(tmp_path / "train")  # TensorBoard events


@pytest.mark.parametrize("normalization", ["global_batch", "per_replica"])
def test_gradient_accumulation_equals_one_big_batch(tmp_path, normalization):
    """The two micro-batches of each step hold different numbers of masked tokens. The
    global-batch loss makes 2 accumulation steps the same step as one batch of 8, up to
    float summation order (weights within 3e-7 after 3 AdamW steps, the loss and gradient
    norm logged within 1e-6); the per-replica mean (the mean of the micro-batches' own
    means) is another step (weights 1e-2 apart), which shows that the data tests it."""
    strategy = tf.distribute.get_strategy()
    big, opt_big = build(strategy)
    big_metrics = make_trainer(
        big, opt_big, tmp_path / "big", steps=3, batch=8, normalization=normalization
    ).train(dataset_fn(8))
    acc, opt_acc = build(strategy)
    acc_metrics = make_trainer(
        acc,
        opt_acc,
        tmp_path / "acc",
        steps=3,
        batch=8,
        accumulation=2,
        normalization=normalization,
    ).train(dataset_fn(4))
    assert int(opt_acc.iterations.numpy()) == 3
    largest = max(np.abs(a - b).max() for a, b in zip(weights(big), weights(acc)))
    if normalization == "global_batch":
        assert largest < 1e-6
        for name in ("loss", *pretraining.METRIC_NAMES, "gradient_norm"):
            np.testing.assert_allclose(big_metrics[name], acc_metrics[name], rtol=1e-6)
    else:
        assert largest > 1e-3
        assert abs(big_metrics["loss"] - acc_metrics["loss"]) > 1e-3


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_resume_gives_identical_weights(tmp_path, dropout):
    """With dropout, the resumed run must continue the random stream of its masks."""
    strategy = tf.distribute.get_strategy()
    straight, opt = build(strategy, dropout=dropout)
    make_trainer(straight, opt, tmp_path / "straight", steps=8, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    first, opt1 = build(strategy, dropout=dropout)
    make_trainer(first, opt1, tmp_path / "resumed", steps=4, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    # The first run was killed while saving step 6: its unfinished saves stay behind.
    folder = tmp_path / "resumed"
    for orphan in ("ckpt-6_temp", "model.ckpt-6_temp"):
        (folder / orphan).mkdir()
        (folder / orphan / "part-00000-of-00001.index").write_bytes(b"half")
    (folder / "notes_temp").mkdir()  # not a checkpoint's: kept
    # A fresh process would start here: new model (other dropout seeds too), new
    # optimizer, same folder.
    second, opt2 = build(strategy, seed=99, dropout=dropout)
    make_trainer(second, opt2, folder, steps=8, batch=8, save_every=4).train(dataset_fn(8))
    assert int(opt2.iterations.numpy()) == 8
    assert sorted(p.name for p in folder.glob("*_temp")) == ["notes_temp"]
    for a, b in zip(weights(straight), weights(second)):
        np.testing.assert_array_equal(a, b)
    if dropout:  # the dropout did change the training: the test can tell
        plain, opt3 = build(strategy)
        make_trainer(plain, opt3, tmp_path / "plain", steps=8, batch=8, save_every=4).train(
            dataset_fn(8)
        )
        assert not np.array_equal(weights(plain)[0], weights(straight)[0])


def old_layout_save(with_streams=True):
    """`OutputFolder.save` as versions before the one-copy layout saved a step:
    ckpt-N (model, optimizer, iterator, random streams) plus a model.ckpt-N copy."""

    def save(folder, step, model, optimizer, state, write_weights=True):
        whole = {"model": model, "optimizer": optimizer, "iterator": state["iterator"]}
        if with_streams:
            whole["random_streams"] = training.random_stream_states(model)
        folder.save_resume_point(step, whole)
        return folder.save_weights(step, model, optimizer)

    return save


@pytest.mark.parametrize("with_streams", [True, False])
def test_a_folder_of_the_old_layout_resumes(tmp_path, monkeypatch, caplog, with_streams):
    """ckpt-4 + model.ckpt-4 (written before the one-copy layout) resume; without the
    dropout state (older still) with a warning and other masks. The next saves use the
    new layout and remove every file of the old step."""
    strategy = tf.distribute.get_strategy()
    straight, opt = build(strategy, dropout=0.1)
    make_trainer(straight, opt, tmp_path / "straight", steps=8, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    first, opt1 = build(strategy, dropout=0.1)
    with monkeypatch.context() as patch:
        patch.setattr(OutputFolder, "save", old_layout_save(with_streams))
        make_trainer(first, opt1, tmp_path / "old", steps=4, batch=8, save_every=4).train(
            dataset_fn(8)
        )
    folder = tmp_path / "old"
    assert (folder / "ckpt-4.index").exists() and not (folder / "train_state").exists()
    second, opt2 = build(strategy, seed=99, dropout=0.1)
    trainer = make_trainer(second, opt2, folder, steps=8, batch=8, save_every=4)
    trainer.config.keep_checkpoint_max = 1
    with caplog.at_level("WARNING"):
        trainer.train(dataset_fn(8))
    assert int(opt2.iterations.numpy()) == 8
    assert ("holds no dropout random state" in caplog.text) == (not with_streams)
    same = all(np.array_equal(a, b) for a, b in zip(weights(straight), weights(second)))
    assert same == with_streams
    assert sorted(p.name for p in folder.iterdir() if "ckpt" in p.name) == [
        "model.ckpt-8.data-00000-of-00001",
        "model.ckpt-8.index",
    ]
    assert sorted(p.name for p in (folder / "train_state").iterdir()) == [
        "state-8.data-00000-of-00001",
        "state-8.index",
    ]


def test_a_save_killed_before_its_weights_resumes_from_the_step_before(tmp_path):
    """A process killed after train_state/state-8 but before model.ckpt-8 appeared (or
    with only TensorFlow's temporaries of it): step 8 does not count; the rerun resumes
    from step 4, removes the leftovers, and ends bit-identical."""
    strategy = tf.distribute.get_strategy()
    straight, opt = build(strategy, dropout=0.1)
    make_trainer(straight, opt, tmp_path / "straight", steps=12, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    first, opt1 = build(strategy, dropout=0.1)
    folder = tmp_path / "run"
    make_trainer(first, opt1, folder, steps=8, batch=8, save_every=4).train(dataset_fn(8))
    for name in ("model.ckpt-8.index", "model.ckpt-8.data-00000-of-00001"):
        (folder / name).unlink()
    (folder / "train_state" / "state-12_temp").mkdir()
    assert OutputFolder(str(folder)).contents().latest_step == 4
    second, opt2 = build(strategy, seed=99, dropout=0.1)
    make_trainer(second, opt2, folder, steps=12, batch=8, save_every=4).train(dataset_fn(8))
    for a, b in zip(weights(straight), weights(second)):
        np.testing.assert_array_equal(a, b)
    assert [s.step for s in OutputFolder(str(folder)).saved_steps()] == [4, 8, 12]
    assert all(s.resumable for s in OutputFolder(str(folder)).saved_steps())
    assert sorted(os.listdir(folder / "train_state")) == sorted(
        f"state-{s}{x}" for s in (4, 8, 12) for x in (".data-00000-of-00001", ".index")
    )


def _poisoned(after_calls):
    """The pretraining loss, NaN once it has been called `after_calls` times."""
    calls = tf.Variable(0)

    def loss_fn(model, features, training, normalizers=None):
        loss, parts = pretraining.pretraining_loss_fn(model, features, training, normalizers)
        calls.assign_add(1)
        return loss + tf.where(calls > after_calls, np.float32(np.nan), np.float32(0.0)), parts

    return loss_fn


def test_non_finite_loss_stops_and_names_the_last_good_checkpoint(tmp_path):
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy)
    trainer = make_trainer(
        model, opt, tmp_path, steps=12, batch=8, save_every=4, loss_fn=_poisoned(6)
    )
    with pytest.raises(training.NonFiniteLossError, match=r"steps 5-8: .*ckpt-4, holds finite"):
        trainer.train(dataset_fn(8))
    assert [step for step, _ in OutputFolder(str(tmp_path)).contents().resume_points()] == [4]


def test_weights_with_non_finite_outputs_are_not_saved(tmp_path):
    """The training loss of steps 1-4 is finite, but the weights after step 4 give NaN
    outputs: the save at step 4 is refused and nothing is written."""
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy)
    trainer = make_trainer(model, opt, tmp_path, steps=12, batch=8, save_every=4)
    real_call = type(model).call

    def call(self, inputs, training=False):
        outputs = real_call(self, inputs, training=training)
        if not training:  # what the probe sees
            outputs["sop_logits"] = outputs["sop_logits"] * np.float32(np.nan)
        return outputs

    type(model).call = call
    try:
        with pytest.raises(
            training.NonFiniteLossError,
            match="after step 4 .* not saved; stopping .no checkpoint was written",
        ):
            trainer.train(dataset_fn(8))
    finally:
        type(model).call = real_call
    assert OutputFolder(str(tmp_path)).contents().resume_points() == []


def test_signal_stops_after_a_checkpoint_and_resume_is_identical(tmp_path):
    """SIGINT arrives during steps 5-8: the loop finishes, ckpt-8 is written (not a
    regular save step), TrainingInterrupted names it; resuming ends with the weights of
    an uninterrupted run, bit for bit."""
    import signal

    strategy = tf.distribute.get_strategy()
    straight, opt = build(strategy)
    make_trainer(straight, opt, tmp_path / "straight", steps=12, batch=8, save_every=12).train(
        dataset_fn(8)
    )

    calls = tf.Variable(0)

    def interrupting_loss(model, features, training, normalizers=None):
        if training:
            calls.assign_add(1)
            tf.cond(
                tf.equal(calls, 6),
                lambda: tf.py_function(
                    lambda: os.kill(os.getpid(), signal.SIGINT) or 0, [], tf.int32
                ),
                lambda: tf.constant(0),
            )
        return pretraining.pretraining_loss_fn(model, features, training, normalizers)

    first, opt1 = build(strategy)
    hooked = []
    trainer = make_trainer(
        first, opt1, tmp_path / "run", steps=12, batch=8, save_every=12, loss_fn=interrupting_loss
    )
    trainer.save_hook = hooked.append
    with pytest.raises(training.TrainingInterrupted, match="SIGINT at step 8") as stop:
        trainer.train(dataset_fn(8))
    assert stop.value.signum == signal.SIGINT and stop.value.checkpoint.endswith("ckpt-8")
    assert hooked == []  # step 8 is off the schedule: a resume point only
    second, opt2 = build(strategy, seed=99)
    trainer = make_trainer(second, opt2, tmp_path / "run", steps=12, batch=8, save_every=12)
    trainer.save_hook = hooked.append
    trainer.train(dataset_fn(8))
    for a, b in zip(weights(straight), weights(second)):
        np.testing.assert_array_equal(a, b)
    # The folder of an uninterrupted run: ckpt-8 went with the next save.
    assert hooked == [12]
    assert [s for s, _ in OutputFolder(str(tmp_path / "run")).contents().resume_points()] == [12]


def test_loop_config_validation():
    with pytest.raises(ValueError, match="--gradient_accumulation_steps must be >= 1"):
        training.LoopConfig(num_train_steps=1, global_batch_size=1, gradient_accumulation_steps=0)


def test_steps_per_loop_change_nothing_but_when_lines_are_written(tmp_path, caplog):
    """iterations_per_loop=1 and 3 train the same weights, bit for bit; with 3 (and a
    checkpoint every 4 of 8 steps) the loops are steps 1-3, 4, 5-7, 8: a progress line
    and summaries after each, checkpoints after 4 and 8."""
    strategy = tf.distribute.get_strategy()
    runs = {}
    for per_loop in (1, 3):
        model, opt = build(strategy)
        caplog.clear()
        with caplog.at_level("INFO", logger="albert_tf.run.training"):
            make_trainer(
                model,
                opt,
                tmp_path / str(per_loop),
                steps=8,
                batch=8,
                save_every=4,
                iterations_per_loop=per_loop,
            ).train(dataset_fn(8))
        progress = [int(m) for m in re.findall(r"step (\d+)/8 \|", caplog.text)]
        runs[per_loop] = weights(model), progress
    for a, b in zip(runs[1][0], runs[3][0]):
        np.testing.assert_array_equal(a, b)
    assert runs[1][1] == list(range(1, 9))
    assert runs[3][1] == [3, 4, 7, 8]
    assert [step for step, _ in loss_summaries(str(tmp_path / "3"))] == [3, 4, 7, 8]
    assert [step for step, _ in OutputFolder(str(tmp_path / "3")).contents().resume_points()] == [
        4,
        8,
    ]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """multiworker_script.py under the default strategy."""
    folder = tmp_path_factory.mktemp("one_process")
    run_script("multiworker_script.py", folder / "run", folder / "result.npz")
    return np.load(folder / "result.npz")


def assert_same_training(one, other):
    """Results of multiworker_script.py under two strategies, each with a global batch of
    8 split differently. Global-batch loss: the same weights up to float summation order
    (within 1e-6) and loss summaries (within 1e-6); per-replica means: other weights, as
    the parts hold different numbers of masked tokens. Either way the progress lines,
    summaries and checkpoints come at the same steps."""
    for normalization in ("global_batch", "per_replica"):
        for key, steps in (("progress", [3, 4, 7, 8]), ("summaries", [3, 4, 7, 8])):
            for result in (one, other):
                np.testing.assert_array_equal(result[f"{normalization}/{key}"], steps)
        for result in (one, other):
            np.testing.assert_array_equal(result[f"{normalization}/checkpoints"], [4, 8])
    names = [k for k in one.files if k.startswith("global_batch/w")]
    largest = max(np.abs(one[k] - other[k]).max() for k in names)
    assert largest < 1e-6
    np.testing.assert_allclose(one["global_batch/loss"], other["global_batch/loss"], rtol=1e-6)
    per_replica = [k.replace("global_batch/", "per_replica/") for k in names]
    assert max(np.abs(one[k] - other[k]).max() for k in per_replica) > 1e-3


def test_two_replicas_equal_one_with_same_global_batch(tmp_path, one_process):
    run_script("multiworker_script.py", tmp_path / "run", tmp_path / "result.npz", "mirrored2")
    assert_same_training(one_process, np.load(tmp_path / "result.npz"))


@pytest.mark.slow
def test_two_workers_equal_one_worker_with_same_global_batch(tmp_path, one_process):
    run_cluster(
        "multiworker_script.py",
        lambda index: [tmp_path / "two", tmp_path / f"worker{index}.npz", "multi_worker"],
    )
    chief, other = (np.load(tmp_path / f"worker{i}.npz") for i in (0, 1))
    for key in chief.files:
        if "/w" in key:
            np.testing.assert_array_equal(chief[key], other[key])  # the workers agree
    assert_same_training(one_process, chief)


def test_xla_step_matches_plain_step(tmp_path):
    strategy = tf.distribute.get_strategy()
    plain, opt = build(strategy)
    make_trainer(plain, opt, tmp_path / "plain", steps=3, batch=8).train(dataset_fn(8))
    compiled, opt_xla = build(strategy)
    make_trainer(compiled, opt_xla, tmp_path / "xla", steps=3, batch=8, jit_compile=True).train(
        dataset_fn(8)
    )
    for a, b in zip(weights(plain), weights(compiled)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


# --- the clipping norm of the original off TPU (--clip_norm_like=gpu) -----------------
def classifier_batch(ids, segments):
    """A classifier batch: `ids` and `segments` [B, S] int, labels alternating."""
    ids = np.asarray(ids, np.int32)
    return {
        "input_ids": ids,
        "input_mask": np.ones_like(ids),
        "segment_ids": np.asarray(segments, np.int32),
        "label_ids": (np.arange(len(ids)) % 2).astype(np.int32),
    }


def build_classifier(optimizer, seed=3):
    keras.utils.set_random_seed(seed)
    model = AlbertClassifier(pretraining_config(), num_labels=2, classifier_dropout=0.0)
    model.build()
    return model, create_optimizer(1e-2, 10, 0, optimizer)


def train_classifier_once(
    tmp_path, batch, optimizer, rows, accumulation=1, clip_norm=0.01, jit_compile=False
):
    """One Trainer step of the tiny classifier on `batch`; (model, trainer, metrics)."""
    model, opt = build_classifier(optimizer)
    size = len(batch["input_ids"])
    config = training.LoopConfig(
        num_train_steps=1,
        global_batch_size=size,
        iterations_per_loop=1,
        gradient_accumulation_steps=accumulation,
        clip_norm=clip_norm,
        clip_norm_over_lookup_rows=rows,
        jit_compile=jit_compile,
    )
    trainer = training.Trainer(
        tf.distribute.get_strategy(), model, opt, classifier.loss_fn, [], str(tmp_path), config
    )

    def fn(ctx):
        data = tf.data.Dataset.from_tensor_slices(batch).repeat()
        return data.batch(size // accumulation, drop_remainder=True)

    return model, trainer, trainer.train(fn)


REPEATED = classifier_batch(
    [[2, 5, 5, 7, 5, 9, 9, 3], [2, 7, 7, 7, 5, 9, 3, 3], [2, 5, 9, 9, 9, 7, 3, 0]] * 2,
    [[0, 0, 0, 0, 1, 1, 1, 1]] * 6,
)
# Every word id and every segment id once: no row of a lookup gradient repeats.
UNIQUE = classifier_batch([[2, 11]], [[0, 1]])


@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
@pytest.mark.parametrize("batch", [REPEATED, UNIQUE], ids=["repeated_ids", "unique_ids"])
def test_lookup_row_clipping_is_tf_clip_by_global_norm_of_the_gathers_gradients(
    tmp_path, optimizer, batch
):
    """The reference is the original's path off TPU: TensorFlow's own clip_by_global_norm
    on the tape's gradients as they come, the word and token-type tables' as
    tf.IndexedSlices of one row per token; the update then adds the rows up."""
    model, trainer, metrics = train_classifier_once(tmp_path, batch, optimizer, rows=True)
    names = sorted(model.trainable_variables[i].path for i in trainer._lookup_rows)
    assert [n.rsplit("/", 1)[-1] for n in names] == ["token_type_embeddings", "word_embeddings"]

    reference, opt = build_classifier(optimizer)
    with tf.GradientTape() as tape:
        loss, _ = classifier.loss_fn(reference, batch, training=True)
    grads = tape.gradient(loss, reference.trainable_variables)
    assert sum(isinstance(g, tf.IndexedSlices) for g in grads) == 2
    clipped, norm = tf.clip_by_global_norm(grads, 0.01)
    dense_norm = tf.linalg.global_norm([tf.convert_to_tensor(g) for g in grads])
    np.testing.assert_allclose(metrics["gradient_norm"], norm.numpy(), rtol=1e-6)
    if batch is REPEATED:
        assert abs(float(norm) / float(dense_norm) - 1) > 0.01  # the two norms differ
    else:
        np.testing.assert_allclose(float(norm), float(dense_norm), rtol=1e-6)
    opt.apply([tf.convert_to_tensor(g) for g in clipped], reference.trainable_variables)
    # Scaling the added-up rows or adding up the scaled rows: float32 rounding, which
    # Adam's normalised step carries into the weights at 1e-4 of the step (lr 1e-2).
    for got, want in zip(model.trainable_variables, reference.trainable_variables):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=1e-6)

    _, _, dense = train_classifier_once(tmp_path / "dense", batch, optimizer, rows=False)
    np.testing.assert_allclose(dense["gradient_norm"], dense_norm.numpy(), rtol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["plain", "xla"])
def test_lookup_row_clipping_adds_the_rows_of_every_micro_batch(tmp_path, jit_compile):
    """Two micro-batches of 3 give the norm and update of one batch of 6: the rows of a
    global batch on one device; also when the gradients are compiled by XLA. (Replicas:
    multiworker_script.py clips so.)"""
    one, _, whole = train_classifier_once(tmp_path / "one", REPEATED, "lamb", rows=True)
    two, _, split = train_classifier_once(
        tmp_path / "two", REPEATED, "lamb", rows=True, accumulation=2, jit_compile=jit_compile
    )
    np.testing.assert_allclose(split["gradient_norm"], whole["gradient_norm"], rtol=1e-6)
    for a, b in zip(one.trainable_variables, two.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=0, atol=1e-6)


def test_pretraining_counts_only_the_token_type_rows(tmp_path):
    """The word table is also the masked-LM output matrix: its two gradients are added
    into a dense one, as in the original's graph; the token-type table's stays rows."""
    model, opt = build(tf.distribute.get_strategy())
    trainer = make_trainer(model, opt, tmp_path, steps=1, batch=8)
    trainer.config.clip_norm_over_lookup_rows = True
    trainer.train(dataset_fn(8))
    names = [model.trainable_variables[i].path for i in trainer._lookup_rows]
    assert [n.rsplit("/", 1)[-1] for n in names] == ["token_type_embeddings"]
