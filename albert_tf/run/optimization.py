"""Optimizers and learning-rate schedule of the original ALBERT release.

This module reproduces `optimization.py` and `lamb_optimizer.py` of the TF1
release as Keras 3 objects (TensorFlow backend):

* `WarmupPolynomialDecay`: linear warmup replacing a polynomial decay that is
  measured from step 0 (not re-based after warmup), end learning rate 0.
* `AdamWeightDecay`: Adam without bias correction, epsilon outside the square
  root, L2 weight decay added to the update (not to the gradient).
* `LAMB`: the same update, then scaled per variable by the trust ratio
  ||w|| / ||u|| (u already contains the weight-decay term).
* `create_optimizer`: the original's factory (schedule + optimizer + the
  exclusion list `["LayerNorm", "layer_norm", "bias"]`).
* `clip_by_global_norm`: one norm over all gradients (None entries allowed).

Deliberate differences from Keras' own optimizers: no bias correction, Keras'
`weight_decay` (decoupled decay) is rejected, and the learning rate is read
from the schedule with the step count *before* the update (Keras increments
`optimizer.iterations` after `update_step`), so the first update uses lr(0),
which is 0 with warmup, exactly as in the original.

Exclusions are regular expressions searched (`re.search`) in the variable's
Keras path, e.g. "albert_pretrainer/albert/group_0_inner_group_0/
attention_layer_norm/gamma" (every layer norm's path contains "layer_norm",
every bias ends in "bias", so the original's list excludes the same variables
as on its names). They are resolved once, when the optimizer is built.

Gradients equal to None are dropped before the optimizer is built, so, as in
the original, a variable that gets no gradient on the first step receives no
slots and is never updated. Calling `optimizer.build(variables)` explicitly
creates slots for every variable passed (needed e.g. to restore slots before
the first step); such variables still are not updated while their gradient
is None.

Slot API (used by `albert_tf.weights.checkpoints` to read and write optimizer state
under the original checkpoint names `<var_name>/adam_m`, `<var_name>/adam_v`):

* `optimizer.SLOT_NAMES == ("adam_m", "adam_v")`;
* `optimizer.get_slot(variable, "adam_m")` returns the Keras variable holding
  the first moment of model variable `variable` (the same for "adam_v", the
  second moment); `variable` may be the Keras variable or its TF variable;
* `optimizer.has_slots(variable)` tells whether the optimizer was built with
  `variable`;
* `optimizer.slot_variables()` lists `(model_variable, {"adam_m": m,
  "adam_v": v})` for every variable the optimizer was built with, in build
  order.

Distribution: used alone under a `tf.distribute` strategy, Keras' TF
optimizer sums the replicas' gradients inside `apply_gradients`.
`albert_tf.run.training` does not rely on that: it divides each replica's loss by
the number of replicas (times the accumulation steps), sums the gradients
itself, clips the sum by global norm (clipping must see the reduced gradient)
and sets `gradients_are_reduced`, so the optimizer applies them without a
second sum. The step then equals the single-device step on the global batch,
whatever the replica count (the original on TPU clipped per core and summed;
see albert_tf.run.training).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

import keras
import tensorflow as tf

# The original passes this list to both optimizers (`create_optimizer`).
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")

_PACKAGE = "albert_tf"


def _variable_name(variable) -> str:
    """Returns the name the exclusion patterns are matched against.

    Keras 3 variables expose `path` ("layer/sublayer/kernel"); plain TF
    variables only have `name`, from which the ":0" suffix is stripped as the
    original did.
    """
    path = getattr(variable, "path", None)
    if path:
        return path
    return re.sub(r":\d+$", "", variable.name)


def _tf_variable(variable):
    """The tf.Variable behind a Keras variable (itself if already one)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def _matches_any(name: str, patterns: Sequence[str] | None) -> bool:
    return any(re.search(p, name) is not None for p in (patterns or ()))


@keras.saving.register_keras_serializable(package=_PACKAGE)
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup over a polynomial decay, as in the original.

    With s the step before the update (0 for the first update), lr0 =
    `init_lr`, T = `num_train_steps`, W = `num_warmup_steps`, s0 =
    `start_warmup_step` and p = `power`:

    * decay(s) = lr0 * (1 - min(s, T) / T) ** p   (end learning rate 0);
    * if W > 0 and s - s0 < W: lr(s) = lr0 * (s - s0) / W;
    * otherwise lr(s) = decay(s).

    The decay is not re-based after warmup (it is measured from step 0), and
    the first update uses lr = 0 when W > 0; both are kept. For s < s0 the
    original's warmup value is negative (the weights move uphill);
    `clip_negative=True` (default) clamps it at 0, `clip_negative=False`
    reproduces the original. All arithmetic is float32, as in the original.

    Mirrors `create_optimizer` of the original optimization.py
    (`tf.train.polynomial_decay` plus the warmup blend).

    Args:
      init_lr: float. Peak learning rate lr0.
      num_train_steps: int. T, steps after which the rate is 0 (> 0).
      num_warmup_steps: int. W; 0 disables the warmup branch.
      start_warmup_step: int. s0, the step at which warmup starts.
      power: float. p, the polynomial power (`poly_power` flag).
      clip_negative: bool. Clamp the warmup value at 0 (the fix for s < s0).
      name: str. Name scope of the ops.
    """

    def __init__(
        self,
        init_lr,
        num_train_steps,
        num_warmup_steps,
        start_warmup_step=0,
        power=1.0,
        clip_negative=True,
        name=None,
    ):
        super().__init__()
        if int(num_train_steps) <= 0:
            # The original divides by T: T = 0 gives a NaN learning rate.
            raise ValueError(
                f"`num_train_steps` must be positive. Received: num_train_steps={num_train_steps}"
            )
        if int(num_warmup_steps) < 0:
            raise ValueError(
                f"`num_warmup_steps` must be >= 0. Received: num_warmup_steps={num_warmup_steps}"
            )
        self.init_lr = float(init_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.start_warmup_step = int(start_warmup_step)
        self.power = float(power)
        self.clip_negative = bool(clip_negative)
        self.name = name

    def __call__(self, step):
        with tf.name_scope(self.name or "WarmupPolynomialDecay"):
            step = tf.convert_to_tensor(step)
            lr0 = tf.constant(self.init_lr, tf.float32)
            # tf.train.polynomial_decay: cast to float32, clamp at T.
            step_f = tf.cast(step, tf.float32)
            total = tf.constant(float(self.num_train_steps), tf.float32)
            frac = tf.minimum(step_f, total) / total
            lr = lr0 * tf.pow(1.0 - frac, self.power)
            if self.num_warmup_steps > 0:
                # The original subtracts in integers, then casts to float.
                done = tf.cast(step, tf.int64) - self.start_warmup_step
                warmup_lr = lr0 * (tf.cast(done, tf.float32) / float(self.num_warmup_steps))
                if self.clip_negative:
                    warmup_lr = tf.maximum(warmup_lr, 0.0)
                lr = tf.where(done < self.num_warmup_steps, warmup_lr, lr)
            return lr

    def get_config(self):
        return {
            "init_lr": self.init_lr,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "start_warmup_step": self.start_warmup_step,
            "power": self.power,
            "clip_negative": self.clip_negative,
            "name": self.name,
        }


class _AdamCore(keras.optimizers.Optimizer):
    """Shared state and update of `AdamWeightDecay` and `LAMB`."""

    SLOT_NAMES = ("adam_m", "adam_v")
    _use_layer_adaptation = False
    # `apply(..., gradient_scale=)` is supported (albert_tf.run.training uses it).
    accepts_gradient_scale = True

    def __init__(
        self,
        learning_rate,
        weight_decay_rate=0.0,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
        **kwargs,
    ):
        if kwargs.get("weight_decay") is not None:
            # Keras' decoupled decay would be applied on top of ours.
            raise ValueError(
                "Use `weight_decay_rate` (the original's L2 term in the "
                "update), not Keras' `weight_decay`. Received: "
                f"weight_decay={kwargs['weight_decay']}"
            )
        kwargs.pop("weight_decay", None)
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        # Stored under private names: Keras' base class has a method called
        # `exclude_from_weight_decay` that an attribute would shadow.
        self._decay_exclusions = (
            list(exclude_from_weight_decay) if exclude_from_weight_decay else None
        )
        self._layer_adaptation_arg = (
            list(exclude_from_layer_adaptation) if exclude_from_layer_adaptation else None
        )
        # As in the original LAMB: a falsy (None or empty) list falls back to
        # the weight-decay exclusions.
        self._adaptation_exclusions = self._layer_adaptation_arg or self._decay_exclusions
        # Set for the duration of one `apply` (see there).
        self._gradient_scale = None
        self._apply_if = None
        self._previous_update = {}

    # --- exclusion rules (original `_do_use_weight_decay` and
    # `_do_layer_adaptation`), on the variable's path --------------------

    def use_weight_decay_for(self, variable) -> bool:
        """Whether the λ·w term is added for `variable` (by its path)."""
        if not self.weight_decay_rate:
            return False
        return not _matches_any(_variable_name(variable), self._decay_exclusions)

    def use_layer_adaptation_for(self, variable) -> bool:
        """Whether LAMB's trust ratio applies to `variable` (by its path)."""
        if not self._use_layer_adaptation:
            return False
        return not _matches_any(_variable_name(variable), self._adaptation_exclusions)

    # --- Keras optimizer protocol --------------------------------------

    def apply(self, grads, trainable_variables=None, gradient_scale=None, apply_if=None):
        """Applies one update; `gradient_scale` (a scalar, e.g. the factor of
        `global_norm_clip_scale`) multiplies each gradient inside its own
        update, so clipping needs no clipped copy of every gradient. With `apply_if` (a
        bool []) False, every variable and slot keeps its value (a float16 step whose
        gradients overflowed, albert_tf/run/loss_scale.py); the step still counts.

        In graph mode the per-variable updates run one after another (control
        dependencies), so only one variable's temporaries are alive at a time
        (ALBERT-xxlarge: 0.3 GB instead of ~2 GB when all run at once).
        """
        # Drop None gradients *before* Keras builds the optimizer, so that a
        # variable without gradient gets no slots (as in the original) and is
        # not checked against the built variable list on later steps.
        if trainable_variables is not None:
            pairs = [(g, v) for g, v in zip(grads, trainable_variables) if g is not None]
            if pairs:
                grads = [g for g, _ in pairs]
                trainable_variables = [v for _, v in pairs]
        self._gradient_scale = gradient_scale
        self._apply_if = apply_if
        self._previous_update = {}  # device -> ops the next update waits for
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._gradient_scale = None
            self._apply_if = None
            self._previous_update = {}

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adam_m, self._adam_v = self.add_optimizer_variables(var_list, list(self.SLOT_NAMES))
        # Resolved once from the Keras paths: inside `update_step` the
        # TF backend passes the underlying tf.Variable, which has no path.
        self._decay_flags = [self.use_weight_decay_for(v) for v in var_list]
        self._adaptation_flags = [self.use_layer_adaptation_for(v) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m_var, v_var = self._adam_m[index], self._adam_v[index]
        dtype = variable.dtype
        if isinstance(gradient, tf.IndexedSlices):
            # The original densified sparse (embedding) gradients, so every
            # row's moments decay each step; a scatter update would not.
            gradient = tf.convert_to_tensor(gradient)
        previous = self._previous_update
        with tf.control_dependencies(previous.get(variable.device, [])):
            grad = tf.identity(tf.cast(gradient, dtype))
            param = tf.convert_to_tensor(variable)
            m = tf.convert_to_tensor(m_var)
            v = tf.convert_to_tensor(v_var)
        if self._gradient_scale is not None:
            # The product tf.clip_by_global_norm would have made, bit for bit.
            grad = grad * tf.cast(self._gradient_scale, dtype)
        lr = tf.cast(learning_rate, dtype)

        # Same operation order as the original, for float32 fidelity.
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        update = next_m / (tf.sqrt(next_v) + self.epsilon)
        if self._decay_flags[index]:
            update += self.weight_decay_rate * param

        if self._adaptation_flags[index]:
            w_norm = tf.norm(param, ord=2)
            u_norm = tf.norm(update, ord=2)
            ratio = tf.where(
                w_norm > 0.0,
                tf.where(u_norm > 0.0, w_norm / u_norm, 1.0),
                1.0,
            )
            update_with_lr = ratio * lr * update
        else:
            update_with_lr = lr * update

        new_param = param - update_with_lr
        if self._apply_if is not None:
            # A select, not a cond: no branch to leave the replica context for.
            new_param = tf.where(self._apply_if, new_param, param)
            next_m = tf.where(self._apply_if, next_m, m)
            next_v = tf.where(self._apply_if, next_v, v)
        if isinstance(variable, tf.Variable) and not tf.executing_eagerly():
            ops = [
                variable.assign(new_param, read_value=False),
                _tf_variable(m_var).assign(next_m, read_value=False),
                _tf_variable(v_var).assign(next_v, read_value=False),
            ]
            previous[variable.device] = ops
            return
        self.assign(variable, new_param)
        self.assign(m_var, next_m)
        self.assign(v_var, next_v)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "weight_decay_rate": self.weight_decay_rate,
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "exclude_from_weight_decay": self._decay_exclusions,
                "exclude_from_layer_adaptation": self._layer_adaptation_arg,
            }
        )
        return config

    # --- distribution ---------------------------------------------------

    # Set by albert_tf.run.training, which all-reduces and clips the gradients
    # itself (global-norm clipping must see the reduced gradient); Keras must
    # then not sum them across replicas a second time.
    gradients_are_reduced = False

    def _all_reduce_sum_gradients(self, grads_and_vars):
        if self.gradients_are_reduced:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)

    # --- slots under the original names --------------------------------

    def has_slots(self, variable) -> bool:
        """Whether the optimizer holds `adam_m`/`adam_v` for `variable`."""
        if not self.built:
            return False
        return self._var_key(variable) in self._trainable_variables_indices

    def get_slot(self, variable, slot_name):
        """Returns the slot `slot_name` ("adam_m" or "adam_v") of `variable`.

        Args:
          variable: a model variable the optimizer was built with (the Keras
            variable or its underlying tf.Variable).
          slot_name: str. "adam_m" (first moment) or "adam_v" (second moment),
            the suffixes of the original checkpoint names.

        Returns:
          The Keras variable holding the slot (assignable).
        """
        if slot_name not in self.SLOT_NAMES:
            raise ValueError(f"Unknown slot {slot_name!r}; expected one of {self.SLOT_NAMES}.")
        if not self.has_slots(variable):
            raise KeyError(
                f"The optimizer has no slots for variable "
                f"{_variable_name(variable)!r} (not built with it, or it "
                "received no gradient before the optimizer was built)."
            )
        index = self._get_variable_index(variable)
        slots = self._adam_m if slot_name == "adam_m" else self._adam_v
        return slots[index]

    def slot_variables(self):
        """Lists `(model_variable, {"adam_m": m, "adam_v": v})` pairs."""
        if not self.built:
            return []
        return [
            (var, {"adam_m": m, "adam_v": v})
            for var, m, v in zip(self._trainable_variables, self._adam_m, self._adam_v)
            if m is not None
        ]


@keras.saving.register_keras_serializable(package=_PACKAGE)
class AdamWeightDecay(_AdamCore):
    """Adam with L2 weight decay in the update, no bias correction.

    Per variable w with gradient g (mirrors `AdamWeightDecayOptimizer` of the
    original optimization.py):

        m <- b1 * m + (1 - b1) * g
        v <- b2 * v + (1 - b2) * g**2
        u  = m / (sqrt(v) + eps)
        u <- u + rate * w        unless excluded (or rate == 0)
        w <- w - lr * u

    Args:
      learning_rate: float, `LearningRateSchedule` or callable.
      weight_decay_rate: float. The λ of the L2 term (0.01 in
        `create_optimizer`).
      beta_1: float. First-moment decay.
      beta_2: float. Second-moment decay.
      epsilon: float. Added to sqrt(v), outside the square root.
      exclude_from_weight_decay: list of str. Regexes searched in the
        variable path; a match disables the λ·w term.
      exclude_from_layer_adaptation: list of str. Accepted for a signature
        shared with `LAMB`; AdamW has no layer adaptation, so it is unused.
      **kwargs: Keras optimizer arguments (`name`, ...). Keras'
        `weight_decay` is rejected.
    """


@keras.saving.register_keras_serializable(package=_PACKAGE)
class LAMB(_AdamCore):
    """LAMB as in the original lamb_optimizer.py (`LAMBOptimizer`).

    The AdamW update u of `AdamWeightDecay` (no bias correction, λ·w already
    added), then a per-variable trust ratio:

        r = ||w|| / ||u||   if ||w|| > 0 and ||u|| > 0, else 1
        w <- w - r * lr * u

    with Frobenius norms over the whole tensor. Variables whose path matches
    a pattern of `exclude_from_layer_adaptation` use r = 1; when that list is
    None (or empty) it defaults to `exclude_from_weight_decay`, as in the
    original. Layer adaptation does not depend on `weight_decay_rate`.

    Args:
      learning_rate: float, `LearningRateSchedule` or callable.
      weight_decay_rate: float. The λ of the L2 term.
      beta_1: float. First-moment decay.
      beta_2: float. Second-moment decay.
      epsilon: float. Added to sqrt(v), outside the square root.
      exclude_from_weight_decay: list of str. Regexes; a match disables λ·w.
      exclude_from_layer_adaptation: list of str. Regexes; a match disables
        the trust ratio. Defaults to `exclude_from_weight_decay`.
      **kwargs: Keras optimizer arguments (`name`, ...). Keras'
        `weight_decay` is rejected.
    """

    _use_layer_adaptation = True


def create_optimizer(
    init_lr,
    num_train_steps,
    num_warmup_steps,
    optimizer="adamw",
    poly_power=1.0,
    start_warmup_step=0,
    weight_decay_rate=0.01,
    clip_negative=True,
):
    """Builds the original's schedule and optimizer (`create_optimizer`).

    Args:
      init_lr: float. Peak learning rate.
      num_train_steps: int. Steps of the polynomial decay to 0.
      num_warmup_steps: int. Linear warmup steps (0: none).
      optimizer: str. "adamw" or "lamb".
      poly_power: float. Power of the polynomial decay.
      start_warmup_step: int. Step at which warmup starts.
      weight_decay_rate: float. λ (hard-coded 0.01 in the original).
      clip_negative: bool. See `WarmupPolynomialDecay`; False reproduces the
        original's negative rate before `start_warmup_step`.

    Returns:
      An `AdamWeightDecay` or `LAMB` with a `WarmupPolynomialDecay` schedule,
      beta_1 0.9, beta_2 0.999, epsilon 1e-6 and exclusions
      ["LayerNorm", "layer_norm", "bias"].
    """
    schedule = WarmupPolynomialDecay(
        init_lr,
        num_train_steps,
        num_warmup_steps,
        start_warmup_step=start_warmup_step,
        power=poly_power,
        clip_negative=clip_negative,
    )
    classes = {"adamw": AdamWeightDecay, "lamb": LAMB}
    if optimizer not in classes:
        raise ValueError(f"Unsupported optimizer: {optimizer!r}; expected 'adamw' or 'lamb'.")
    return classes[optimizer](
        learning_rate=schedule,
        weight_decay_rate=weight_decay_rate,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        exclude_from_weight_decay=list(DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
    )


def clip_by_global_norm(grads: Iterable, clip_norm=1.0):
    """Clips gradients jointly by their global norm, like the original.

    One norm is computed over all tensors (not per variable); None entries
    are passed through untouched. This is `tf.clip_by_global_norm`, the op
    the original used, so the numerics are identical.

    Args:
      grads: list of tensors, `tf.IndexedSlices` or None.
      clip_norm: float. Maximum global norm (1.0 in the original).

    Returns:
      `(clipped_grads, global_norm)`: a list in the order of `grads` and the
      norm before clipping (0 when every gradient is None).
    """
    grads = list(grads)
    if all(g is None for g in grads):
        return grads, tf.constant(0.0, tf.float32)
    return tf.clip_by_global_norm(grads, clip_norm)


def global_norm_clip_scale(grads: Iterable, clip_norm=1.0):
    """The factor `clip_by_global_norm` multiplies every gradient by.

    `g * scale` equals the clipped gradient bit for bit (same formula as
    `tf.clip_by_global_norm`: NaN when the norm is not finite), so an
    optimizer can apply the scale inside each variable's update instead of
    materialising a clipped copy of all gradients.

    Returns:
      `(scale, global_norm)`, float32 scalars; (1, 0) when every gradient is None.
    """
    present = [tf.convert_to_tensor(g) for g in grads if g is not None]
    if not present:
        return tf.constant(1.0, tf.float32), tf.constant(0.0, tf.float32)
    norm = tf.linalg.global_norm(present)
    return clip_scale(norm, clip_norm), norm


def clip_scale(norm, clip_norm=1.0):
    """The factor `tf.clip_by_global_norm` multiplies every gradient by when their
    global norm is `norm` (a float32 []): min(1, clip_norm / norm), NaN when `norm`
    is not finite, in its operation order."""
    clip = tf.cast(clip_norm, norm.dtype)
    scale = clip * tf.minimum(1.0 / norm, tf.constant(1.0, norm.dtype) / clip)
    return scale + (norm - norm)
