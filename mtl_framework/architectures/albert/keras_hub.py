"""ALBERT as a keras-hub preset (`keras_hub.models.AlbertBackbone`), read through
keras-hub; one group, one inner layer (bert/keras_hub.py does the reading)."""
from mtl_framework.architectures.bert import keras_hub as bert

CONFIG_FILE = bert.CONFIG_FILE
CARD_USE = [line.replace("BertBackbone", "AlbertBackbone") for line in bert.CARD_USE]

PRESET = bert.KerasHubPreset("albert", "AlbertBackbone", {
    **bert.PRESET.keys, "embedding_dim": "embedding_size", "num_groups": 1,
    "num_inner_repetitions": 1})
detect, read_config, load_weights = PRESET.detect, PRESET.read_config, PRESET.load_weights
trained_length, check, save = bert.trained_length, bert.check, bert.save
