"""A run's TensorBoard scalars (run_dir/logs), by the tensorboard package's own writer on
every backend: the same event files and tags tf.summary writes (scalars as tensor
summaries), without TensorFlow, and 0.95 ms an update of 20 scalars flushed against
tf.summary's 3.2 ms of eager ops between two updates (bench/results/train_loop.md's
logging stage)."""
import importlib


class ScalarLog:
    """{tag: value} per step into `logdir`, flushed at once (a killed run's curves are whole
    up to its last update). Without the tensorboard package, `available` is False and
    nothing is written (`mtl train` says so once)."""

    def __init__(self, logdir):
        try:
            summary = importlib.import_module("tensorboard.summary")
        except ImportError:
            self.writer, self.available = None, False
            return
        self.writer, self.available = summary.Writer(logdir), True

    def write(self, step, scalars):
        """{tag: value} at `step`."""
        if self.writer is not None:
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, float(value), step)
            self.writer.flush()

    def close(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None
