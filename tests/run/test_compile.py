"""Every task's training and evaluation steps compiled with XLA (--use_xla, and always on
a TPU): the same losses, gradients and outputs as the plain steps, no host-only op in the
compiled graph, and the same under the speed paths an accelerator takes (standard ops)."""

import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import op_def_registry

from albert_tf.cpu import speed_paths
from albert_tf.model import losses
from albert_tf.model.modeling import AlbertPretrainer
from albert_tf.run import driver, training
from albert_tf.tasks import classifier, pretraining, squad
from albert_tf.tasks.classifier import AlbertClassifier
from albert_tf.tasks.race import AlbertRace
from albert_tf.tasks.squad import AlbertSquadV1, AlbertSquadV2

BATCH, SEQ, PREDS, CHOICES = 4, 12, 3, 4
# Ops that run Python or need the host: XLA cannot compile them, a TPU cannot run them.
HOST_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "Print", "PrintV2"}
# Compiled vs plain: XLA fuses and reorders float32 sums (measured up to 2e-6 relative).
RTOL, ATOL = 2e-5, 1e-6


def compile_config():
    """The suite's tiny config, positions for the RACE choices' joined sequences."""
    return tiny_config(
        vocab_size=50,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=CHOICES * SEQ,
        initializer_range=0.2,
    )


def encoder_inputs(rng, batch, seq):
    mask = np.ones((batch, seq), np.int32)
    mask[1, seq // 2 :] = 0  # a padded example
    return {
        "input_ids": rng.integers(5, 50, (batch, seq)).astype(np.int32),
        "input_mask": mask,
        "segment_ids": (np.arange(seq)[None] >= seq // 3).repeat(batch, 0).astype(np.int32),
    }


def features_of(task, rng):
    """A training batch of the task (BATCH examples); evaluation reads the same keys."""
    batch = BATCH
    if task == "race":
        f = encoder_inputs(rng, batch, CHOICES * SEQ)
        labels = rng.integers(0, CHOICES, batch).astype(np.int32)
        return {**f, "label_ids": labels, "is_real_example": np.ones(batch, np.int32)}
    f = encoder_inputs(rng, batch, SEQ)
    if task == "pretraining":
        weights = (np.arange(PREDS)[None] < rng.integers(1, PREDS + 1, (batch, 1))).astype(
            np.float32
        )
        return {
            **f,
            "masked_lm_positions": np.sort(rng.integers(1, SEQ // 2, (batch, PREDS)), 1).astype(
                np.int32
            ),
            "masked_lm_ids": rng.integers(5, 50, (batch, PREDS)).astype(np.int32),
            "masked_lm_weights": weights,
            "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
        }
    if task == "classification":
        labels = rng.integers(0, 3, batch).astype(np.int32)
        return {**f, "label_ids": labels, "is_real_example": np.ones(batch, np.int32)}
    if task == "regression":
        labels = rng.uniform(0, 5, batch).astype(np.float32)
        return {**f, "label_ids": labels, "is_real_example": np.ones(batch, np.int32)}
    spans = {
        "start_positions": rng.integers(1, SEQ // 2, batch).astype(np.int32),
        "end_positions": rng.integers(SEQ // 2, SEQ, batch).astype(np.int32),
        "unique_ids": np.arange(1, batch + 1, dtype=np.int32),
    }
    if task == "squad_v1":
        return {**f, **spans}
    p_mask = np.zeros((batch, SEQ), np.int32)
    p_mask[:, 1:3] = 1  # the question: not an answer
    return {**f, **spans, "p_mask": p_mask, "is_impossible": np.array([0, 1, 0, 1], np.int32)}


def make_model(task):
    config = compile_config()
    model = {
        "pretraining": lambda: AlbertPretrainer(config, full_sequence_output=False),
        "classification": lambda: AlbertClassifier(config, 3, classifier_dropout=0.0),
        "regression": lambda: AlbertClassifier(config, 1, classifier_dropout=0.0),
        "squad_v1": lambda: AlbertSquadV1(config),
        "squad_v2": lambda: AlbertSquadV2(config, start_n_top=2, end_n_top=3, dropout_prob=0.0),
        "race": lambda: AlbertRace(config, dropout_prob=0.0),
    }[task]()
    model.build()
    return model


LOSS_FNS = {
    "pretraining": pretraining.pretraining_loss_fn,
    "classification": classifier.loss_fn,
    "regression": classifier.loss_fn,
    "squad_v1": squad.loss_fn,
    "squad_v2": squad.loss_fn_v2,
    "race": classifier.loss_fn,
}
TASKS = sorted(LOSS_FNS)


def handles_strings(node):
    """Whether an input or output of the NodeDef is a string: fixed by its op's
    definition or set by the node's type attributes."""
    op_def = op_def_registry.get(node.op)
    if op_def is None:  # a call of a function of the library: its types are attributes
        return any(types_pb2.DT_STRING in v.list.type for v in node.attr.values())
    for arg in [*op_def.input_arg, *op_def.output_arg]:
        types = [arg.type]
        if arg.type_attr:
            types.append(node.attr[arg.type_attr].type)
        if arg.type_list_attr:
            types.extend(node.attr[arg.type_list_attr].list.type)
        if types_pb2.DT_STRING in types:
            return True
    return False


def graph_types(concrete):
    """{op type} and {op type with a string input or output} of a concrete function's
    graph and of every function it calls."""
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return {node.op for node in nodes}, {node.op for node in nodes if handles_strings(node)}


def assert_device_only(concrete):
    types, string_ops = graph_types(concrete)
    assert "BatchMatMulV2" in types  # the walk reaches the model's attention
    assert not types & HOST_OPS, types & HOST_OPS
    assert not string_ops, string_ops


def train_step(task, model, features, tmp_path, jit_compile):
    """(loss, metrics, gradients) of the Trainer's per-replica step (the part --use_xla
    compiles) and, compiled, its concrete function; pretraining with the global-batch
    normalizers."""
    normalizers = losses.pretraining_loss_normalizers if task == "pretraining" else None
    trainer = training.Trainer(
        tf.distribute.get_strategy(),
        model,
        tf.keras.optimizers.SGD(0.1),
        LOSS_FNS[task],
        pretraining.METRIC_NAMES if task == "pretraining" else (),
        str(tmp_path),
        training.LoopConfig(num_train_steps=1, global_batch_size=BATCH, jit_compile=jit_compile),
    )
    args = (features, *normalizers(features)) if normalizers else (features,)
    grads, _, parts = trainer._gradients(*args)
    concrete = trainer._gradients.get_concrete_function(*args) if jit_compile else None
    return parts, [None if g is None else g.numpy() for g in grads], concrete


@pytest.mark.parametrize("task", TASKS)
def test_compiled_train_step_matches_plain_step(task, tmp_path):
    """Plain (CPU speed paths), compiled, and compiled under the accelerator's paths:
    the same loss, logged scalars and gradients; no host op in the compiled graphs."""
    rng = np.random.default_rng(TASKS.index(task))
    features = {k: tf.constant(v) for k, v in features_of(task, rng).items()}
    model = make_model(task)
    plain_parts, plain_grads, _ = train_step(task, model, features, tmp_path / "p", False)
    runs = [train_step(task, model, features, tmp_path / "x", True)]
    with speed_paths.forced(speed_paths.PLAIN):
        runs.append(train_step(task, model, features, tmp_path / "a", True))
    assert len(plain_grads) == len(model.trainable_variables)
    assert sum(g is not None for g in plain_grads) >= len(plain_grads) - 2  # SQuAD: no pooler
    for parts, grads, concrete in runs:
        assert sorted(parts) == sorted(plain_parts)
        for name in parts:
            np.testing.assert_allclose(parts[name], plain_parts[name], rtol=RTOL, err_msg=name)
        for got, want in zip(grads, plain_grads, strict=True):
            if want is None:
                assert got is None
            else:
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        assert_device_only(concrete)


def predict(task, model, features, jit_compile):
    """The task's evaluation/prediction loop over two batches (pretraining: its eval
    metrics), in the default strategy."""
    strategy = tf.distribute.get_strategy()
    data = {k: np.concatenate([v, v[::-1]]) for k, v in features.items()}

    def dataset_fn(_context=None):
        return tf.data.Dataset.from_tensor_slices(data).batch(BATCH, drop_remainder=True)

    if task == "pretraining":
        return pretraining.evaluate(strategy, model, dataset_fn, 2, jit_compile)
    if task.startswith("squad"):
        by_id = squad.predict_outputs(strategy, model, dataset_fn, jit_compile)
        return {f"{uid}/{name}": v for uid, out in by_id.items() for name, v in out.items()}
    return classifier.predict_arrays(strategy, model, dataset_fn, jit_compile)


def inference_graph(model, features):
    """The graph of the compiled inference call (what every evaluation step runs), traced
    with the current speed paths."""
    compiled = tf.function(lambda f: model(f, training=False), jit_compile=True)
    return compiled.get_concrete_function(features)


@pytest.mark.parametrize("task", TASKS)
def test_compiled_eval_step_matches_plain_step(task):
    """Evaluation/prediction outputs (logits, probabilities, the SQuAD v2 beam, eval
    metrics): compiled == plain, and so are those of the accelerator's paths (plain: the
    training test compiles them); no host op in the compiled inference graph of either."""
    rng = np.random.default_rng(10 + TASKS.index(task))
    features = features_of(task, rng)
    tensors = {k: tf.constant(v) for k, v in features.items()}
    model = make_model(task)
    plain = predict(task, model, features, False)
    runs = [predict(task, model, features, True)]
    assert_device_only(inference_graph(model, tensors))
    with speed_paths.forced(speed_paths.PLAIN):
        runs.append(predict(task, model, features, False))
        assert_device_only(inference_graph(model, tensors))
    for got in runs:
        assert sorted(got) == sorted(plain)
        for name, want in plain.items():
            want = np.asarray(want)
            if want.dtype.kind in "iu":  # indexes, predictions, ids: exactly
                np.testing.assert_array_equal(got[name], want, err_msg=name)
            else:
                np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=ATOL, err_msg=name)


def test_host_ops_are_detected():
    """The check itself: a py_function or a string op in a graph is found."""

    @tf.function
    def with_host_ops(x):
        y = tf.py_function(lambda v: v * 2, [x], tf.float32)
        return y, tf.strings.as_string(x)

    types, string_ops = graph_types(with_host_ops.get_concrete_function(tf.constant(1.0)))
    assert "EagerPyFunc" in types and "AsString" in string_ops


@pytest.mark.parametrize(
    "use_xla,tpu,compiled", [(False, False, False), (True, False, True), (False, True, True)]
)
def test_steps_are_compiled_with_use_xla_and_always_on_a_tpu(use_xla, tpu, compiled):
    class FakeTPUStrategy(tf.distribute.TPUStrategy):
        def __init__(self):  # no TPU to connect to
            pass

    strategy = FakeTPUStrategy() if tpu else tf.distribute.get_strategy()
    options = driver.RunOptions(output_dir="unused", use_xla=use_xla)
    assert driver.Run(options, compile_config(), strategy, True).jit_compile is compiled
