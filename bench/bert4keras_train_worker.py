"""Times training steps of bert4keras 0.11.5 `roformer_v2` (legacy tf-keras process).

Needs TF_KERAS=1 and TF_USE_LEGACY_KERAS=1 before TensorFlow is imported
(bench/backbone.py starts it that way). The training step is the one every
system in bench/backbone.py gets: [CLS] -> Dense(2) softmax, sparse CE on
fixed labels, Adam, one `train_on_batch` per step on the same arrays.

One shot:   python -m bench.bert4keras_train_worker --config BERT_CONFIG.json \
                --data DATA.npz --seq 128 --steps 5
            prints {"step_seconds": [...], "cpu_seconds": [...], ...} as JSON.
Serve mode: python -m bench.bert4keras_train_worker --serve
            reads one JSON request a line ({"config", "data", "seq", "steps"}),
            answers one JSON line each; models stay built between requests, so
            the caller can interleave bert4keras rounds with its own.
"""
import argparse
import json
import os

from bench.step_worker import Runner, serve


def check_environment():
    if os.environ.get("TF_KERAS") != "1" or os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        raise SystemExit("run with TF_KERAS=1 TF_USE_LEGACY_KERAS=1 (bert4keras needs legacy tf-keras)")


def build_classifier(config_path, learning_rate=1e-4, precision="float32"):
    """precision: the tf-keras global dtype policy while the model is built."""
    import tensorflow as tf
    from bert4keras.models import build_transformer_model

    keras = tf.keras  # tf-keras 2.x under TF_USE_LEGACY_KERAS=1
    keras.mixed_precision.set_global_policy(precision)
    try:
        encoder = build_transformer_model(config_path, model="roformer_v2")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    cls = keras.layers.Lambda(lambda x: x[:, 0], name="cls")(encoder.output)
    probs = keras.layers.Dense(2, activation="softmax", name="classifier")(cls)
    model = keras.Model(encoder.inputs, probs)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="sparse_categorical_crossentropy")
    return model


def build(config, precision):
    import tensorflow as tf

    tf.random.set_seed(0)
    return build_classifier(config, precision=precision)


def make_runner():
    return Runner(build, lambda token_ids, segment_ids: [token_ids, segment_ids],
                  lambda model: int(model.count_params()) - model.layers[-1].count_params())


def environment():
    import bert4keras
    import tensorflow as tf
    import tf_keras

    return {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
            "bert4keras": bert4keras.__version__}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true")
    parser.add_argument("--config")
    parser.add_argument("--data")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)
    check_environment()
    threads = os.environ.get("BENCH_INTER_OP_THREADS")
    if threads:
        import tensorflow as tf

        tf.config.threading.set_inter_op_parallelism_threads(int(threads))
    runner = make_runner()
    if not args.serve:
        print(json.dumps({**runner.run(args.config, args.data, args.seq, args.steps),
                          "environment": environment()}))
        return
    serve(runner.run, environment())


if __name__ == "__main__":
    main()
