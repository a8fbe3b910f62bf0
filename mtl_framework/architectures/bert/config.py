"""BERT's and ALBERT's config files (Google's bert_config.json / albert_config.json,
transformers' config.json: the same key names) <-> our backbone config.

Every key is mapped, checked against the one value we compute, or known to be
irrelevant to the encoder's outputs (pooler, initialisation, bookkeeping); any other
key is refused, naming the file and the key: a silently ignored key would load a
different model."""
from mtl_framework.errors import UserError
from mtl_framework.formats.checks import BERT_CONFIG_KEYS, BOOKKEEPING, check_keys, check_values

# their key -> ours
MAPPED = {**BERT_CONFIG_KEYS, "hidden_act": "activation"}
# their hidden_act -> our activation (transformers' ACT2FN meanings)
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_approximate",
               "gelu_pytorch_tanh": "gelu_approximate", "relu": "relu",
               "gelu_tanh": "gelu_approximate"}  # the last: bert4keras's name
# keys that must hold this value (what our encoder computes)
FIXED = {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False,
         "num_hidden_groups": 1, "inner_group_num": 1, "net_structure_type": 0, "gap_size": 0,
         "num_memory_blocks": 0, "down_scale_factor": 1, "ln_type": "postln"}
ALBERT_ONLY = ("embedding_size", "num_hidden_groups", "inner_group_num", "net_structure_type",
               "gap_size", "num_memory_blocks", "down_scale_factor", "ln_type")
# keys that do not change the encoder's outputs: transformers' (formats/checks.py) and
# those of Google's bert_config.json and of older releases
IGNORED = BOOKKEEPING | {
    "directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
    "pooler_size_per_head", "pooler_type", "vocab_type", "layer_norm_type"}


def config_from_json(raw, source, architecture):
    """Our config (architecture, dims, activation, dropout) from a bert/albert config dict;
    UserError naming `source` and the first key it cannot hold, or whose value is of the
    wrong type or range (formats/checks.py)."""
    check_values(raw, MAPPED, source, {"hidden_act": tuple(ACTIVATIONS)})
    for key, value in raw.items():
        if key in ALBERT_ONLY and architecture != "albert" and key != "embedding_size":
            raise UserError(f"{source}: key {key!r} is ALBERT's; this folder is read as "
                            f"{architecture}")
        if key in FIXED and value != FIXED[key] and not (key == "ln_type" and value is None):
            raise UserError(f"{source}: {key} is {value!r}; mtl_framework's {architecture} "
                            f"supports {FIXED[key]!r} only")
    check_keys(raw, {*MAPPED, *FIXED, *IGNORED}, source, architecture)
    missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                           "num_attention_heads") if raw.get(k) is None]
    if missing:
        raise UserError(f"{source}: missing {', '.join(missing)}")
    act = raw.get("hidden_act", "gelu")
    if act not in ACTIVATIONS:
        raise UserError(f"{source}: hidden_act {act!r} is not supported; mtl_framework has "
                        f"{', '.join(ACTIVATIONS)}")
    config = {ours: raw[theirs] for theirs, ours in MAPPED.items() if raw.get(theirs) is not None}
    config["activation"] = ACTIVATIONS[act]
    config["architecture"] = architecture
    if architecture == "bert" and config.get("embedding_size") not in (None, config["hidden_size"]):
        raise UserError(f"{source}: embedding_size {config['embedding_size']} != hidden_size "
                        f"{config['hidden_size']}: a factorised embedding is ALBERT's")
    config.pop("embedding_size", None) if architecture == "bert" else None
    return config


def json_from_config(config):
    """The bert_config.json / config.json keys of our config (Google's and transformers'
    names; transformers adds model_type and architectures)."""
    if config["head_size"] * config["num_heads"] != config["hidden_size"]:
        raise UserError(f"head_size {config['head_size']} x num_heads {config['num_heads']} != "
                        f"hidden_size {config['hidden_size']}: BERT's config files cannot say so")
    theirs = {theirs: config[ours] for theirs, ours in MAPPED.items() if ours in config}
    theirs["hidden_act"] = {"gelu": "gelu", "gelu_approximate": "gelu_new",
                            "relu": "relu"}[config["activation"]]
    return theirs
