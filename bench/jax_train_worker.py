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
import sys
import time


def check_environment():
    if os.environ.get("KERAS_BACKEND") != "jax":
        raise SystemExit("run with KERAS_BACKEND=jax (and .venv-jax's python: make interop-jax)")


class Runner:
    def __init__(self):
        self.models = {}
        self.data = {}

    def batch(self, data_path, seq):
        import numpy as np

        if data_path not in self.data:
            self.data[data_path] = np.load(data_path)
        d = self.data[data_path]
        return {"token_ids": d[f"token_ids_{seq}"], "segment_ids": d[f"segment_ids_{seq}"]}, \
            d["labels"]

    def run(self, config, data, seq, steps, precision="float32"):
        from bench.backbone import backbone_params, build_system

        if (config, precision) not in self.models:
            with open(config, encoding="utf-8") as f:
                self.models[config, precision] = build_system("ours", json.load(f),
                                                              precision=precision)
        model = self.models[config, precision]
        x, y = self.batch(data, seq)
        step_seconds, cpu_seconds, losses = [], [], []
        for _ in range(steps):
            wall, cpu = time.perf_counter(), time.process_time()
            loss = model.train_on_batch(x, y)  # a NumPy float: the step is done
            step_seconds.append(time.perf_counter() - wall)
            cpu_seconds.append(time.process_time() - cpu)
            losses.append(float(loss))
        return {"step_seconds": step_seconds, "cpu_seconds": cpu_seconds, "losses": losses,
                "params": backbone_params(model)}


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
    runner = Runner()
    print(json.dumps({"ready": True, "environment": environment()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("cmd") == "quit":
            break
        try:
            reply = runner.run(request["config"], request["data"], request["seq"], request["steps"],
                               request.get("precision", "float32"))
        except Exception as error:  # report, keep serving
            reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
