"""ALBERT as transformers keeps it: config.json (model_type albert) + model.safetensors
or pytorch_model.bin. Names: bert/weights.py's ALBERT_TRANSFORMERS (AlbertModel's
state dict; an `albert.` prefix accepted)."""
from mtl_framework.architectures.bert import transformers as bert
from mtl_framework.architectures.bert.weights import ALBERT_TRANSFORMERS

CONFIG_FILE = bert.CONFIG_FILE
CARD_USE = bert.CARD_USE

# transformers' AlbertConfig defaults (hidden_act gelu_new: the tanh GELU)
DEFAULTS = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096,
            "num_hidden_layers": 12, "num_attention_heads": 64, "intermediate_size": 16384,
            "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0,
            "attention_probs_dropout_prob": 0.0, "max_position_embeddings": 512,
            "type_vocab_size": 2, "layer_norm_eps": 1e-12}
FOLDER = bert.TransformersFolder("albert", ALBERT_TRANSFORMERS, "albert.", DEFAULTS)
detect, read_config, load_weights = FOLDER.detect, FOLDER.read_config, FOLDER.load_weights
trained_length, check, save = bert.trained_length, bert.check, bert.save
