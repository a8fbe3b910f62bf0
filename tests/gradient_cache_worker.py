"""The cached-gradient (GradCache) contrastive step against the plain one, on whichever
backend KERAS_BACKEND names: tests/test_contrastive.py calls `differences` in process on
TensorFlow and runs this file with .venv-jax's python for JAX (it prints the JSON)."""
import json
import sys

import numpy as np

ROWS, TEXTS, LENGTH, HIDDEN = 5, 3, 9, 16  # query, positive, one hard negative


def contrastive_batch():
    """Random texts of 4-9 tokens; row 2's hard negative is padding (text_mask 0)."""
    rng = np.random.default_rng(3)
    token_ids = np.zeros((ROWS, TEXTS, LENGTH), np.int32)
    for row in range(ROWS):
        for text in range(TEXTS):
            length = int(rng.integers(4, LENGTH + 1))
            token_ids[row, text, :length] = rng.integers(5, 60, length)
    text_mask = np.ones((ROWS, TEXTS), np.float32)
    token_ids[2, 2] = 0
    text_mask[2, 2] = 0
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids), "text_mask": text_mask,
            "score": np.full(ROWS, np.nan, np.float32), "positive_id": np.arange(ROWS, dtype=np.int32)}


def whole_gradient(model, batch, chunk):
    """The gradient of the loss on every text's vectors, each chunk of `chunk` texts run with
    the dropout seeds the cached step gives it in micro-batch 0, under one tape (memory
    for every text's activations: what the cached step avoids)."""
    import keras
    from keras import ops

    from mtl_framework.families.heads import backbone_inputs

    tensors = {k: ops.convert_to_tensor(v) for k, v in batch.items()}
    head, rows = model.heads["pairs"], backbone_inputs(tensors)
    starts = range(0, ROWS * TEXTS, chunk)

    def seeds_of(c):
        return [(s, ops.convert_to_tensor(s.value) + ops.cast(ops.convert_to_tensor([c, 0]), s.dtype))
                for s in model._seed_states]

    def loss_of(values):
        vectors = ops.concatenate([model._text_vectors(
            head, {k: v[start:start + chunk] for k, v in rows.items()}, seeds_of(c), values)
            for c, start in enumerate(starts)], axis=0)
        return head.compute_task_loss(ops.reshape(vectors, (ROWS, TEXTS, -1)), tensors)

    variables = model.backbone_variables
    if keras.backend.backend() == "jax":
        import jax
        fixed = model._fixed_backbone_variables()
        gradients = jax.grad(lambda trainable: loss_of(
            list(zip(variables, trainable)) + [(v, v.value) for v in fixed]))([v.value for v in variables])
    else:
        import tensorflow as tf
        with tf.GradientTape() as tape:
            loss = loss_of(None)
        gradients = [tf.convert_to_tensor(g) for g in tape.gradient(loss, variables)]
    return [np.asarray(keras.ops.convert_to_numpy(g)) for g in gradients]


def update(cached_chunk, dropout, loss="infonce", whole=False):
    """The backbone's change after one SGD(1) update of one contrastive micro-batch (minus
    its gradient, no normalisation), and the logged loss; `whole`: minus whole_gradient
    in its place (the update not run)."""
    import keras

    from mtl_framework import RoFormerV2Backbone
    from mtl_framework.families.heads import build_head
    from mtl_framework.step.model import MultiTaskModel

    keras.utils.set_random_seed(0)
    backbone = RoFormerV2Backbone(vocab_size=64, num_layers=2, hidden_size=HIDDEN, num_heads=2,
                                  intermediate_size=32, dropout=dropout)
    backbone.build()
    head = build_head("contrastive", None, HIDDEN, name="pairs", loss=loss, cached_chunk=cached_chunk)
    model = MultiTaskModel(backbone, {"pairs": head}, tasks_per_update=1,
                           balancing={"normalize": "none", "weights": "fixed"}, seed=7)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0))
    model.build_all()
    before = [np.array(keras.ops.convert_to_numpy(v)) for v in model.backbone_variables]
    batch = contrastive_batch()
    if loss == "cosent":
        batch["score"] = np.array([0.0, 1.0, 3.0, 2.0, 5.0], np.float32)
    if whole:
        return [-g for g in whole_gradient(model, batch, cached_chunk)], float("nan")
    logs = model.run_update([("pairs", batch)])
    after = [np.array(keras.ops.convert_to_numpy(v)) for v in model.backbone_variables]
    model.close()
    return [a - b for a, b in zip(after, before)], float(logs[0]["loss"])


def differences(cases):
    """{case: (max |cached update - plain update|, max |plain update|, cached loss - plain loss)}
    for cases "chunk/dropout/loss"; with dropout the reference is the whole-tape gradient
    of the same chunked forward (the plain step draws other masks)."""
    out, plain = {}, {}
    for case in cases:
        chunk, dropout, loss = case.split("/")
        key = (float(dropout), loss)
        if float(dropout):
            key = key + (int(chunk),)
        if key not in plain:
            plain[key] = update(int(chunk), float(dropout), loss, whole=True) if len(key) > 2 \
                else update(0, float(dropout), loss)
        reference, reference_loss = plain[key]
        cached, cached_loss = update(int(chunk), float(dropout), loss)
        out[case] = (max(float(np.abs(c - r).max()) for c, r in zip(cached, reference)),
                     max(float(np.abs(r).max()) for r in reference),
                     0.0 if np.isnan(reference_loss) else cached_loss - reference_loss)
    return out


if __name__ == "__main__":
    print(json.dumps(differences(sys.argv[1:])))
