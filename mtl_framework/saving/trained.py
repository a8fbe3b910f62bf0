"""A trained model opened from a run directory (its newest readable checkpoint, keep_best's
or step N's) or from a keras export written with `--with-heads`: `Trained`, whose backbone
and heads are built (by assemble.py) when first asked for.

    trained = open_trained(path, checkpoint=None, rope_scaling=None)
    trained.backbone, trained.heads(scored_only=True), trained.model()
"""
import os

from mtl_framework import architectures, formats
from mtl_framework.architectures import rope_scaling as rope
from mtl_framework.assemble import checkpoint_backbone, prediction_model, saved_heads
from mtl_framework.config.experiment import load_experiment
from mtl_framework.config.precision import run_precision
from mtl_framework.errors import UserError
from mtl_framework.formats import keras as preset
from mtl_framework.formats import sentence_transformers as st
from mtl_framework.rundir import RunDir
from mtl_framework.rundir.trained_on import check_vocab, matched_task
from mtl_framework.sentence_encoder.settings import EmbeddingSettings, as_heads
from mtl_framework.step.distributed import precision_policy


class Trained:
    """A trained backbone and its heads' metadata and weights, read from a run directory
    or a keras export with heads; the backbone is built when first asked for.

    source: the folder.  experiment: the run's Experiment (None for an export).
    checkpoint: the rundir Checkpoint read (None for an export).  vocab: its vocab.txt.
    max_length: the run's max_length (an export: the length it records, or None).
    rope_scaling: the setting asked for instead of the backbone's own, normalised, or
    None when none was asked.  max_positions: the length of a learned position table
    (BERT, ALBERT), read from the config before anything is built; None for RoFormerV2."""

    def __init__(self, source, experiment, checkpoint, vocab, build, saved_heads, max_length,
                 rope_scaling=None, precision=None, max_positions=None, heads_file=None,
                 log=print, length_file=None):
        self.source, self.experiment, self.checkpoint, self.vocab = \
            source, experiment, checkpoint, vocab
        self.max_positions = max_positions
        self.heads_file, self.log = heads_file or source, log  # where the heads' record is
        self._said = set()  # lines of `task` said once, not once per task
        self.max_length, self.rope_scaling = max_length, rope_scaling
        # a folder's max_length read from a sentence-transformers file (checked against the
        # position table when no length is asked for); None: the run's or the export's own
        self.length_file = length_file
        # what the model computes in: the run's precision, float32 for an export folder
        self.precision = precision or (experiment.precision if experiment else "float32")
        self._build, self._read_heads = build, saved_heads
        self._backbone = self._heads_read = None

    @property
    def backbone(self):
        if self._backbone is None:
            try:
                with precision_policy(self.precision):
                    self._backbone = self._build()
            except ValueError as error:  # a config this version cannot build
                if isinstance(error, UserError):
                    raise
                raise UserError(f"{self.source}: {error}") from None
        return self._backbone

    def check_length(self, max_length, flag="--max-length"):
        """Refuse a length past the learned position table before anything is built (its
        positions do not exist: TensorFlow fails in a gather, JAX reads NaN): `max_length`
        asked for, else the one a sentence-transformers file of the folder records."""
        positions = self.max_positions
        if positions is None:  # rotary positions (RoFormerV2): any length is computed
            return
        if max_length is not None and max_length > positions:
            raise UserError(f"{flag} {max_length}: longer than the backbone's max_positions "
                            f"{positions} ({self.source}: its learned position table "
                            f"has no rows past it): give {flag} {positions} or less")
        if max_length is None and self.length_file and self.max_length > positions:
            raise UserError(f"{self.length_file}: max_seq_length {self.max_length} is longer than "
                            f"the backbone's max_positions {positions} (its learned position "
                            f"table has no rows past it): give {flag} {positions} or less, or "
                            f"set max_seq_length to {positions} there")

    @property
    def head_metadata(self):
        """{task: head metadata} in the run's task order (type, num_labels, config,
        variables); a UserError when there is none (a backbone-only export, an old run)."""
        return self.saved_heads()[0]

    def saved_heads(self):
        """(head metadata, {variable name: array}), read once."""
        if self._heads_read is None:
            self._heads_read = self._read_heads()
        return self._heads_read

    def task(self, task, data_root):
        """The TaskSpec to read and decode `task` with, checked against the label names its
        head records: the spec, the spec in the recorded order (same names, logged) or a
        UserError naming the first difference (rundir/trained_on.py)."""
        return matched_task(task, self.head_metadata.get(task.name, {}), data_root,
                            self.heads_file, self._once)

    def _once(self, line):
        if self.log and line not in self._said:
            self._said.add(line)
            self.log(line)

    def heads(self, scored_only=False):
        """{task: head}, rebuilt with their weights at the run's precision."""
        with precision_policy(self.precision):
            return saved_heads(*self.saved_heads(), self.backbone, self.source,
                               scored_only=scored_only)

    def model(self, scored_only=False):
        """The prediction model of the backbone and its heads."""
        tasks_per_update = self.experiment.tasks_per_update if self.experiment else 8
        return prediction_model(self.backbone, self.heads(scored_only), tasks_per_update)

    def embedding(self, task=None, pooling=None, any_task=False):
        """The EmbeddingSettings this model encodes by (sentence_encoder/settings.py): what a run's
        contrastive heads trained (`task`'s, where they differ), what a folder declares
        (folder_embedding), the PLAIN ones where it says nothing. `pooling`: asked for
        instead (a folder's own then need not be one we read); any_task: `task` may be one
        the model did not train (`mtl mine-negatives`)."""
        if self.experiment is None:
            return folder_embedding(self.source, task, self.log, any_task, pooling)
        settings = EmbeddingSettings.from_heads(self.head_metadata, self.source, task,
                                                any_task=any_task)
        return settings or EmbeddingSettings()

    def encoder(self, settings=None, task=None):
        """The SentenceEncoder of this model (sentence_encoder/model.py: the backbone,
        pooled and normalised as `settings` say; default its own, `embedding(task)`), built
        at its precision: what embedding/encode.py's Encoder computes with."""
        from mtl_framework.sentence_encoder.model import SentenceEncoder

        settings = settings or self.embedding(task)
        with precision_policy(self.precision):
            return SentenceEncoder(self.backbone, settings.pooling, settings.normalize)

    @classmethod
    def of_model(cls, backbone, vocab, head_metadata, experiment, source):
        """A Trained of a model in memory (`Run.encode`): its backbone as it is now, its
        heads' metadata ({task: {"family", "config"}}), the run's experiment."""
        return cls(source, experiment, None, vocab, lambda: backbone,
                   lambda: (head_metadata, {}), experiment.max_length,
                   precision=experiment.precision)


def open_trained(path, checkpoint=None, log=print, rope_scaling=None, precision=None):
    """A Trained of a run directory (experiment.yaml: its newest readable checkpoint, or
    `checkpoint` "best" or a step number), of a keras export (config.json; its heads when
    written `--with-heads`) or of any backbone folder we read (a transformers or
    sentence-transformers folder, bert4keras, keras-hub, roformer-pytorch: no heads).
    `rope_scaling`: `none` or TYPE:FACTOR[:ORIGINAL] instead of the backbone's own,
    stretched from the trained length; `precision` instead of the run's (float32 for a
    folder). A UserError when it is none of these, when the run has no readable
    checkpoint, or when its vocab does not fit."""
    if not str(path):
        raise UserError("'' (an empty path): give a run directory or a keras export folder")
    if os.path.isfile(path):  # a file of a run (its vocab.txt, a checkpoint's state.npz)
        raise UserError(f"{path}: a file, not a run directory or export folder: give the "
                        "folder that `mtl train` or `mtl export` wrote")
    if RunDir(path).is_run():
        return open_run(path, checkpoint, log, rope_scaling, precision)
    if checkpoint is not None:
        raise UserError(f"{path}: --checkpoint is for a run directory, not a folder")
    if not os.path.isdir(path):
        raise UserError(f"{path}: no such run directory or model folder")
    opened = _open_export if preset.detect(path) is not None else _open_folder
    return opened(path, rope_scaling, log, precision)


def open_run(run_dir, which=None, log=print, rope_scaling=None, precision=None):
    """A Trained of a run directory only (see open_trained); `precision` instead of the
    run's (an export writes weights, built at float32)."""
    run = RunDir(run_dir)
    experiment = load_experiment(run.experiment_file())
    scaling = _parsed_rope_scaling(rope_scaling, experiment.max_length, run.path)
    chosen = run.trained_checkpoint(which, log)
    vocab = run.checked_vocab(chosen, log)
    overrides = {} if scaling is None else {"rope_scaling": scaling}
    return Trained(run.path, experiment, chosen, vocab,
                   lambda: checkpoint_backbone(chosen, **overrides),
                   lambda: run_heads(chosen), experiment.max_length, scaling,
                   precision or run_precision(experiment, run.stored_experiment())[0],
                   chosen.trainer.get("backbone", {}).get("max_positions"),
                   os.path.join(chosen.path, "trainer.json"), log)


def _open_export(directory, rope_scaling, log=print, precision=None):
    length = preset.trained_length(directory)
    vocab = _folder_vocab(directory, log)
    scaling = _parsed_rope_scaling(rope_scaling, length, directory)
    overrides = {} if scaling is None else {"rope_scaling": scaling}

    def heads():
        saved = preset.load_heads(directory)
        if saved[0] is None:
            raise UserError(f"{directory}: no {preset.HEADS_CONFIG}: this export holds the "
                            "backbone only; export with `mtl export RUN_DIR --format keras "
                            "--with-heads`, or predict from the run directory")
        return saved

    return Trained(directory, None, None, vocab,
                   lambda: architectures.load_preset(directory, **overrides), heads, length,
                   scaling, precision, preset.read_config(directory).get("max_positions"),
                   os.path.join(directory, preset.HEADS_CONFIG), log)


def _open_folder(directory, rope_scaling, log=print, precision=None):
    """A Trained of a backbone folder of another format (no heads): its length is the one
    its sentence-transformers files record, if any."""
    vocab = _folder_vocab(directory, log)
    found = architectures.layout(directory)
    length = st.folder_length(directory)
    overrides = {} if rope_scaling is None else {"rope_scaling": rope_scaling}

    def heads():
        raise UserError(f"{directory}: a {found} backbone folder holds no task heads: "
                        "give the run directory, or its export with `mtl export RUN_DIR "
                        "--format keras --with-heads`")

    return Trained(directory, None, None, vocab,
                   lambda: architectures.load_folder(directory, **overrides), heads, length,
                   None, precision, architectures.read_config(directory, found).get("max_positions"),
                   log=log, length_file=os.path.join(st.transformer_folder(directory),
                                                     st.BERT_CONFIG) if length else None)


def _folder_vocab(directory, log=print):
    """The vocab of a folder (its vocab.txt, or the one tokenizer.json holds), checked
    against what its export records by content (config.json's "run" or provenance.json's
    "vocab"); a folder without a record (a release) is read as it is."""
    vocab = formats.vocab_path(st.transformer_folder(directory))
    if vocab is None:
        raise UserError(f"{directory}: no vocab.txt (nor tokenizer.json): give a folder "
                        "`mtl export` or save_pretrained wrote, or copy the model's "
                        "vocab.txt into it")
    recorded, holder = formats.recorded_vocab(directory)
    if recorded is not None:
        check_vocab(vocab, recorded, holder, "copy the vocab.txt of the export (or of its "
                    "run) back", log)
    return vocab


def folder_embedding(directory, task=None, log=print, any_task=False, pooling=None):
    """The EmbeddingSettings a folder declares: its heads' (a keras export with
    --with-heads), else its sentence-transformers files' (1_Pooling, Normalize, prompts;
    Matryoshka dims from the export's record), else what its export recorded
    (provenance.json "embedding"); else the PLAIN one, said in one line. `pooling`: the
    one asked for instead of the folder's (which then need not be one we read)."""
    if os.path.isfile(os.path.join(directory, preset.HEADS_CONFIG)):
        heads = preset.load_heads(directory)[0]
        if heads:
            return EmbeddingSettings.from_heads(heads, directory, task, any_task=any_task) \
                or EmbeddingSettings()
    recorded, holder = st.recorded_embedding(directory)
    from_record = EmbeddingSettings.from_heads(as_heads(recorded), holder, task,
                                               any_task=any_task) if recorded else None
    declared = st.folder_settings(directory, pooling)
    if declared is not None:
        return EmbeddingSettings(declared["pooling"], declared["normalize"], declared["prompts"],
                                 from_record.matryoshka_dims if from_record else ())
    if from_record is not None:
        return from_record
    plain = EmbeddingSettings()
    if log:
        log(f"{holder}: the run trained no sentence embedding (no contrastive task): "
            f"{plain.described()} (sentence-transformers' default for a plain encoder)"
            if recorded is not None else
            f"{directory}: declares no sentence embedding (no heads.json, 1_Pooling/ or "
            f"provenance.json \"embedding\"): {plain.described()} (sentence-transformers' "
            "default for a plain encoder); give --pooling to choose")
    return plain


def _parsed_rope_scaling(value, trained_length, source):
    if value is None:
        return None
    try:
        return rope.parse(value, trained_length)
    except ValueError as error:
        raise UserError(f"{source}: {error}") from None


def load_run_backbone(run_dir, log=print):
    """(backbone, trainer state + "checkpoint": its folder) of the run's newest readable
    checkpoint."""
    trained = open_trained(run_dir, log=log)
    return trained.backbone, {**trained.checkpoint.trainer, "checkpoint": trained.checkpoint.path}


def run_heads(checkpoint):
    """(heads metadata, {variable name: array}) of the task heads in a checkpoint."""
    heads = checkpoint.trainer.get("heads")
    if heads is None:
        raise UserError(f"{checkpoint.path}/trainer.json has no 'heads' entry (written by an "
                        "older mtl_framework): continue the run one step with `mtl train "
                        "--resume` to write a checkpoint that has it, or export without "
                        "--with-heads")
    weights = {}
    for task, meta in heads.items():
        for name in meta["variables"]:
            if name not in checkpoint.arrays:
                raise UserError(f"{checkpoint.path}/trainer.json: head {task!r} lists variable "
                                f"{name!r}, which is not among the checkpoint's variables")
            weights[name] = checkpoint.arrays[name]
    return heads, weights
