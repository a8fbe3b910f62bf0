"""ALBERT in Google's TF checkpoint release layout, what bert4keras loads with
model="albert": albert_config.json (albert_zh: albert_config*.json) +
albert_model.ckpt.* / model.ckpt-best.* + vocab.txt. Names: bert/weights.py's
ALBERT_CHECKPOINT (one group, one inner layer)."""
from mtl_framework.architectures.bert import checkpoint as bert
from mtl_framework.architectures.bert.weights import ALBERT_CHECKPOINT, identity_projection

CONFIG_FILE = "albert_config.json"
CARD_USE = ["bert4keras: `build_transformer_model(\"DIR/albert_config.json\", "
            "\"DIR/albert_model.ckpt\", model=\"albert\")`; vocab: DIR/vocab.txt."]

FOLDER = bert.CheckpointFolder(
    "albert", (CONFIG_FILE, "albert_config*.json"), ALBERT_CHECKPOINT,
    fill=lambda backbone: identity_projection(backbone, ALBERT_CHECKPOINT))
detect, read_config, load_weights = FOLDER.detect, FOLDER.read_config, FOLDER.load_weights
trained_length, check = bert.trained_length, bert.check


def save(backbone, directory, vocab_path=None, trained_length=None):
    """albert_config.json + albert_model.ckpt.* (+ vocab.txt): bert4keras model="albert"."""
    bert.save(backbone, directory, vocab_path, config_file=CONFIG_FILE,
              checkpoint="albert_model.ckpt", names=ALBERT_CHECKPOINT)
