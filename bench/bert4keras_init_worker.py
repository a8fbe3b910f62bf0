"""Trains bert4keras 0.11.5 `roformer_v2` from scratch on prepared batches (legacy tf-keras).

The bert4keras side of bench/init_vs_bert4keras.py: the same batches, model size,
optimizer, learning-rate schedule and loss as our side, with bert4keras's own model,
initializer and layers. Needs TF_KERAS=1 and TF_USE_LEGACY_KERAS=1 before
TensorFlow is imported (init_vs_bert4keras.py starts it that way).

    python -m bench.bert4keras_init_worker REQUEST.json OUT.json

REQUEST: {"config": bert_config.json, "task": "classification"|"ner", "labels": n,
"train": train batches .npz, "dev": dev batches .npz, "seed", "lr", "warmup", "steps",
"head_size"}. OUT: {"losses": [...], "predictions": ...}: per dev row the argmax
class (classification) or the (type, start, end, score) candidates scoring > 0
(ner; the caller decodes them with the same rule as our head).
"""
import json
import os
import sys
import time

import numpy as np


def batches(path, prefix):
    data = np.load(path)
    count = int(data[f"{prefix}_count"])
    keys = sorted({k.split("/", 1)[1] for k in data.files if k.startswith(f"{prefix}_0/")})
    return [{k: data[f"{prefix}_{i}/{k}"] for k in keys} for i in range(count)]


def learning_rate(step, peak, warmup, total):
    """Linear warm-up to `peak` over `warmup` updates, then linear decay to 0 (both sides)."""
    return peak * min((step + 1) / warmup, (total - step) / max(total - warmup, 1))


def main(request_path, out_path):
    if os.environ.get("TF_KERAS") != "1" or os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise SystemExit("run with TF_KERAS=1 TF_USE_LEGACY_KERAS=1 (bert4keras needs legacy tf-keras)")
    with open(request_path) as f:
        request = json.load(f)
    import tensorflow as tf
    from bert4keras.backend import keras, sparse_multilabel_categorical_crossentropy
    from bert4keras.layers import EfficientGlobalPointer
    from bert4keras.models import build_transformer_model

    tf.random.set_seed(request["seed"])
    np.random.seed(request["seed"])
    bert = build_transformer_model(request["config"], model="roformer_v2",
                                   return_keras_model=False)
    encoder = bert.model
    if request["task"] == "classification":
        cls = keras.layers.Lambda(lambda x: x[:, 0])(encoder.output)
        output = keras.layers.Dense(request["labels"], kernel_initializer=bert.initializer)(cls)
    else:  # as bert4keras's CLUENER example, with the model's initializer
        output = EfficientGlobalPointer(request["labels"], request["head_size"],
                                        kernel_initializer=bert.initializer)(encoder.output)
    model = keras.Model(encoder.inputs, output)
    optimizer = keras.optimizers.Adam(request["lr"])

    def loss_fn(batch, logits):
        if request["task"] == "classification":
            return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
                batch["label"], logits, from_logits=True))
        # bert4keras's GPLinker `globalpointer_crossentropy`: sum over types, mean over rows
        shape = tf.shape(logits)
        labels = tf.cast(batch["entity_labels"], "int32")
        flat = labels[..., 0] * shape[2] + labels[..., 1]
        scores = tf.reshape(logits, (shape[0], shape[1], -1))
        return tf.reduce_mean(tf.reduce_sum(
            sparse_multilabel_categorical_crossentropy(flat, scores, True), axis=1))

    @tf.function(reduce_retracing=True)
    def train_step(batch):
        with tf.GradientTape() as tape:
            logits = model([batch["token_ids"], batch["segment_ids"]], training=True)
            loss = loss_fn(batch, logits)
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply_gradients(zip(grads, model.trainable_weights))
        return loss

    @tf.function(reduce_retracing=True)
    def predict(token_ids, segment_ids):
        return model([token_ids, segment_ids], training=False)

    losses, start = [], time.perf_counter()
    for step, batch in enumerate(batches(request["train"], "train")[:request["steps"]]):
        optimizer.learning_rate.assign(
            learning_rate(step, request["lr"], request["warmup"], request["steps"]))
        losses.append(float(train_step(batch)))
    train_s = time.perf_counter() - start
    predictions = []
    for batch in batches(request["dev"], "dev"):
        logits = predict(batch["token_ids"], batch["segment_ids"]).numpy()
        if request["task"] == "classification":
            predictions += [int(i) for i in logits.argmax(-1)]
            continue
        for row, ids in zip(logits, batch["token_ids"]):
            n = int((ids != 0).sum())
            row[:, [0, n - 1], :] = -np.inf  # [CLS] and [SEP], as our head's decode
            row[:, :, [0, n - 1]] = -np.inf
            found = np.argwhere(row > 0)
            predictions.append([(int(h), int(s), int(e), float(row[h, s, e])) for h, s, e in found])
    params = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    with open(out_path, "w") as f:
        json.dump({"losses": losses, "predictions": predictions, "train_s": train_s,
                   "params": params}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
