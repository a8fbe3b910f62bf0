"""What a backend's step provides: the contract between MultiTaskModel (model.py: tasks,
trace groups, balancing hooks, micro-batch order, logs, written once) and a backend's
half of one mixed update (tensorflow.py, jax.py). MultiTaskModel calls nothing else that
is backend-specific; a backend that leaves one of these out cannot be instantiated."""
from abc import ABC, abstractmethod


class BackendStep(ABC):
    """The backend half of MultiTaskModel (a base class of it, through `step.Step`)."""

    # --- state ------------------------------------------------------------------------------

    @abstractmethod
    def _state_variable(self, value, name, dtype="float32"):
        """A scalar of the training state (checkpointed)."""

    @abstractmethod
    def _accumulator(self, variable, name):
        """A zeroed buffer shaped as `variable`, where micro-batch gradients add up."""

    def gradient_buffer(self, variable, name):
        """A zeroed gradient buffer shaped as `variable`, as the shared accumulators are
        (balancing's: pcgrad keeps one per task of an update)."""
        return self._accumulator(variable, name)

    @staticmethod
    @abstractmethod
    def gradient_gram(groups):
        """[k, k] float64 dot products of k gradient groups (each a list of buffers shaped
        as the backbone's variables), summed in float64 whatever the buffers' dtype."""

    @staticmethod
    @abstractmethod
    def _constant(value):
        """`value` as this backend's constant tensor."""

    @staticmethod
    @abstractmethod
    def _to_tensors(batch):
        """A NumPy batch as this backend's tensors."""

    @abstractmethod
    def _trimmed(self, rows):
        """{token_ids, segment_ids} [N, L] cut to the longest text's tokens where the backend
        traces for any length (TensorFlow); JAX compiles per shape, so its rows stay as
        collated."""

    @abstractmethod
    def _packs_tokens(self):
        """Whether this backend runs a texts-alone head's passes (_text_vectors) packed, its
        token-wise work on the real tokens only with T found in the graph (layers.Packing: a
        data-dependent shape, which TensorFlow traces and JAX would compile once per batch;
        JAX's other micro-batches pack with a static row count: _packed_rows)."""

    @abstractmethod
    def _packed_rows(self, real, positions):
        """The backbone's `packed` for a micro-batch of `real` real tokens in `positions`
        (MultiTaskModel._packs_batch): True where the graph finds T itself (TensorFlow), a
        static row count >= T where every shape is compiled (JAX)."""

    @abstractmethod
    def _read_slots(self, count, positions):
        """How many read positions a micro-batch of `positions` per row gets when its head
        reads `count` and that count varies by batch (TaskHead.read_count_varies: MLM's
        masked tokens; MultiTaskModel._with_read_positions pads the rest with position 0):
        the count where the graph relaxes the axis (TensorFlow), a few static counts where
        every shape is compiled (JAX)."""

    # --- devices ----------------------------------------------------------------------------

    @abstractmethod
    def _current_strategy(self):
        """The distribution the model was built under (None: one device)."""

    @staticmethod
    @abstractmethod
    def _on_gpu():
        """Whether the model computes on a GPU."""

    @abstractmethod
    def _check_lanes(self, lanes):
        """Refuse a number of micro-steps side by side this backend cannot run."""

    @abstractmethod
    def _default_lanes(self):
        """How many micro-steps run side by side when the experiment does not say."""

    # --- one mixed update -----------------------------------------------------------------------

    @abstractmethod
    def _take_counts(self, n):
        """The next n micro-batch numbers (each seeds its dropout)."""

    @abstractmethod
    def _launch(self, task, batch, count):
        """Start the task's traced micro-step on `batch`; returns its results."""

    @abstractmethod
    def _finish(self, task, results):
        """A micro-step's results into the accumulators and the task's state; returns the
        task's logs (loss, gradient norm, finite)."""

    @abstractmethod
    def apply_update(self):
        """The optimizer's update from the accumulated gradients."""

    @abstractmethod
    def _drop_update(self):
        """Zero the accumulators without an update (every micro-batch was skipped)."""

    @abstractmethod
    def traced_outputs(self, task, batch):
        """A traced forward pass of the task's head (evaluation, predict)."""

    @abstractmethod
    def make_train_function(self, force=False):
        """What Keras's fit calls once per update."""
