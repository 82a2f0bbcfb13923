"""Dynamic loss scaling for `--dtype=mixed_float16`.

float16 holds magnitudes from about 6e-8 to 65504. The backward pass of a float16
model produces many gradients below that range, which would round to zero; so the loss
is multiplied by a large power of two before it is differentiated, and the gradients
(float32, like the variables) are divided by it again before anything reads them. When
the scaled backward pass overflows, some gradient is infinite or NaN: the step is skipped
(weights and optimizer slots left as they were) and the scale halved. After
`growth_steps` finite steps in a row the scale doubles again. The initial scale, the
factor and the growth interval are Keras's (`keras.optimizers.LossScaleOptimizer`).

Why not that class itself: it unscales the gradients inside the optimizer's `apply`,
but our Trainer clips the global batch's gradient by its global norm before `apply`,
and that norm (and the original's off-TPU row norm, albert_tf/run/training.py) must be
taken of the unscaled gradients. It also skips a step with a `cond` around the whole
update, which must first leave the replica context; our optimizers instead keep each
variable's old values with a select inside its own update (`apply(..., apply_if=)` in
albert_tf/run/optimization.py), which works unchanged under every strategy and XLA. The
scale's two variables are saved in train_state/ beside the input position
(albert_tf/run/output_folder.py), so a resumed run continues with the same scale.

A skipped step still counts as a step: the step counter, the learning-rate schedule
and the input move on, as the original's training op adds one to `global_step` outside
the optimizer. Overflows happen while the first steps search for the scale and about
once per `growth_steps` afterwards, so a run loses a handful of updates, and its
checkpoints stay at the steps of its schedule.
"""

from __future__ import annotations

import tensorflow as tf

INITIAL_SCALE = 2.0**15
GROWTH_STEPS = 2000
FACTOR = 2.0
# Gradients that overflow even unscaled: the run diverged (nothing left to lower).
SMALLEST_SCALE = 1.0


class DynamicLossScale(tf.Module):
    """The scale and the count of finite steps since it last changed.

    Created under the strategy's scope; `update` is called in replica context with the
    same `finite` on every replica (it is decided on the all-reduced gradients).
    """

    def __init__(self, initial_scale=INITIAL_SCALE, growth_steps=GROWTH_STEPS):
        super().__init__(name="loss_scale")
        self.growth_steps = int(growth_steps)
        # The same value on every replica, set by each of them identically.
        same_everywhere = dict(
            trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
        )
        self.scale = tf.Variable(
            float(initial_scale), dtype=tf.float32, name="scale", **same_everywhere
        )
        self.good_steps = tf.Variable(0, dtype=tf.int64, name="good_steps", **same_everywhere)

    def update(self, finite):
        """After a step: halve the scale if its gradients were not `finite` (a bool []),
        else count the step and double the scale every `growth_steps` such steps."""
        grow = tf.logical_and(finite, self.good_steps + 1 >= self.growth_steps)
        scale = tf.convert_to_tensor(self.scale)
        new_scale = tf.where(finite, tf.where(grow, scale * FACTOR, scale), scale / FACTOR)
        new_good = tf.where(grow | ~finite, tf.constant(0, tf.int64), self.good_steps + 1)
        self.scale.assign(new_scale)
        self.good_steps.assign(new_good)


__all__ = ["DynamicLossScale", "INITIAL_SCALE", "GROWTH_STEPS", "SMALLEST_SCALE"]
