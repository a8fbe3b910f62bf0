"""Runs bert4keras 0.11.5 (`roformer_v2`, `bert`, `albert`) in its own process (legacy
tf-keras only).

bert4keras needs TF_KERAS=1 and TF_USE_LEGACY_KERAS=1 set before TensorFlow is
imported, which cannot coexist with Keras 3 in one process; `run_bert4keras`
(interop.legacy_bert4keras) starts this script with them.

    python bert4keras_worker.py build  CONFIG OUT_CKPT [SEED [MODEL [INPUTS.npz OUT.npy]]]
        random init, saved; given INPUTS, then `encode` of the saved checkpoint
    python bert4keras_worker.py encode CONFIG CKPT INPUTS.npz OUT.npy [MODEL]

MODEL: roformer_v2 (default), bert or albert. `build` moves every 1-D weight (BERT's
biases and LayerNorm; RoFormerV2 has none) off its initial 0 / 1, so they are tested.
    python bert4keras_worker.py tokenize VOCAB TEXTS.json OUT.json
    python bert4keras_worker.py batch JOBS.json
        each of JOBS (a list of the argument lists above) in turn, in one process
"""
import json
import sys


def build_model(config_path, checkpoint_path=None, model="roformer_v2"):
    from bert4keras.models import build_transformer_model

    return build_transformer_model(config_path, checkpoint_path, model=model)


def save_checkpoint(model_builder, checkpoint_path, seed=0):
    """bert4keras's save_weights_as_checkpoint fails on TF 2.21 ("Session graph is
    empty"): read values through variable_mapping and save them in a fresh graph."""
    import numpy as np
    import tensorflow as tf

    values = {}
    for layer_name, names in model_builder.variable_mapping().items():
        if layer_name not in model_builder.layers:
            continue
        layer = model_builder.layers[layer_name]
        for weight, name in zip(layer.trainable_weights, names):
            values[name] = weight.numpy()
    rng = np.random.default_rng(seed)
    for name, value in values.items():
        if value.ndim == 1:
            values[name] = value + 0.1 * rng.standard_normal(value.shape).astype(value.dtype)
    with tf.Graph().as_default():
        variables = [tf.compat.v1.Variable(v, name=n) for n, v in values.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.variables_initializer(variables))
            saver.save(session, checkpoint_path, write_meta_graph=False)
    return values


def encode(config_path, checkpoint_path, inputs_path, out_path, model="roformer_v2"):
    """The model loaded from the checkpoint, on INPUTS' token_ids / segment_ids."""
    import numpy as np

    built = build_model(config_path, checkpoint_path, model)
    inputs = np.load(inputs_path)
    np.save(out_path, built.predict([inputs["token_ids"], inputs["segment_ids"]], verbose=0))


def main(argv):
    command = argv[0]
    if command == "build":
        from bert4keras.models import build_transformer_model

        # isort: split
        import tensorflow as tf  # after bert4keras, which picks tf.keras from the environment
        seed = int(argv[3]) if len(argv) > 3 else 0
        tf.random.set_seed(seed)
        builder = build_transformer_model(argv[1], model=argv[4] if len(argv) > 4 else "roformer_v2",
                                          return_keras_model=False)
        save_checkpoint(builder, argv[2], seed)
        if len(argv) > 6:  # one process: TensorFlow is slow to start
            encode(argv[1], argv[2], argv[5], argv[6], argv[4])
    elif command == "encode":
        encode(*argv[1:5], argv[5] if len(argv) > 5 else "roformer_v2")
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
    elif command == "batch":  # one process: legacy TensorFlow is slow to start
        with open(argv[1], encoding="utf-8") as f:
            for job in json.load(f):
                main(job)
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
