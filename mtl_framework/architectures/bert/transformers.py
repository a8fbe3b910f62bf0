"""BERT as transformers keeps it: config.json (model_type bert) + model.safetensors
(read with numpy) or pytorch_model.bin (with torch), the layout of hfl/chinese-roberta-
wwm-ext, hfl/chinese-macbert-base and bert-base-chinese on the hub, and a
sentence-transformers folder's model (its Transformer module's folder, the root or
0_Transformer/: formats/sentence_transformers.py's transformer_folder). Names:
bert/weights.py's BERT_TRANSFORMERS (BertModel's state dict; a `bert.` prefix, as
BertForMaskedLM saves, and the old LayerNorm gamma/beta names are accepted)."""
import json
import os
import shutil

import numpy as np

from mtl_framework.architectures.bert.config import config_from_json, json_from_config
from mtl_framework.architectures.bert.weights import (
    BERT_TRANSFORMERS,
    arrays,
    assign,
    transformers_names,
)
from mtl_framework.errors import UserError
from mtl_framework.files import usual_mode
from mtl_framework.formats import sentence_transformers
from mtl_framework.formats.json_file import read_json
from mtl_framework.formats.torch_files import SAFETENSORS, TORCH_BIN, has_weights, read_tensors

CONFIG_FILE = "config.json"
CARD_USE = [
    "```python", "from transformers import AutoModel, AutoTokenizer",
    "tokenizer = AutoTokenizer.from_pretrained(DIR)  # BertTokenizerFast, lower-cased",
    "model = AutoModel.from_pretrained(DIR).eval()",
    "ids = tokenizer([\"今天天气不错\", \"你好\"], padding=True, return_tensors=\"pt\")",
    "hidden = model(**ids).last_hidden_state", "```", "",
    "Mainline `transformers`, no other package. `pooler_output` is zero (this encoder was "
    "trained without BERT's pooler): pool `last_hidden_state` (sentence embeddings: below)."]


class TransformersFolder:
    """A transformers folder of `architecture`: its name table, its task models' prefix
    and its config class's defaults (save_pretrained leaves keys at them out)."""

    def __init__(self, architecture, names, prefix, defaults):
        self.architecture, self.names, self.prefix = architecture, names, prefix
        self.defaults = defaults

    def detect(self, directory):
        directory = sentence_transformers.transformer_folder(directory)
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
        if not has_weights(directory):
            return (f"{CONFIG_FILE} (model_type {self.architecture}) without {SAFETENSORS} or "
                    f"{TORCH_BIN}; copy the whole folder")
        return ""

    def read_config(self, directory):
        path = os.path.join(sentence_transformers.transformer_folder(directory), CONFIG_FILE)
        raw = read_json(path)
        if not isinstance(raw, dict):
            raise UserError(f"{path}: not a JSON object")
        return config_from_json({**self.defaults, **raw}, path, self.architecture)

    def load_weights(self, backbone, directory):
        tensors, source = read_tensors(sentence_transformers.transformer_folder(directory),
                                       f"a transformers {self.architecture}")
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
    """sentence_bert_config.json's max_seq_length, where the folder has one."""
    return sentence_transformers.folder_length(directory)


def check(config, source):
    """transformers' config holds every BERT / ALBERT of ours but one whose head size is
    not hidden / heads (json_from_config refuses it)."""
    try:
        json_from_config(config)
    except UserError as error:
        raise UserError(f"{source}: {error}; export --format keras") from None


def hf_config(config, trained_length=None):
    """config.json of BertModel / AlbertModel (one group, one inner layer for ALBERT)."""
    architecture = config["architecture"]
    hf = {"architectures": [MODELS[architecture]], "model_type": architecture,
          **json_from_config(config), "pad_token_id": 0, "position_embedding_type": "absolute",
          "torch_dtype": "float32"}
    hf["type_vocab_size"] = max(1, config["segment_vocab_size"])  # 0: one all-zero row
    if architecture == "albert":
        # albert_zh ships a BERT vocab.txt: without this AutoTokenizer picks sentencepiece
        hf.update(num_hidden_groups=1, inner_group_num=1, tokenizer_class="BertTokenizer")
    return hf


def torch_arrays(backbone):
    """{BertModel / AlbertModel name: float32 array}: the backbone's weights, a zero
    token-type row where it has none, and a zero pooler (we train no pooler: pooler_output
    is 0, and from_pretrained initialises nothing at random)."""
    weights = arrays(backbone, transformers_names(backbone))
    hidden = backbone.config["hidden_size"]
    if backbone.segment_embedding is None:
        width = backbone.config.get("embedding_size", hidden)
        weights["embeddings.token_type_embeddings.weight"] = np.zeros((1, width), "float32")
    pooler = POOLERS[backbone.config["architecture"]]
    weights[pooler + ".weight"] = np.zeros((hidden, hidden), "float32")
    weights[pooler + ".bias"] = np.zeros(hidden, "float32")
    return weights


def save(backbone, directory, vocab_path=None, trained_length=None, embedding=None):
    """config.json + model.safetensors (written with numpy) + the tokenizer files
    (vocab.txt, tokenizer_config.json, special_tokens_map.json: AutoTokenizer gives a
    BertTokenizerFast with our ids) + sentence-transformers' modules: `embedding`'s
    pooling, normalisation and prompts (formats/sentence_transformers.py's
    export_settings), mean pooling without it."""
    from safetensors.numpy import save_file

    config = backbone.config
    check(config, directory)
    os.makedirs(directory, exist_ok=True)
    write_json(os.path.join(directory, CONFIG_FILE), hf_config(config))
    # metadata format=pt: transformers refuses a safetensors file without it
    save_file(torch_arrays(backbone), os.path.join(directory, SAFETENSORS),
              metadata={"format": "pt"})
    usual_mode(os.path.join(directory, SAFETENSORS))  # safetensors writes it 0600
    length = min(trained_length or config["max_positions"], config["max_positions"])
    if vocab_path is not None:
        shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))
        # our tokenizer (tokenizer.py): BERT's, lower-cased with accents stripped
        write_json(os.path.join(directory, "tokenizer_config.json"), {
            "tokenizer_class": "BertTokenizer", "do_lower_case": True,
            "tokenize_chinese_chars": True, "strip_accents": None, "model_max_length": length,
            **SPECIAL_TOKENS})
        write_json(os.path.join(directory, "special_tokens_map.json"), SPECIAL_TOKENS)
    sentence_transformers.write(directory, config["hidden_size"], length, embedding)


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, ensure_ascii=False)
        f.write("\n")


MODELS = {"bert": "BertModel", "albert": "AlbertModel"}
POOLERS = {"bert": "pooler.dense", "albert": "pooler"}
SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                  "cls_token": "[CLS]", "mask_token": "[MASK]"}

# transformers' BertConfig defaults
DEFAULTS = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
            "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
            "max_position_embeddings": 512, "type_vocab_size": 2, "layer_norm_eps": 1e-12}
FOLDER = TransformersFolder("bert", BERT_TRANSFORMERS, "bert.", DEFAULTS)
detect, read_config, load_weights = FOLDER.detect, FOLDER.read_config, FOLDER.load_weights
