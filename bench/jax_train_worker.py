"""Times training steps of our backbone on the JAX backend (`ours_jax` of bench/backbone.py).

Runs with .venv-jax's python (`make interop-jax`: no TensorFlow) and KERAS_BACKEND=jax
(bench/backbone.py starts it that way). The model and step are bench/backbone.py's
`build_system("ours", ...)`: backbone -> [CLS] -> Dense(2) softmax, sparse CE on fixed
labels, Adam(1e-4), dropout 0.1, one `train_on_batch` a step on the same arrays; on JAX
the step is jit-compiled (as `mtl train` runs there). `train_on_batch` returns the loss
as a NumPy value, so each timed step has finished on the device.

Serve mode: python -m bench.jax_train_worker --serve
            reads one JSON request a line ({"config": a JSON file of CONFIGS' dims,
            "data", "seq", "steps", "precision"}), answers one JSON line each
            ({"step_seconds", "cpu_seconds", "losses", "params"}); models stay built
            between requests, so the caller interleaves these rounds with its own.
"""
import argparse
import json
import os

from bench.step_worker import Runner, serve


def check_environment():
    if os.environ.get("KERAS_BACKEND") != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax (and .venv-jax's python: make interop-jax)")


def build(config, precision):
    """bench/backbone.py's `ours` classifier of the dims in the JSON file `config`."""
    from bench.backbone import build_system

    with open(config, encoding="utf-8") as f:
        return build_system("ours", json.load(f), precision=precision)


def make_runner():
    from bench.backbone import backbone_params

    return Runner(build, lambda token_ids, segment_ids: {"token_ids": token_ids,
                                                         "segment_ids": segment_ids},
                  backbone_params)


def environment():
    import jax
    import keras

    return {"jax": jax.__version__, "keras": keras.__version__,
            "keras_backend": keras.backend.backend(), "devices": [str(d) for d in jax.devices()]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", required=True)
    parser.parse_args(argv)
    check_environment()
    serve(make_runner().run, environment())


if __name__ == "__main__":
    main()
