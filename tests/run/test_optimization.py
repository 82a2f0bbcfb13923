"""Tests of albert_tf.run.optimization against numpy references written from the
math of the original release (docs/original.md §7), not from the code
under test."""

import contextlib
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.run import optimization

F32 = np.float32
ORIGINAL_EXCLUSIONS = ["LayerNorm", "layer_norm", "bias"]


# --------------------------------------------------------------------------
# numpy references
# --------------------------------------------------------------------------


def np_lr(s, lr0, total, warmup, s0=0, power=1.0, clip_negative=True):
    """Original schedule (§7.1), in float32 like the original graph."""
    frac = F32(min(s, total)) / F32(total)
    lr = F32(lr0) * (F32(1.0) - frac) ** F32(power)
    if warmup > 0 and (s - s0) < warmup:
        lr = F32(lr0) * (F32(s - s0) / F32(warmup))
        if clip_negative:
            lr = max(lr, F32(0.0))
    return F32(lr)


def np_step(w, g, m, v, lr, rate, decay, adapt, b1=0.9, b2=0.999, eps=1e-6):
    """One AdamW (adapt=False) or LAMB (adapt=True) update (§7.3, §7.4)."""
    m = F32(b1) * m + F32(1.0 - b1) * g
    v = F32(b2) * v + F32(1.0 - b2) * (g * g)
    u = m / (np.sqrt(v) + F32(eps))
    if decay:
        u = u + F32(rate) * w
    ratio = F32(1.0)
    if adapt:
        w_norm = np.sqrt(np.sum(w.astype(np.float64) ** 2))
        u_norm = np.sqrt(np.sum(u.astype(np.float64) ** 2))
        if w_norm > 0 and u_norm > 0:
            ratio = F32(w_norm / u_norm)
    w = w - ratio * F32(lr) * u
    return w.astype(F32), m.astype(F32), v.astype(F32)


# --------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------

# path -> (shape, zero-initialized, excluded by the original list)
VARIABLES = {
    "albert/embeddings/word_embeddings": ((6, 4), False, False),
    "albert/encoder/group_0/attention/query/kernel": ((4, 4), False, False),
    "albert/encoder/group_0/attention/query/bias": ((4,), False, True),
    "albert/encoder/group_0/LayerNorm/gamma": ((4,), False, True),
    "albert/encoder/group_0/layer_norm_1/beta": ((4,), False, True),
    "albert/cls/output_weights": ((2, 4), True, False),
    "albert/pooler/kernel": ((4, 4), False, False),  # never gets a gradient
}
NO_GRAD = "albert/pooler/kernel"
STEPS = 24
LR0, TOTAL, WARMUP = 0.05, 30, 4


def make_variable(path, value):
    """A Keras variable whose `path` is exactly `path`."""
    *scopes, name = path.split("/")
    with contextlib.ExitStack() as stack:
        for scope in scopes:
            stack.enter_context(keras.name_scope(scope))
        return keras.Variable(value, name=name)


def initial_values():
    rng = np.random.default_rng(0)
    values = {}
    for path, (shape, zero, _) in VARIABLES.items():
        values[path] = np.zeros(shape, F32) if zero else rng.normal(size=shape).astype(F32)
    return values


def gradient_sequence():
    rng = np.random.default_rng(1)
    return [
        {
            path: rng.normal(size=shape).astype(F32)
            for path, (shape, _, _) in VARIABLES.items()
            if path != NO_GRAD
        }
        for _ in range(STEPS)
    ]


def reference_run(adapt, rate):
    """Runs the numpy reference; returns final weights and slots."""
    w = initial_values()
    m = {p: np.zeros_like(x) for p, x in w.items()}
    v = {p: np.zeros_like(x) for p, x in w.items()}
    for step, grads in enumerate(gradient_sequence()):
        lr = np_lr(step, LR0, TOTAL, WARMUP)
        for path, g in grads.items():
            excluded = VARIABLES[path][2]
            w[path], m[path], v[path] = np_step(
                w[path],
                g,
                m[path],
                v[path],
                lr,
                rate,
                decay=not excluded,
                adapt=adapt and not excluded,
            )
    return w, m, v


def ordered_grads(grads_by_path):
    return [tf.constant(grads_by_path[p]) for p in VARIABLES if p != NO_GRAD]


def make_optimizer(kind):
    return optimization.create_optimizer(LR0, TOTAL, WARMUP, optimizer=kind, weight_decay_rate=0.01)


def run_training(kind, mode):
    """Applies the gradient sequence with the optimizer in `mode`."""
    strategy = (
        tf.distribute.MirroredStrategy(["/cpu:0"])
        if mode == "mirrored"
        else tf.distribute.get_strategy()
    )
    with strategy.scope():
        values = initial_values()
        variables = [make_variable(p, values[p]) for p in VARIABLES]
        opt = make_optimizer(kind)
        if mode in ("jit", "mirrored"):
            # Slot creation cannot happen inside XLA or a replica context;
            # build (as a training loop would) with the variables that get
            # gradients.
            opt.build([var for var, p in zip(variables, VARIABLES) if p != NO_GRAD])

    with_grad = [var for var, p in zip(variables, VARIABLES) if p != NO_GRAD]

    def apply(*targets):
        # d/dw sum(w * G) = G: the tape yields the prescribed gradients, and
        # None for the variable that is not in the loss.
        with tf.GradientTape() as tape:
            loss = tf.add_n([tf.reduce_sum(var * t) for var, t in zip(with_grad, targets)])
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))

    if mode == "eager":
        step_fn = apply
    elif mode == "function":
        step_fn = tf.function(apply)
    elif mode == "jit":
        step_fn = tf.function(apply, jit_compile=True)
    else:

        @tf.function
        def step_fn(*grads):
            strategy.run(apply, args=grads)

    for grads in gradient_sequence():
        step_fn(*ordered_grads(grads))
    return opt, dict(zip(VARIABLES, variables))


# --------------------------------------------------------------------------
# optimizer math
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,mode",
    [
        ("adamw", "eager"),
        ("lamb", "eager"),
        ("adamw", "function"),
        ("lamb", "function"),
        ("lamb", "jit"),
        ("adamw", "mirrored"),
        ("lamb", "mirrored"),
    ],
)
def test_matches_numpy_reference(kind, mode):
    opt, variables = run_training(kind, mode)
    ref_w, ref_m, ref_v = reference_run(adapt=kind == "lamb", rate=0.01)
    assert int(opt.iterations.numpy()) == STEPS
    for path, var in variables.items():
        np.testing.assert_allclose(var.numpy(), ref_w[path], rtol=1e-5, atol=1e-6, err_msg=path)
        if path == NO_GRAD:
            # No gradient: untouched and, as in the original, no slots.
            np.testing.assert_array_equal(var.numpy(), initial_values()[path])
            assert not opt.has_slots(var)
            continue
        for slot, ref in (("adam_m", ref_m), ("adam_v", ref_v)):
            np.testing.assert_allclose(
                opt.get_slot(var, slot).numpy(),
                ref[path],
                rtol=1e-5,
                atol=1e-7,
                err_msg=f"{path}/{slot}",
            )


def test_first_update_uses_lr_zero_but_updates_moments():
    values = initial_values()
    var = make_variable("m/dense/kernel", values["albert/cls/output_weights"] + 1)
    before = var.numpy().copy()
    opt = make_optimizer("lamb")
    grad = np.full(var.shape, 0.5, F32)
    opt.apply_gradients([(tf.constant(grad), var)])
    # Keras reads the schedule before incrementing `iterations`: lr(0) = 0.
    np.testing.assert_array_equal(var.numpy(), before)
    np.testing.assert_allclose(opt.get_slot(var, "adam_m").numpy(), 0.1 * grad)
    assert int(opt.iterations.numpy()) == 1
    opt.apply_gradients([(tf.constant(grad), var)])
    assert not np.array_equal(var.numpy(), before)


def test_zero_update_and_zero_weight_give_trust_ratio_one():
    # wd = 0 and g = 0 keep u = 0: the ratio must fall back to 1, not NaN.
    w0 = np.arange(6, dtype=F32).reshape(2, 3)
    var = make_variable("m/still/kernel", w0)
    zero = make_variable("m/zero/kernel", np.zeros((2, 3), F32))
    opt = optimization.LAMB(learning_rate=0.1, weight_decay_rate=0.0)
    g = np.ones((2, 3), F32)
    for _ in range(3):
        opt.apply_gradients([(tf.zeros((2, 3)), var), (tf.constant(g), zero)])
    np.testing.assert_array_equal(var.numpy(), w0)
    w = m = v = np.zeros((2, 3), F32)
    for _ in range(3):
        w, m, v = np_step(w, g, m, v, 0.1, 0.0, decay=False, adapt=True)
    np.testing.assert_allclose(zero.numpy(), w, rtol=1e-6)


def test_sparse_gradients_are_densified_like_the_original():
    table = make_variable("m/embeddings/word_embeddings", np.ones((5, 2), F32))
    opt = optimization.AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.0)
    shape = tf.constant([5, 2])
    grads = [tf.IndexedSlices(tf.ones((1, 2)), tf.constant([row]), shape) for row in (0, 3)]
    w, m, v = table.numpy(), np.zeros((5, 2), F32), np.zeros((5, 2), F32)
    for g in grads:
        opt.apply_gradients([(g, table)])
        w, m, v = np_step(w, tf.convert_to_tensor(g).numpy(), m, v, 0.1, 0.0, False, False)
    # Row 0's moment decayed on the second step although row 0 was absent.
    np.testing.assert_allclose(opt.get_slot(table, "adam_m").numpy(), m)
    np.testing.assert_allclose(table.numpy(), w, rtol=1e-6)


# --------------------------------------------------------------------------
# exclusions on variable paths
# --------------------------------------------------------------------------

PATHS = {
    "albert_model/encoder/group_0/inner_group_0/attention/layer_norm/gamma": False,
    "albert_model/embeddings/LayerNorm/beta": False,
    "albert_model/encoder/group_0/inner_group_0/ffn/output/bias": False,
    "albert_pretrainer/mlm/output_bias": False,
    "albert_model/encoder/group_0/inner_group_0/attention/query/kernel": True,
    "albert_model/embeddings/word_embeddings": True,
    "albert_pretrainer/sop/output_weights": True,
}


def test_exclusion_regex_on_paths():
    lamb = make_optimizer("lamb")
    adamw = make_optimizer("adamw")
    for path, included in PATHS.items():
        var = make_variable(path, np.zeros((2,), F32))
        # The table's expectation agrees with a plain re.search of the list.
        expected = all(re.search(p, path) is None for p in ORIGINAL_EXCLUSIONS)
        assert expected is included, path
        assert lamb.use_weight_decay_for(var) is expected, path
        assert lamb.use_layer_adaptation_for(var) is expected, path
        assert adamw.use_weight_decay_for(var) is expected, path
        assert adamw.use_layer_adaptation_for(var) is False


def test_layer_adaptation_exclusions_default_and_override():
    kernel = make_variable("x/dense/kernel", np.zeros((2,), F32))
    bias = make_variable("x/dense/bias", np.zeros((2,), F32))
    default = optimization.LAMB(0.1, weight_decay_rate=0.0, exclude_from_weight_decay=["bias"])
    # Decay is off (rate 0) but adaptation still follows the decay list.
    assert not default.use_weight_decay_for(kernel)
    assert default.use_layer_adaptation_for(kernel)
    assert not default.use_layer_adaptation_for(bias)
    custom = optimization.LAMB(
        0.1,
        weight_decay_rate=0.01,
        exclude_from_weight_decay=["bias"],
        exclude_from_layer_adaptation=["kernel"],
    )
    assert custom.use_weight_decay_for(kernel)
    assert not custom.use_layer_adaptation_for(kernel)
    assert custom.use_layer_adaptation_for(bias)


def test_slot_access_and_config_round_trip():
    var = make_variable("y/dense/kernel", np.ones((2, 2), F32))
    opt = make_optimizer("lamb")
    with pytest.raises(KeyError):
        opt.get_slot(var, "adam_m")
    opt.apply_gradients([(tf.ones((2, 2)), var)])
    m = opt.get_slot(var, "adam_m")
    assert opt.get_slot(var.value, "adam_m") is m  # the tf.Variable works too
    m.assign(np.full((2, 2), 3.0, F32))  # e.g. restored from a checkpoint
    np.testing.assert_array_equal(opt.get_slot(var, "adam_m").numpy(), 3.0)
    assert [v for v, _ in opt.slot_variables()] == [var]
    with pytest.raises(ValueError):
        opt.get_slot(var, "m")

    clone = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(clone, optimization.LAMB)
    assert clone.get_config() == opt.get_config()
    lr = clone.learning_rate  # the schedule at step 0
    assert float(lr) == 0.0
    with pytest.raises(ValueError):
        optimization.LAMB(0.1, weight_decay=0.01)


# --------------------------------------------------------------------------
# learning-rate schedule
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lr0,total,warmup,s0,power",
    [
        (1e-3, 100, 10, 0, 1.0),
        (1.76e-3, 125, 31, 0, 1.0),
        (5e-5, 50, 0, 0, 1.0),  # no warmup branch
        (0.1, 60, 8, 5, 2.0),
        (0.1, 60, 8, 0, 0.5),
    ],
)
def test_schedule_matches_numpy(lr0, total, warmup, s0, power):
    schedule = optimization.WarmupPolynomialDecay(
        lr0, total, warmup, start_warmup_step=s0, power=power
    )
    steps = np.arange(total + 20)
    expected = [np_lr(s, lr0, total, warmup, s0, power) for s in steps]
    for dtype in (tf.int64, tf.int32, tf.float32):
        got = schedule(tf.constant(steps, dtype)).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)
    # Beyond T the rate is exactly 0; with warmup the first rate is 0.
    assert float(schedule(total + 5)) == 0.0
    if warmup and not s0:
        assert float(schedule(0)) == 0.0


def test_schedule_not_rebased_after_warmup():
    schedule = optimization.WarmupPolynomialDecay(1.0, 100, 10)
    # Last warmup step 0.9, then decay measured from step 0: 1 - 10/100.
    np.testing.assert_allclose(float(schedule(9)), 0.9, rtol=1e-6)
    np.testing.assert_allclose(float(schedule(10)), 0.9, rtol=1e-6)
    np.testing.assert_allclose(float(schedule(11)), 0.89, rtol=1e-6)


def test_schedule_before_start_warmup_step():
    clipped = optimization.WarmupPolynomialDecay(1.0, 100, 10, start_warmup_step=20)
    original = optimization.WarmupPolynomialDecay(
        1.0, 100, 10, start_warmup_step=20, clip_negative=False
    )
    steps = tf.range(0, 40, dtype=tf.int64)
    ref_clip = [np_lr(s, 1.0, 100, 10, 20, 1.0, True) for s in range(40)]
    ref_orig = [np_lr(s, 1.0, 100, 10, 20, 1.0, False) for s in range(40)]
    np.testing.assert_allclose(clipped(steps).numpy(), ref_clip, rtol=1e-6)
    np.testing.assert_allclose(original(steps).numpy(), ref_orig, rtol=1e-6)
    assert float(original(0)) == pytest.approx(-2.0)  # the original's bug
    assert float(clipped(0)) == 0.0
    assert float(clipped(25)) == pytest.approx(0.5)


def test_schedule_config_and_validation():
    schedule = optimization.WarmupPolynomialDecay(
        2e-4, 1000, 100, start_warmup_step=3, power=0.5, clip_negative=False
    )
    clone = optimization.WarmupPolynomialDecay.from_config(schedule.get_config())
    assert clone.get_config() == schedule.get_config()
    steps = tf.range(0, 1100, 37)
    np.testing.assert_array_equal(clone(steps).numpy(), schedule(steps).numpy())
    with pytest.raises(ValueError):
        optimization.WarmupPolynomialDecay(1.0, 0, 0)
    with pytest.raises(ValueError):
        optimization.WarmupPolynomialDecay(1.0, 10, -1)


def test_create_optimizer():
    opt = optimization.create_optimizer(5e-5, 1000, 100, optimizer="adamw", poly_power=1.0)
    assert isinstance(opt, optimization.AdamWeightDecay)
    config = opt.get_config()
    assert config["exclude_from_weight_decay"] == ORIGINAL_EXCLUSIONS
    assert config["weight_decay_rate"] == 0.01
    assert (config["beta_1"], config["beta_2"], config["epsilon"]) == (
        0.9,
        0.999,
        1e-6,
    )
    lamb = optimization.create_optimizer(1.76e-3, 125000, 3125, "lamb")
    assert isinstance(lamb, optimization.LAMB)
    with pytest.raises(ValueError):
        optimization.create_optimizer(1e-3, 10, 0, optimizer="sgd")


# --------------------------------------------------------------------------
# gradient clipping
# --------------------------------------------------------------------------


def test_clip_by_global_norm():
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 4)).astype(F32) * 3
    b = rng.normal(size=(5,)).astype(F32) * 3
    norm = np.sqrt(np.sum(a.astype(np.float64) ** 2) + np.sum(b**2.0))
    clipped, got_norm = optimization.clip_by_global_norm(
        [tf.constant(a), None, tf.constant(b)], clip_norm=1.0
    )
    assert clipped[1] is None
    np.testing.assert_allclose(float(got_norm), norm, rtol=1e-6)
    np.testing.assert_allclose(clipped[0].numpy(), a / norm, rtol=1e-5)
    np.testing.assert_allclose(clipped[2].numpy(), b / norm, rtol=1e-5)
    # Below the threshold the gradients are unchanged.
    small, _ = optimization.clip_by_global_norm([tf.constant(a)], norm * 2)
    np.testing.assert_allclose(small[0].numpy(), a, rtol=1e-6)
    none, zero = optimization.clip_by_global_norm([None, None])
    assert none == [None, None] and float(zero) == 0.0


def test_global_norm_clip_scale_is_bit_identical_to_clipping():
    rng = np.random.default_rng(3)
    grads = [tf.constant(rng.normal(size=s).astype(F32) * 3) for s in [(3, 4), (5,), (2, 2)]]
    for clip_norm in (1.0, 100.0):  # clipping active / inactive
        clipped, norm = tf.clip_by_global_norm(grads, clip_norm)
        scale, got_norm = optimization.global_norm_clip_scale(
            [grads[0], None] + grads[1:], clip_norm
        )
        assert float(got_norm) == float(norm)
        for g, c in zip(grads, clipped):
            np.testing.assert_array_equal((g * scale).numpy(), c.numpy())
    scale, norm = optimization.global_norm_clip_scale([None])
    assert (float(scale), float(norm)) == (1.0, 0.0)
    # A non-finite norm makes the scale NaN, as tf.clip_by_global_norm does.
    scale, _ = optimization.global_norm_clip_scale([tf.constant([np.inf, 1.0])])
    assert np.isnan(float(scale))


@pytest.mark.parametrize("kind", ["adamw", "lamb"])
@pytest.mark.parametrize("graph", [False, True])
def test_gradient_scale_equals_applying_clipped_gradients(kind, graph):
    """apply(g, gradient_scale=s) == apply(g * s), bit for bit, eager and in a
    tf.function (where the per-variable updates are chained)."""
    rng = np.random.default_rng(4)
    shapes = [(4, 3), (3,), (6, 2)]
    init = [rng.normal(size=s).astype(F32) for s in shapes]
    steps = [[rng.normal(size=s).astype(F32) * 5 for s in shapes] for _ in range(4)]

    def run(use_scale):
        variables = [keras.Variable(x, name=f"w{i}") for i, x in enumerate(init)]
        opt = optimization.create_optimizer(0.1, 100, 0, kind)

        def step(*grads):
            scale, _ = optimization.global_norm_clip_scale(grads, 1.0)
            if use_scale:
                opt.apply(list(grads), variables, gradient_scale=scale)
            else:
                opt.apply([g * scale for g in grads], variables)

        fn = tf.function(step) if graph else step
        for grads in steps:
            fn(*[tf.constant(g) for g in grads])
        return [v.numpy() for v in variables], [
            opt.get_slot(v, "adam_v").numpy() for v in variables
        ]

    (w1, v1), (w2, v2) = run(True), run(False)
    for a, b in zip(w1 + v1, w2 + v2):
        np.testing.assert_array_equal(a, b)
