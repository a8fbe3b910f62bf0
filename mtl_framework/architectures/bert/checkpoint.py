"""BERT in Google's TF checkpoint release layout, what bert4keras loads with
model="bert": bert_config.json + bert_model.ckpt.* (or model.ckpt-N.*) + vocab.txt,
as Google's Chinese BERT and HFL's RoBERTa-wwm-ext / MacBERT are published.
Variable names: bert/weights.py's BERT_CHECKPOINT (kernels [in, out])."""
import glob
import json
import os
import re
import shutil

from mtl_framework.architectures.bert.config import config_from_json, json_from_config
from mtl_framework.architectures.bert.weights import BERT_CHECKPOINT, arrays, assign
from mtl_framework.errors import UserError
from mtl_framework.formats.json_file import read_json

CONFIG_FILE = "bert_config.json"
CARD_USE = ["bert4keras: `build_transformer_model(\"DIR/bert_config.json\", "
            "\"DIR/bert_model.ckpt\", model=\"bert\")`; vocab: DIR/vocab.txt."]


class CheckpointFolder:
    """A TF checkpoint folder of `architecture`: its config file(s) and name table."""

    def __init__(self, architecture, config_files, names, fill=None):
        self.architecture, self.config_files, self.names = architecture, config_files, names
        self.fill = fill  # backbone -> {name: array} for names a release may lack

    def config_file(self, directory):
        for pattern in self.config_files:
            found = sorted(glob.glob(os.path.join(glob.escape(directory), pattern)))
            if found:
                return found[0]
        return None

    def detect(self, directory):
        path = self.config_file(directory)
        if path is None:
            return None
        raw = read_json(path)
        if not isinstance(raw, dict) or raw.get("hidden_act", "gelu") == "relu" \
                and self.architecture == "bert":
            return None  # a RoFormerV2 bert_config.json (roformer_v2/bert4keras.py)
        if checkpoint_prefixes(directory) == []:
            return (f"{os.path.basename(path)} without a TF checkpoint (*.ckpt*.index); copy "
                    "the whole released folder")
        return ""

    def read_config(self, directory):
        path = self.config_file(directory)
        if path is None:
            raise UserError(f"{directory}: no {' or '.join(self.config_files)}")
        return config_from_json(read_json(path), path, self.architecture)

    def load_weights(self, backbone, directory):
        import tensorflow as tf

        prefix = checkpoint_prefix(directory)
        reader = tf.train.load_checkpoint(prefix)
        stored = CheckpointArrays(reader)
        assign(backbone, self.names, stored, prefix, os.path.basename(self.config_file(directory)),
               fill=self.fill(backbone) if self.fill else None)


class CheckpointArrays:
    """{name: array} read from a TF checkpoint on demand (optimizer slots stay unread)."""

    def __init__(self, reader):
        self.reader, self.shapes = reader, reader.get_variable_to_shape_map()

    def get(self, name):
        return self.reader.get_tensor(name) if name in self.shapes else None

    def __iter__(self):
        return iter(self.shapes)

    def __getitem__(self, name):
        return self.reader.get_tensor(name)


def checkpoint_prefixes(directory):
    return sorted(path[:-len(".index")] for path in glob.glob(
        os.path.join(glob.escape(directory), "*.ckpt*.index")))


def checkpoint_prefix(directory):
    """The folder's checkpoint: the only one, or the one its `checkpoint` file names."""
    prefixes = checkpoint_prefixes(directory)
    state = os.path.join(directory, "checkpoint")
    if len(prefixes) > 1 and os.path.exists(state):
        with open(state, encoding="utf-8") as f:
            named = re.search(r'^model_checkpoint_path:\s*"(.*)"', f.read(), re.M)
        if named and os.path.join(directory, os.path.basename(named.group(1))) in prefixes:
            return os.path.join(directory, os.path.basename(named.group(1)))
    if len(prefixes) != 1:
        raise UserError(f"{directory}: {len(prefixes)} TF checkpoints "
                        f"({', '.join(os.path.basename(p) for p in prefixes) or 'none'}); "
                        "keep one (or a `checkpoint` file naming it)")
    return prefixes[0]


def trained_length(directory):
    """Not recorded (max_position_embeddings is the table's size)."""
    return None


def check(config, source):
    """bert_config.json holds every BERT of ours but one whose head size is not hidden /
    heads; bert4keras's ALBERT has no projection when embedding_size == hidden_size."""
    try:
        json_from_config(config)
    except UserError as error:
        raise UserError(f"{source}: {error}; export --format keras") from None
    if config["architecture"] == "albert" and config["embedding_size"] == config["hidden_size"]:
        raise UserError(f"{source}: embedding_size == hidden_size {config['hidden_size']}: "
                        "bert4keras's ALBERT then has no embedding projection, ours has one: "
                        "export --format transformers or keras")


def save(backbone, directory, vocab_path=None, trained_length=None, config_file=CONFIG_FILE,
         checkpoint="bert_model.ckpt", names=BERT_CHECKPOINT):
    """bert_config.json + bert_model.ckpt.* (+ vocab.txt): Google's release layout, what
    bert4keras's build_transformer_model(model="bert") loads (no pooler, no MLM head)."""
    from mtl_framework.architectures.roformer_v2.bert4keras import write_checkpoint

    config = backbone.config
    check(config, directory)
    os.makedirs(directory, exist_ok=True)
    theirs = json_from_config(config)
    if config["activation"] == "gelu_approximate":
        theirs["hidden_act"] = "gelu_tanh"  # bert4keras's name ("gelu" is its erf GELU)
    with open(os.path.join(directory, config_file), "w", encoding="utf-8") as f:
        json.dump(theirs, f, indent=2)
        f.write("\n")
    write_checkpoint(arrays(backbone, names), os.path.join(directory, checkpoint))
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))


FOLDER = CheckpointFolder("bert", (CONFIG_FILE,), BERT_CHECKPOINT)
detect, read_config, load_weights = FOLDER.detect, FOLDER.read_config, FOLDER.load_weights
