"""What every backbone-folder reader checks before it builds (issue 44), one table for all
of them: BERT's and ALBERT's config files (Google's, transformers', keras-hub's),
RoFormerV2's (roformer, bert4keras) and our own preset.

A reader maps its file's keys to ours (`names`: their key -> our key); the rule is ours,
the message names their key and the file. Then, while it copies weights, every tensor it
reads must be finite, and a tensor of the encoder that it does not read (the config
declares one layer, the file holds two) is refused: either would load another model
than the one the files describe, silently.
No Keras or TensorFlow here (plan.py reads configs before either is imported)."""
import math

import numpy as np

from mtl_framework.errors import UserError

# our config key -> the least integer it may be
INTEGERS = {"vocab_size": 1, "num_layers": 1, "hidden_size": 1, "num_heads": 1,
            "intermediate_size": 1, "head_size": 1, "embedding_size": 1, "max_positions": 1,
            "segment_vocab_size": 0}
FRACTIONS = ("dropout", "attention_dropout")  # a probability of dropping: in [0, 1)
POSITIVE = ("layer_norm_epsilon",)            # a finite number > 0

# Keys of transformers' PretrainedConfig (4.x and 5.x) and its model configs that
# cannot change an encoder's outputs: bookkeeping, generation, fine-tuning heads, the
# pooler, initialisation, how outputs are returned. (`dtype` is transformers 5's
# `torch_dtype`; the weights' own dtype is what is read.)
BOOKKEEPING = {
    "architectures", "model_type", "transformers_version", "_name_or_path", "name_or_path",
    "_commit_hash", "torch_dtype", "dtype", "use_bfloat16", "torchscript", "tf_legacy_loss",
    "_attn_implementation", "_attn_implementation_autoset", "attn_implementation",
    "_experts_implementation", "initializer_range", "use_cache", "output_past",
    "output_attentions", "output_hidden_states", "output_scores", "return_dict",
    "use_return_dict", "return_dict_in_generate", "chunk_size_feed_forward",
    "gradient_checkpointing", "tie_word_embeddings", "tie_encoder_decoder",
    "is_encoder_decoder", "cross_attention_hidden_size", "pad_token_id", "bos_token_id",
    "eos_token_id", "sep_token_id", "decoder_start_token_id", "tokenizer_class", "prefix",
    "task_specific_params", "finetuning_task", "problem_type", "id2label", "label2id",
    "num_labels", "classifier_dropout", "classifier_dropout_prob", "pruned_heads",
    # generation settings older transformers wrote into every config.json
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens"}
# Keys that change the model when not at this value (a decoder, cross-attention, a
# stretched rotary table): refused by every reader.
CHANGES_OUTPUTS = {"is_decoder": False, "add_cross_attention": False, "rope_scaling": None}

# The config keys of BERT-style config files (transformers' config.json, Google's and
# bert4keras's bert_config.json, roformer's config.json) -> our backbone config's names
BERT_CONFIG_KEYS = {
    "vocab_size": "vocab_size", "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size", "embedding_size": "embedding_size",
    "type_vocab_size": "segment_vocab_size", "max_position_embeddings": "max_positions",
    "hidden_dropout_prob": "dropout", "attention_probs_dropout_prob": "attention_dropout",
    "layer_norm_eps": "layer_norm_epsilon"}


def value_problem(ours, value, choices=()):
    """What `value` of our key `ours` must be, or None when it is fine."""
    if ours in INTEGERS:
        if isinstance(value, bool) or not isinstance(value, int) or value < INTEGERS[ours]:
            return f"an integer >= {INTEGERS[ours]}"
    elif ours in FRACTIONS:
        if not number(value) or not 0 <= value < 1:
            return "a number in [0, 1)"
    elif ours in POSITIVE:
        if not number(value) or not value > 0:
            return "a finite number > 0"
    elif choices and (not isinstance(value, str) or value not in choices):
        return f"one of {', '.join(map(repr, choices))}"
    return None


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_values(raw, names, source, choices=None):
    """UserError naming `source` and the key of the first value of `raw` (a reader's config
    dict) that is of the wrong type or out of range. `names`: their key -> our key (the
    rule); `choices`: {their key: the strings it may be} (an activation's name). A value
    null stands for the default and is not checked. Then the head count must divide the
    hidden size (when both are theirs under `names`)."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: not a JSON object")
    for theirs, ours in names.items():
        value = raw.get(theirs)
        if value is None:
            continue
        problem = value_problem(ours, value, (choices or {}).get(theirs, ()))
        if problem:
            raise UserError(f"{source}: {theirs} is {value!r}; it must be {problem}")
    hidden, heads = (next((t for t, o in names.items() if o == key and raw.get(t) is not None),
                          None) for key in ("hidden_size", "num_heads"))
    if hidden and heads and not any(o == "head_size" and raw.get(t) for t, o in names.items()) \
            and raw[hidden] % raw[heads]:
        raise UserError(f"{source}: {hidden} {raw[hidden]} is not a multiple of {heads} "
                        f"{raw[heads]}: use the config file these weights were saved with")


def check_keys(raw, known, source, reader):
    """A key `known` does not hold and BOOKKEEPING does not either is refused (it may
    change the model); so is a CHANGES_OUTPUTS key at another value."""
    for key, value in raw.items():
        if key in CHANGES_OUTPUTS and value != CHANGES_OUTPUTS[key]:
            raise UserError(f"{source}: {key} is {value!r}; mtl_framework's {reader} reader "
                            f"supports {CHANGES_OUTPUTS[key]!r} only (it changes the encoder's "
                            "outputs)")
        if key not in known and key not in BOOKKEEPING and key not in CHANGES_OUTPUTS:
            raise UserError(f"{source}: key {key!r} is not supported by mtl_framework's "
                            f"{reader} reader (it may change the model: remove it only if you "
                            "know it does not)")


def finite(name, value, source):
    """`value` (an array read from `source` under `name`), or a UserError when it holds a
    NaN or an infinity: a model loaded from it computes NaN."""
    value = np.asarray(value)
    if value.dtype.kind == "f" and not np.isfinite(value).all():
        bad = int(value.size - np.isfinite(value).sum())
        raise UserError(f"{source}: tensor {name} holds {bad} NaN or infinite value(s) of "
                        f"{value.size}: the file is damaged; copy or export it again")
    return value


def check_unused(names, used, source, config_file, separator="."):
    """UserError naming the encoder tensors in `names` that the reader did not read
    (`used`): the file holds a model that `config_file` does not describe. A TF
    checkpoint's optimizer slots (`<a used name>/adam_m`, ...) are not tensors of it."""
    unused = sorted(n for n in names if n not in used and n.rsplit(separator, 1)[0] not in used)
    if unused:
        more = f", and {len(unused) - 3} more" if len(unused) > 3 else ""
        raise UserError(f"{source}: {len(unused)} encoder tensor(s) that {config_file} does not "
                        f"declare ({', '.join(unused[:3])}{more}): use the {config_file} these "
                        "weights were saved with")
