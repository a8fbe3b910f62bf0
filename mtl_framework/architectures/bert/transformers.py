"""BERT as transformers keeps it: config.json (model_type bert) + model.safetensors
(read with numpy) or pytorch_model.bin (with torch), the layout of hfl/chinese-roberta-
wwm-ext, hfl/chinese-macbert-base and bert-base-chinese on the hub. Names:
bert/weights.py's BERT_TRANSFORMERS (BertModel's state dict; a `bert.` prefix, as
BertForMaskedLM saves, and the old LayerNorm gamma/beta names are accepted)."""
import json
import os

from mtl_framework.architectures.bert.config import config_from_json
from mtl_framework.architectures.bert.weights import BERT_TRANSFORMERS, assign
from mtl_framework.errors import UserError
from mtl_framework.formats.json_file import read_json
from mtl_framework.formats.torch_files import SAFETENSORS, TORCH_BIN, read_tensors

CONFIG_FILE = "config.json"
CARD_USE = ["transformers: `AutoModel.from_pretrained(DIR)`; vocab: DIR/vocab.txt."]


class TransformersFolder:
    """A transformers folder of `architecture`: its name table, its task models' prefix
    and its config class's defaults (save_pretrained leaves keys at them out)."""

    def __init__(self, architecture, names, prefix, defaults):
        self.architecture, self.names, self.prefix = architecture, names, prefix
        self.defaults = defaults

    def detect(self, directory):
        path = os.path.join(directory, CONFIG_FILE)
        if not os.path.exists(path):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except ValueError:
            return None
        if not isinstance(raw, dict) or raw.get("model_type") != self.architecture:
            return None
        if not any(os.path.exists(os.path.join(directory, f)) for f in (SAFETENSORS, TORCH_BIN)):
            return (f"{CONFIG_FILE} (model_type {self.architecture}) without {SAFETENSORS} or "
                    f"{TORCH_BIN}; copy the whole folder")
        return ""

    def read_config(self, directory):
        path = os.path.join(directory, CONFIG_FILE)
        raw = read_json(path)
        if not isinstance(raw, dict):
            raise UserError(f"{path}: not a JSON object")
        return config_from_json({**self.defaults, **raw}, path, self.architecture)

    def load_weights(self, backbone, directory):
        tensors, source = read_tensors(directory, f"a transformers {self.architecture}")
        assign(backbone, self.names, self.state_dict(tensors), source, CONFIG_FILE)

    def state_dict(self, tensors):
        """BertModel's names: the task model's prefix dropped, old gamma/beta renamed."""
        named = {}
        for name, value in tensors.items():
            name = name[len(self.prefix):] if name.startswith(self.prefix) else name
            if "LayerNorm." in name or "layer_norm." in name:
                name = name.replace(".gamma", ".weight").replace(".beta", ".bias")
            named[name] = value
        return named


def trained_length(directory):
    return None


def check(config, source):
    raise UserError(f"{source}: --format transformers export is not done yet; export "
                    "--format keras")


def save(backbone, directory, vocab_path=None, trained_length=None):
    check(backbone.config, directory)


# transformers' BertConfig defaults
DEFAULTS = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12}
FOLDER = TransformersFolder("bert", BERT_TRANSFORMERS, "bert.", DEFAULTS)
detect, read_config, load_weights = FOLDER.detect, FOLDER.read_config, FOLDER.load_weights
