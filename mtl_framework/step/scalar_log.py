"""A run's TensorBoard scalars (run_dir/logs), written as the backend can: tf.summary on
TensorFlow, the tensorboard package's own writer on JAX (TensorFlow is not imported there)."""
import importlib

import keras


class ScalarLog:
    """TensorBoard scalars of a run (run_dir/logs): tf.summary on TensorFlow (as always),
    the tensorboard package's own writer on JAX (no TensorFlow needed; same event files,
    same tags). Without the tensorboard package on JAX, `available` is False and nothing is
    written (`mtl train` says so once)."""

    def __init__(self, logdir):
        self.step, self.available = 0, True
        if keras.backend.backend() == "tensorflow":
            self.tf = importlib.import_module("tensorflow")
            self.writer = self.tf.summary.create_file_writer(logdir)
            return
        self.tf = None
        try:
            summary = importlib.import_module("tensorboard.summary")
        except ImportError:
            self.writer, self.available = None, False
            return
        self.writer = summary.Writer(logdir)

    def write(self, step, scalars):
        """{tag: value} at `step`."""
        if self.tf is not None:
            with self.writer.as_default(step=step):
                for tag, value in scalars.items():
                    self.tf.summary.scalar(tag, value)
        elif self.writer is not None:
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, float(value), step)
            self.writer.flush()

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
