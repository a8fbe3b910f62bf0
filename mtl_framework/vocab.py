"""Character-level vocabularies in bert4keras's vocab.txt layout.

RoFormerV2's vocabulary is character level: every CJK character and
punctuation mark is a token, and other strings (Latin words, digits) are
spelled out as a first character plus `##`-pieces, so any word made of known
characters tokenizes without [UNK].
"""
import itertools
from collections import Counter

from tokenizers import pre_tokenizers

from mtl_framework.tokenizer import SPECIAL_TOKENS, bert4keras_normalizer


def count_units(texts, lowercase=True, batch=4096):
    """Counts of vocabulary units (a character, or `##` + character inside a word).
    Streams: texts are taken `batch` at a time, and a text repeated in a batch
    (a context shared by several questions) is split once and counted times its repeats."""
    normalizer = bert4keras_normalizer(lowercase)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts = Counter()
    iterator = iter(texts)
    while group := Counter(itertools.islice(iterator, batch)):
        for text, repeats in group.items():
            units = []
            for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)):
                units.append(word[0])
                units.extend("##" + ch for ch in word[1:])
            if repeats == 1:
                counts.update(units)
            else:
                for unit, n in Counter(units).items():
                    counts[unit] += n * repeats
    return counts


def build_vocab(counts, max_size=12000, min_count=1):
    """Special tokens, then units by falling count (ties by code point), at most `max_size` in all."""
    if max_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"max_size {max_size} leaves no room beside {SPECIAL_TOKENS}")
    units = [u for u, c in counts.items() if c >= min_count and u not in SPECIAL_TOKENS]
    units.sort(key=lambda u: (-counts[u], u))
    return SPECIAL_TOKENS + units[: max_size - len(SPECIAL_TOKENS)]


def write_vocab(tokens, path):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in tokens)


def example_texts(example):
    """The raw text fields of a typed example (text, text_b, question, context, choices)."""
    for field in ("text", "text_b", "question", "context"):
        value = getattr(example, field, None)
        if isinstance(value, str):
            yield value
    yield from getattr(example, "choices", None) or []


def read_text_lines(paths):
    """Non-empty lines of plain-text files (UTF-8; a BOM dropped); a file that is not
    UTF-8 is one UserError naming its line, before a vocab is written."""
    from mtl_framework.errors import UserError

    for path in paths:
        number = 0
        try:
            with open(path, encoding="utf-8-sig") as f:
                for number, line in enumerate(f, 1):
                    line = line.strip()
                    if line:
                        yield line
        except UnicodeDecodeError as error:
            raise UserError(f"{path}:{number + 1}: not UTF-8 text ({error.reason}) (--text): "
                            "convert it, e.g. `iconv -f gbk -t utf-8`") from None
