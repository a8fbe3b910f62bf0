"""Optimizers from Keras: LAMB (what Su used) and AdamW, with warm-up then linear decay."""
import keras


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
        optimizer = keras.optimizers.AdamW(schedule, weight_decay=weight_decay, **config)
    elif name == "lamb":
        optimizer = keras.optimizers.Lamb(schedule, **config)
    elif name == "adam":
        optimizer = keras.optimizers.Adam(schedule, **config)
    elif name == "sgd":
        optimizer = keras.optimizers.SGD(schedule, **config)
    else:
        raise ValueError(f"optimizer.name {name!r}: choose adamw, lamb, adam or sgd")
    return optimizer
