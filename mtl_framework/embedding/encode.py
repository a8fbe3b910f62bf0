"""Sentence embeddings from a run, an export of ours, or any backbone folder we read.

    encoder = Encoder("runs/embed")                 # the newest checkpoint; Encoder(path, "best")
    vectors = encoder.encode(["今天天气很好", ...])  # float32 [n, H], as the run was trained
    vectors = encoder.encode(queries, side="query")  # with the task's query_prefix

How a text becomes a vector is what the run's contrastive tasks trained (their heads
record pooling, normalisation and prefixes: ContrastiveHead's config); a folder without
heads says it in its sentence-transformers files (1_Pooling, Normalize, prompts), else
mean pooling, not normalised: sentence-transformers' default for a plain encoder.
Each text is `[CLS] prefix + text [SEP]`, cut to max_length, as the featurizer made it.

One way in: every source is opened by saving.load (saving/trained.py), which gives the
settings (sentence_encoder/settings.py's EmbeddingSettings, read once here) and the model
(sentence_encoder/model.py's SentenceEncoder); the backend runs it by step/'s
encoding_forward. This module adds what texts need: prefixes, tokens, length-sorted
batches, Matryoshka widths.
"""
import concurrent.futures
import os

import numpy as np

from mtl_framework.errors import UserError
from mtl_framework.numbers import l2_normalize
from mtl_framework.sentence_encoder.settings import check_pooling

# TensorFlow's intra-op threads while encoding: one, so each lane (one per core) computes its
# batch on a core of its own; TF's default (every core on each op, 2 lanes) left a core idle
# between the small ops of short texts: 0.77x these sentences/s at bfloat16, 0.86x at float32
# (BERT small, AFQMC sentences, batch 32, this 2-core CPU; bench/results/embedding_speed.md).
ENCODING_THREADS = {"TF_NUM_INTRAOP_THREADS": "1"}


def use_encoding_threads():
    """Before TensorFlow starts (`mtl encode`, `mtl mine-negatives`, the embedding suite):
    ENCODING_THREADS, unless the environment sets them already; False when TensorFlow has
    started (its thread pools are fixed then)."""
    import sys

    if "tensorflow" in sys.modules:
        return False
    for name, value in ENCODING_THREADS.items():
        os.environ.setdefault(name, value)
    return True


class Encoder:
    """Texts -> sentence vectors (see the module docstring).

    source: a run directory (checkpoint: None newest, "best", a step), a folder of any
    format we read, both opened by saving.load, or what saving opened already (a
    saving.trained.Trained: `Run.encode`'s model in memory, Trained.of_model).  pooling /
    normalize: instead of what was trained.  task: the contrastive task whose settings and
    prefixes to use, when the run has several.
    max_length: tokens per text (default: the run's max_length, a folder's recorded length
    or sentence_bert_config.json's max_seq_length, else the backbone's positions, else
    512).  precision: the run's (auto: bfloat16 where the CPU has it) by default, float32
    for a folder; a mixed policy encodes with its 16-bit weights (encoding_precision).
    any_task: `task` may be one the model did not train (a task to mine negatives for):
    then the model's own settings apply."""

    def __init__(self, source, checkpoint=None, pooling=None, normalize=None, task=None,
                 max_length=None, precision=None, log=print, any_task=False):
        from mtl_framework import saving
        from mtl_framework.saving.trained import Trained
        from mtl_framework.tokenizer import Tokenizer

        check_max_length(max_length)
        check_pooling(pooling)
        trained = source if isinstance(source, Trained) else saving.load(
            source, checkpoint, log, precision=precision)
        trained.check_length(max_length)  # before anything is built
        trained.precision = self.precision = encoding_precision(precision or trained.precision)
        self.source, self.log, self.task, self.trained = str(trained.source), log, task, trained
        self.settings = trained.embedding(task, pooling, any_task).replaced(pooling, normalize)
        self.tokenizer = Tokenizer(trained.vocab)
        self.max_length = max_length or trained.max_length
        self._model = None

    @property
    def pooling(self):
        return self.settings.pooling

    @property
    def normalize(self):
        return self.settings.normalize

    def prefix(self, side, task=None):
        """The prefix of `side` ("query" / "passage" / None) of `task` (default: the only set)."""
        if side is None:
            return ""
        if side not in ("query", "passage"):
            raise UserError(f"side {side!r}: give query, passage or none")
        prompts = self.settings.prompts
        if task is not None:
            if task not in prompts:
                raise UserError(f"{self.source}: no contrastive task {task!r}; its tasks: "
                                f"{', '.join(prompts) or 'none'}")
            return prompts[task][side]
        values = {p[side] for p in prompts.values()}
        if len(values) > 1:
            raise UserError(self.prefixes_differ(side))
        return values.pop() if values else ""

    def prefixes_differ(self, side):
        """The line refusing a side whose prefix the run's tasks differ on: their prefixes,
        and --task NAME, or, where --task names a task they are not (`mtl mine-negatives`
        of another task), a model that trained it."""
        prompts = self.settings.prompts
        shown = ", ".join(f"{name} {p[side]!r}" for name, p in prompts.items())
        where = f"{self.source}: its tasks prefix the {side} differently ({shown})"
        if self.task is not None and self.task not in prompts:
            return (f"{where} and --task {self.task} is none of them: use a model that trained "
                    f"{self.task}, or one whose tasks agree")
        return f"{where}: give --task NAME (the task whose prefixes to use)"

    @property
    def model(self):
        """The SentenceEncoder (sentence_encoder/model.py: the backbone, pooled and
        normalised as the settings say), built at the encoder's precision when first used."""
        if self._model is None:
            self._model = self.trained.encoder(self.settings)
            if self.max_length is None:
                positions = self._model.backbone.config.get("max_positions")
                self.max_length = min(positions or 512, 512)
        return self._model

    @property
    def forward(self):
        """(token ids [n, L] -> vectors, the step lengths are rounded up to, batches at once):
        the backend's way to run the model (step/: encoding_forward), made once."""
        if getattr(self, "_forward", None) is None:
            from mtl_framework.step import encoding_forward

            self._forward = encoding_forward(self.model)
        return self._forward

    def token_rows(self, texts, side=None, task=None):
        """[CLS] prefix + text [SEP] token ids per text, cut to max_length."""
        model = self.model  # noqa: F841 (sets max_length from the backbone when unset)
        prefix = self.prefix(side, task)
        return [e.token_ids for e in self.tokenizer.encode_batch(
            [prefix + t for t in texts], max_length=self.max_length)]

    def encode(self, texts, side=None, task=None, batch_size=32, progress=None, dim=None):
        """float32 [len(texts), H] (one str: [H], as sentence-transformers gives): texts
        sorted by length into batches of `batch_size` (padding only to the batch's longest;
        on JAX rounded up to 8, each shape being a compilation), pooled, L2-normalised when
        the model was trained so (the model does both). `progress(n)` after each batch.
        `dim`: the first `dim` features only (a Matryoshka prefix, see matryoshka_dim),
        L2-normalised again after the cut where the model normalises, as the Matryoshka loss
        compared them."""
        if isinstance(texts, str):  # one text, one vector (as sentence-transformers does)
            return self.encode([texts], side, task, batch_size, progress, dim)[0]
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise UserError(f"text {i + 1} is a {type(text).__name__}, not a string")
        dim = self.matryoshka_dim(dim)
        if not texts:
            return np.zeros((0, dim), np.float32)
        rows = self.token_rows(texts, side, task)
        order = np.argsort([len(r) for r in rows], kind="stable")
        forward, step, lanes = self.forward
        batches = [order[start:start + batch_size] for start in range(0, len(rows), batch_size)]

        def vectors_of(chosen):
            length = -(-max(len(rows[i]) for i in chosen) // step) * step
            token_ids = np.zeros((len(chosen), length), np.int32)
            for b, i in enumerate(chosen):
                token_ids[b, :len(rows[i])] = rows[i]
            return np.asarray(forward(token_ids), np.float32)

        out = None
        with concurrent.futures.ThreadPoolExecutor(lanes) as pool:
            for chosen, vectors in zip(batches, pool.map(vectors_of, batches)):
                if out is None:
                    out = np.zeros((len(rows), vectors.shape[-1]), np.float32)
                out[chosen] = vectors
                if progress is not None:
                    progress(len(chosen))
        if dim == out.shape[1]:
            return out
        out = np.ascontiguousarray(out[:, :dim])
        return l2_normalize(out, axis=1) if self.normalize else out


    def matryoshka_dim(self, dim=None):
        """The vector width `dim` asks for (None: the whole H). Any width from 1 to H is
        given, as sentence-transformers' truncate_dim; one not among the trained
        matryoshka_dims (nor H) is said in one line: the loss never compared that prefix."""
        hidden = self.model.backbone.config["hidden_size"]
        if dim is None:
            return hidden
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= hidden:
            raise UserError(f"--dim {dim!r}: the vector has {hidden} features: give a width "
                            f"from 1 to {hidden}"
                            + self.trained_dims_note())
        if dim != hidden and dim not in self.settings.matryoshka_dims and self.log:
            self.log(f"--dim {dim}: not a width the model was trained at"
                     + self.trained_dims_note() + f"; its first {dim} features are given "
                     "all the same, untested")
        return dim

    def trained_dims_note(self):
        dims = self.settings.matryoshka_dims
        return f" (its Matryoshka dims: {', '.join(map(str, dims))})" if dims else \
            " (it trained no Matryoshka dims)"


# [CLS], one token of the text, [SEP]: a shorter length leaves no text, every vector the same
SHORTEST_LENGTH = 3


def check_max_length(max_length):
    """None, or a whole number with room for a text token between [CLS] and [SEP]."""
    if max_length is None:
        return
    if isinstance(max_length, bool) or not isinstance(max_length, int) or \
            max_length < SHORTEST_LENGTH:
        raise UserError(f"max_length {max_length!r}: tokens per text, [CLS] and [SEP] "
                        f"included, so a whole number >= {SHORTEST_LENGTH} (shorter leaves no "
                        "token of the text: every vector the same): give e.g. 128, or None "
                        "for the model's own length")


def encoding_precision(precision):
    """The Keras policy an Encoder computes in for `precision` (a run's, or asked for): auto
    settled on this CPU; mixed_bfloat16 as bfloat16 weights and all (nothing is trained:
    float32 master weights would only be cast on every call, 1.2x slower here; the vectors
    agree with float32 as closely, tests/test_encode.py)."""
    from mtl_framework.config.precision import resolve_precision
    from mtl_framework.step.distributed import inference_precision

    return inference_precision(resolve_precision(precision)[0])
