"""Optimizers from Keras: LAMB (what Su used) and AdamW, with warm-up then linear decay."""
import keras

if keras.backend.backend() == "tensorflow":  # AdamW's fused kernel; JAX takes Keras's own path
    import tensorflow as tf


@keras.saving.register_keras_serializable(package="mtl_framework")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """0 -> lr over `warmup_steps`, then linearly to lr * final_fraction at `total_steps`
    (bert4keras's piecewise_linear {0: 0, warmup: 1, total: final})."""

    def __init__(self, learning_rate, warmup_steps, total_steps, final_fraction=0.0):
        self.learning_rate = float(learning_rate)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.final_fraction = float(final_fraction)

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = max(self.warmup_steps, 1)
        rising = step / warmup
        decay_span = max(self.total_steps - self.warmup_steps, 1)
        progress = keras.ops.clip((step - self.warmup_steps) / decay_span, 0.0, 1.0)
        falling = 1.0 - (1.0 - self.final_fraction) * progress
        factor = keras.ops.where(step < self.warmup_steps, rising, falling)
        return self.learning_rate * factor

    def get_config(self):
        return dict(learning_rate=self.learning_rate, warmup_steps=self.warmup_steps,
                    total_steps=self.total_steps, final_fraction=self.final_fraction)


@keras.saving.register_keras_serializable(package="mtl_framework")
class AdamW(keras.optimizers.AdamW):
    """Keras's AdamW (same variables, same formulas) with each variable's step run as
    TensorFlow's fused Adam kernel, and the decay factor lr * weight_decay computed once.

    Why: Keras builds ~36 graph ops per variable (the learning-rate schedule is
    re-evaluated for every variable's weight decay), and every task head adds variables,
    so the traced update grew by ~2.9 MiB per task (bench/mtl_overhead.py); here a
    variable costs a handful of ops. ResourceApplyAdam computes exactly Keras's step:
    m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2); var -= m lr sqrt(1 - b2^t) / (1 - b1^t)
    / (sqrt(v) + eps). AMSGrad and sparse gradients take Keras's own path, and so does
    every step on JAX (inside its jitted update the ops fuse anyway).
    """

    def _apply_weight_decay(self, variables):
        if keras.backend.backend() != "tensorflow":
            return super()._apply_weight_decay(variables)
        if self.weight_decay is None:
            return
        decay = self.learning_rate * self.weight_decay

        def apply(distribution, variables):
            def decay_fn(variable):
                if self._use_weight_decay(variable):
                    variable.assign_sub(variable * tf.cast(decay, variable.dtype))

            for variable in variables:
                if isinstance(variable, keras.Variable):
                    variable = variable.value
                distribution.extended.update(variable, decay_fn, group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(apply, self._distribution_strategy, variables)

    def apply(self, grads, trainable_variables=None):
        self._step_scalars = {}  # per dtype, made once per update (see _scalars)
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._step_scalars = {}

    def _scalars(self, dtype, learning_rate):
        """The kernel's scalar inputs, built once per update rather than once per variable."""
        if dtype not in self._step_scalars:
            step = tf.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
            self._step_scalars[dtype] = dict(
                beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step),
                lr=tf.cast(learning_rate, dtype), beta1=beta_1, beta2=beta_2,
                epsilon=tf.cast(self.epsilon, dtype))
        return self._step_scalars[dtype]

    def update_step(self, gradient, variable, learning_rate):
        if keras.backend.backend() != "tensorflow" or self.amsgrad or \
                isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        return tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle, grad=tf.cast(gradient, variable.dtype),
            **self._scalars(variable.dtype, learning_rate))


def build_optimizer(config, total_steps):
    """From the experiment's `optimizer:` mapping: name (adamw|lamb|adam|sgd), lr,
    warmup_steps, final_lr_fraction, weight_decay, clipnorm."""
    config = dict(config or {})
    name = config.pop("name", "adamw")
    lr = float(config.pop("lr", 1e-3))
    warmup = int(config.pop("warmup_steps", 0))
    final = float(config.pop("final_lr_fraction", 0.0))
    schedule = WarmupLinearDecay(lr, warmup, total_steps, final) if (warmup or final < 1) else lr
    weight_decay = config.pop("weight_decay", 0.01)
    if name == "adamw":
        optimizer = AdamW(schedule, weight_decay=weight_decay, **config)
    elif name == "lamb":
        optimizer = keras.optimizers.Lamb(schedule, **config)
    elif name == "adam":
        optimizer = keras.optimizers.Adam(schedule, **config)
    elif name == "sgd":
        optimizer = keras.optimizers.SGD(schedule, **config)
    else:
        raise ValueError(f"optimizer.name {name!r}: choose adamw, lamb, adam or sgd")
    return optimizer
