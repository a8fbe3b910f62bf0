"""The sentence embedding's settings as one value, and the only place their defaults live.

    settings = EmbeddingSettings.from_heads(head_metadata, source)   # what a run's tasks trained
    settings = formats.sentence_transformers.folder_embedding(folder)  # what a folder declares
    settings.pooling, settings.normalize, settings.prompts, settings.matryoshka_dims
    settings.to_json()

How a text becomes a vector (pooling: `cls` or `mean` over the real tokens; L2
normalisation or none), the prefix each side puts before its text (`prompts`: {task:
{"query", "passage"}}), and the leading widths the loss trained (`matryoshka_dims`,
widest first). Two sets of defaults, each spelled once, here:

- TRAINED: what a contrastive task trains when its `embedding:` says nothing (BGE's CLS
  pooling, normalised, no prefixes, no Matryoshka dims). The family's EMBEDDING_SETTINGS,
  ContrastiveHead and every reader of a head's record fill a missing key from it.
- PLAIN (`EmbeddingSettings()`): a model that declares no embedding, a plain encoder:
  sentence-transformers' default for one, the mean over the real tokens, not normalised.

Read once per encoder (embedding/encode.py, through saving); the step pools as it says
(sentence_encoder/model.py); formats/sentence_transformers.py reads it from a folder and
writes it into an export, the model card describes it. No folder format, TensorFlow,
Keras or torch here: families/ and the spec checks read it before Keras loads.
"""
import dataclasses

from data_adapters.task_types import CONTRASTIVE
from mtl_framework.errors import UserError

POOLINGS = ("cls", "mean")
SIDES = ("query", "passage")  # `mtl encode --side`: a task's query_prefix, passage_prefix
# What a contrastive task trains without a word of its `embedding:` (its head's config keys,
# the record an export keeps in provenance.json "embedding").
TRAINED = {"pooling": "cls", "normalize": True, "query_prefix": "", "passage_prefix": "",
           "matryoshka_dims": []}


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings:
    """One model's sentence embedding (see the module docstring); the defaults are PLAIN's.
    prompts: {task: {"query": prefix, "passage": prefix}} (a folder's one set under "")."""

    pooling: str = "mean"
    normalize: bool = False
    prompts: dict = dataclasses.field(default_factory=dict)
    matryoshka_dims: tuple = ()

    @classmethod
    def from_heads(cls, head_metadata, source, task=None, flag="--task", any_task=False):
        """The settings a run's contrastive heads trained (their metadata {task: {"family",
        "config"}}: a run's, an export's heads.json, or an export's record as `as_heads`);
        None when no head is contrastive. Tasks that pooled or normalised differently make
        a UserError (give `flag` NAME). matryoshka_dims: every dim one of the tasks
        trained, widest first. any_task: `task` may be one these heads did not train (`mtl
        mine-negatives --task`: the task mined); then theirs apply."""
        heads = contrastive_configs(head_metadata)
        untrained = task is not None and task not in heads
        if task is not None and not (any_task and untrained):
            if untrained:
                raise UserError(f"{source}: {flag} {task}: not a contrastive task of this run; "
                                f"its contrastive tasks: {', '.join(heads) or 'none'}")
            heads = {task: heads[task]}
        if not heads:
            return None
        kinds = {(c["pooling"], c["normalize"]) for c in heads.values()}
        if len(kinds) > 1:
            raise UserError(f"{source}: its contrastive tasks {', '.join(heads)} pool or normalise "
                            + (f"differently and {flag} {task} is none of them: use a model that "
                               f"trained {task}, or one whose tasks agree" if untrained else
                               f"differently: give {flag} NAME (the task whose settings to use)"))
        pooling, normalize = kinds.pop()
        prompts = {name: {side: c[f"{side}_prefix"] for side in SIDES} for name, c in heads.items()}
        dims = sorted({int(d) for c in heads.values() for d in c["matryoshka_dims"] or ()},
                      reverse=True)
        return cls(pooling, normalize, prompts, tuple(dims))

    def replaced(self, pooling=None, normalize=None):
        """These settings with `pooling` / `normalize` asked for instead (None: as they are)."""
        check_pooling(pooling)
        return dataclasses.replace(
            self, pooling=self.pooling if pooling is None else pooling,
            normalize=self.normalize if normalize is None else normalize)

    def described(self):
        """e.g. "mean pooling, not normalised": the words a log line uses."""
        return f"{self.pooling} pooling, " + ("normalised" if self.normalize else "not normalised")

    def to_json(self):
        return {"pooling": self.pooling, "normalize": self.normalize,
                "prompts": {task: dict(sides) for task, sides in self.prompts.items()},
                "matryoshka_dims": list(self.matryoshka_dims)}


def check_pooling(pooling):
    """None (the model's own), or a pooling we compute."""
    if pooling is not None and pooling not in POOLINGS:
        raise UserError(f"--pooling {pooling}: give {' or '.join(POOLINGS)}")


def trained_config(config):
    """A contrastive head's config (or an export's record of one) with TRAINED filling what
    it leaves out (a record written before a key existed)."""
    return {**TRAINED, **{key: config[key] for key in TRAINED if key in config}}


def contrastive_configs(head_metadata, tasks=None):
    """{task: its head's embedding config, TRAINED filling gaps} of the contrastive heads in
    `head_metadata` (of `tasks` only, when given)."""
    return {name: trained_config(meta["config"]) for name, meta in head_metadata.items()
            if meta.get("family", meta.get("type")) == CONTRASTIVE.name
            and (tasks is None or name in tasks)}


def export_record(head_metadata, tasks=None):
    """{task: {TRAINED's keys}} of the contrastive heads: what an export records of the
    sentence embeddings the run trained (empty: it trained none)."""
    return contrastive_configs(head_metadata, tasks)


def as_heads(embedding):
    """An `export_record` as head metadata, what EmbeddingSettings.from_heads reads."""
    return {name: {"family": CONTRASTIVE.name, "config": config}
            for name, config in embedding.items()}
