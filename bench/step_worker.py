"""What the persistent step workers of bench/backbone.py share (bert4keras_train_worker.py,
jax_train_worker.py): timed `train_on_batch` steps, and the serve loop that answers one
JSON request a line ({"config", "data", "seq", "steps", "precision"}) with one JSON line."""
import json
import sys
import time


class Batches:
    """(token_ids, segment_ids, labels) at a length from bench/backbone.py's batches.npz
    files, each file read once."""

    def __init__(self):
        self.files = {}

    def __call__(self, data_path, seq):
        import numpy as np

        if data_path not in self.files:
            self.files[data_path] = np.load(data_path)
        d = self.files[data_path]
        return d[f"token_ids_{seq}"], d[f"segment_ids_{seq}"], d["labels"]


def timed_steps(model, x, y, steps):
    """`steps` train_on_batch calls: their wall and CPU seconds and losses."""
    step_seconds, cpu_seconds, losses = [], [], []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        loss = model.train_on_batch(x, y)  # returns the loss as a number: the step is done
        step_seconds.append(time.perf_counter() - wall)
        cpu_seconds.append(time.process_time() - cpu)
        losses.append(float(loss))
    return {"step_seconds": step_seconds, "cpu_seconds": cpu_seconds, "losses": losses}


class Runner:
    """A worker's systems: a model built once per (config, precision) by
    `build(config, precision)`, `inputs(token_ids, segment_ids)` its inputs, and
    `params(model)` its backbone's parameter count."""

    def __init__(self, build, inputs, params):
        self.build, self.inputs, self.params = build, inputs, params
        self.models = {}
        self.batches = Batches()

    def run(self, config, data, seq, steps, precision="float32"):
        if (config, precision) not in self.models:
            self.models[config, precision] = self.build(config, precision)
        model = self.models[config, precision]
        token_ids, segment_ids, y = self.batches(data, seq)
        return {**timed_steps(model, self.inputs(token_ids, segment_ids), y, steps),
                "params": self.params(model)}


def serve(run, environment):
    """Announce `environment` ({"ready": true, "environment": ...}), then answer each
    request with `run(config, data, seq, steps, precision)`'s dict, or {"error": ...}
    (and keep serving), until {"cmd": "quit"} or the end of stdin."""
    print(json.dumps({"ready": True, "environment": environment}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        if request.get("cmd") == "quit":
            break
        try:
            reply = run(request["config"], request["data"], request["seq"], request["steps"],
                        request.get("precision", "float32"))
        except Exception as error:  # report, keep serving
            reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)
