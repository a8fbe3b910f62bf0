"""The matrix products of one training step, alone: how fast a step could be on this CPU
if everything but the matmuls cost nothing. A yardstick for bench/backbone.py's systems.

Every system of the benchmark (ours, bert4keras, keras-hub, the RoBERTa-like baseline)
does the same products at a given size: per layer, the four dense projections (q/k/v,
attention output, FFN in, FFN out) forward, their input gradients and their kernel
gradients, and the attention's two batched products forward and four backward. Biases,
norms, softmax, dropout, rotary, the optimizer and the classifier are left out.
`MatmulFloor` runs exactly those products on random inputs of the step's shapes, in one
`tf.function` (TensorFlow schedules independent ones concurrently, as in a real step),
behind a `train_on_batch(x, y)` so that bench/backbone.py times it among the systems.
"""
import math


def step_products(config, batch, seq):
    """[(a_shape, b_shape)] of one step's products, a @ b (batched where 3-D)."""
    hidden, layers = config["hidden_size"], config["num_layers"]
    heads = config["num_heads"]
    inner = config.get("head_size", hidden // heads) * heads
    size = inner // heads
    tokens, maps = batch * seq, batch * heads
    products = []
    for _ in range(layers):
        for fan_in, fan_out in [(hidden, 3 * inner), (inner, hidden),
                                (hidden, config["intermediate_size"]),
                                (config["intermediate_size"], hidden)]:
            products += [((tokens, fan_in), (fan_in, fan_out)),     # forward
                         ((tokens, fan_out), (fan_out, fan_in)),    # input gradient
                         ((fan_in, tokens), (tokens, fan_out))]     # kernel gradient
        scores = ((maps, seq, size), (maps, size, seq))      # q k^T; weights grad: dC v^T
        weighted = ((maps, seq, seq), (maps, seq, size))     # weights v; dq, dk, dv
        products += [scores, weighted, weighted, weighted, scores, weighted]
    return products


def step_flops(config, batch, seq):
    """Floating-point operations of `step_products` (2 per multiply-add)."""
    return sum(2 * math.prod(a) * b[-1] for a, b in step_products(config, batch, seq))


class MatmulFloor:
    """The products of a step of `config` at the batch's shape (taken from the first
    `train_on_batch`), in `dtype` (bfloat16 under mixed_bfloat16, as the systems' matmuls)."""

    def __init__(self, config, dtype="float32"):
        self.config, self.dtype = config, dtype
        self.step = self.shape = None

    def _build(self, batch, seq):
        import tensorflow as tf

        generator = tf.random.Generator.from_seed(0)
        operands = [(tf.cast(generator.normal(a), self.dtype), tf.cast(generator.normal(b), self.dtype))
                    for a, b in step_products(self.config, batch, seq)]

        @tf.function
        def step():
            return [tf.matmul(a, b) for a, b in operands]

        return step

    def train_on_batch(self, x, y):
        batch, seq = x["token_ids"].shape
        if self.shape != (batch, seq):
            self.step, self.shape = self._build(batch, seq), (batch, seq)
        self.step()
        return 0.0
