"""Runs bert4keras 0.11.5 `roformer_v2` in its own process (legacy tf-keras only).

bert4keras needs TF_KERAS=1 and TF_USE_LEGACY_KERAS=1 set before TensorFlow is
imported, which cannot coexist with Keras 3 in one process; `run_bert4keras`
(mtl_framework.interop.legacy_bert4keras) starts this script with them.

    python bert4keras_worker.py build  CONFIG OUT_CKPT            # random init, save checkpoint
    python bert4keras_worker.py encode CONFIG CKPT INPUTS.npz OUT.npy
    python bert4keras_worker.py tokenize VOCAB TEXTS.json OUT.json
"""
import json
import sys


def build_model(config_path, checkpoint_path=None):
    from bert4keras.models import build_transformer_model

    return build_transformer_model(config_path, checkpoint_path, model="roformer_v2")


def save_checkpoint(model_builder, checkpoint_path):
    """bert4keras's save_weights_as_checkpoint fails on TF 2.21 ("Session graph is
    empty"): read values through variable_mapping and save them in a fresh graph."""
    import tensorflow as tf

    values = {}
    for layer_name, names in model_builder.variable_mapping().items():
        if layer_name not in model_builder.layers:
            continue
        layer = model_builder.layers[layer_name]
        for weight, name in zip(layer.trainable_weights, names):
            values[name] = weight.numpy()
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in values.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.variables_initializer(variables))
            saver.save(session, checkpoint_path, write_meta_graph=False)
    return values


def main(argv):
    command = argv[0]
    if command == "build":
        from bert4keras.models import build_transformer_model

        # isort: split
        import tensorflow as tf  # after bert4keras, which picks tf.keras from the environment
        tf.random.set_seed(int(argv[3]) if len(argv) > 3 else 0)
        builder = build_transformer_model(argv[1], model="roformer_v2", return_keras_model=False)
        save_checkpoint(builder, argv[2])
    elif command == "encode":
        import numpy as np

        model = build_model(argv[1], argv[2])
        inputs = np.load(argv[3])
        outputs = model.predict([inputs["token_ids"], inputs["segment_ids"]], verbose=0)
        np.save(argv[4], outputs)
    elif command == "tokenize":
        from bert4keras.tokenizers import Tokenizer

        tokenizer = Tokenizer(argv[1], do_lower_case=True)
        with open(argv[2], encoding="utf-8") as f:
            items = json.load(f)
        results = []
        for item in items:
            token_ids, segment_ids = tokenizer.encode(item["text"], item.get("text_b"),
                                                      maxlen=item.get("max_length"))
            results.append([token_ids, segment_ids])
        with open(argv[3], "w", encoding="utf-8") as f:
            json.dump(results, f)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
