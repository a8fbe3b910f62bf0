"""The backend's half of one mixed update: per-task gradients of a micro-batch, their
norms, accumulation and the optimizer's apply. Everything else of the update
(model.MultiTaskModel: tasks, trace groups, balancing hooks, micro-batch order,
logs) is written once for every backend.

Keras's backend is chosen by `KERAS_BACKEND` before Keras is imported (TensorFlow by
default); `Step` is that backend's class, a base of MultiTaskModel:

    tensorflow  step/tensorflow.py: one tf.function per trace group, tf.distribute
                strategies, sparse embedding gradients, micro-steps side by side in threads
    jax         step/jax.py: one jax.jit per trace group and batch shape, pure functions of
                the variables' values (Keras's stateless_call / optimizer.stateless_apply),
                keras.distribution.DataParallel over local devices; TensorFlow not imported

What a Step provides is the abstract class step/backend.py's BackendStep: both backends'
classes derive from it, so one that leaves a method out cannot be instantiated. Each
backend also gives `encoding_forward(sentence_encoder)`, how `mtl encode` runs the model
(embedding/encode.py).
"""
import keras

BACKEND = keras.backend.backend()


class WeightsScope(keras.StatelessScope):
    """Variables read as the given values inside, as in Layer.stateless_call, except that a
    value's static shape may be relaxed: one traced micro-step serves heads of every label
    count, so its head weights come as e.g. [H, None] (StatelessScope demands equal shapes)."""

    def __init__(self, mapping):
        super().__init__()
        self.state_mapping = {id(variable): value for variable, value in mapping}


def structure(batch):
    """What a traced step's signature depends on: the batch's keys, dtypes and ranks."""
    return tuple(sorted((k, keras.backend.standardize_dtype(v.dtype), len(v.shape))
                        for k, v in batch.items()))


if BACKEND == "tensorflow":
    from mtl_framework.step.tensorflow import TensorFlowStep as Step
    from mtl_framework.step.tensorflow import encoding_forward
elif BACKEND == "jax":
    from mtl_framework.step.jax import JaxStep as Step
    from mtl_framework.step.jax import encoding_forward
else:
    raise ImportError(f"KERAS_BACKEND={BACKEND!r}: mtl_framework trains on tensorflow (the "
                      "default) or jax; set KERAS_BACKEND to one of them")

__all__ = ["BACKEND", "Step", "WeightsScope", "encoding_forward", "structure"]
