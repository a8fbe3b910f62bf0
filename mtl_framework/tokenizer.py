"""bert4keras-compatible WordPiece tokenizer, backed by HuggingFace `tokenizers` (Rust).

Same ids as `bert4keras.tokenizers.Tokenizer(vocab, do_lower_case=True)`:
Chinese characters and punctuation split one per token, WordPiece (`##`) for
the rest, lower-casing with accents stripped (NFD, drop Mn), control
characters dropped. Adds what span tasks need: character offsets per token.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenizers import Regex, normalizers, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer
from tokenizers.models import WordPiece

from mtl_framework.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Iterable

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# bert4keras's _is_space (\t \n \r and Unicode Zs) become spaces; Cc/Cf controls and
# U+FFFD are dropped. Spaces first: \t \n \r are themselves Cc.
BERT4KERAS_SPACES = Regex(r"[\t\n\r\p{Zs}]")
BERT4KERAS_CONTROLS = Regex(r"[\p{Cc}\p{Cf}\x{fffd}]")


class VocabError(UserError, ValueError):
    """A vocab.txt that cannot be used (not UTF-8, no special tokens): one line."""


def load_vocab(path):
    """token -> id from a bert4keras/BERT vocab.txt (first field of each line), or from a
    `tokenizer.json` (`tokenizer_json_vocab`)."""
    if is_tokenizer_json(path):
        return tokenizer_json_vocab(path)
    vocab = {}
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise VocabError(f"{path}:{number}: not UTF-8 ({error.reason} at byte "
                                 f"{error.start}): a damaged vocab; use the vocab.txt the "
                                 "weights were trained with") from None
            if number == 1 and line.startswith("\ufeff"):
                raise VocabError(f"{path}:1: starts with a byte-order mark (U+FEFF), which would "
                                 "become part of the first token: save the file as UTF-8 "
                                 "without BOM")
            if "\r" in line.rstrip("\r\n"):
                raise VocabError(f"{path}:{number}: lines end in a lone CR (\\r, old Mac "
                                 "style): convert the line ends to \\n (e.g. `tr '\\r' "
                                 "'\\n'`)")
            fields = line.split()
            token = fields[0] if fields else line.strip()
            if token in vocab:  # ids are line numbers: a repeat shifts every later token
                raise VocabError(f"{path}:{number}: token {token!r} given twice (first on line "
                                 f"{vocab[token] + 1}); every line is an embedding row, so "
                                 "exports would disagree on the ids after it: delete one "
                                 "(on a trained vocab: the weights were trained with this file)")
            vocab[token] = len(vocab)
    return vocab


# ------------------------------------------------------------- tokenizer.json

TOKENIZER_JSON = "tokenizer.json"  # what transformers 5's save_pretrained writes, no vocab.txt
# What tokenizer.json's BertNormalizer must say for our tokenizer to give the ids it gives
# (strip_accents None: as lowercase). clean_text drops controls and makes \t \n \r spaces, as
# ours does (it also drops private-use and unassigned characters, which ours makes [UNK]:
# the same as reading that model's vocab.txt).
BERT_NORMALIZER = {"clean_text": (True, "ours drops control characters and reads \\t \\n \\r "
                                  "as spaces"),
                   "handle_chinese_chars": (True, "ours makes each CJK character a token"),
                   "lowercase": (True, "ours lower-cases (a cased model's ids would differ)"),
                   "strip_accents": (True, "ours strips accents when lower-casing")}
WORDPIECE = {"type": "WordPiece", "continuing_subword_prefix": "##", "unk_token": "[UNK]"}
MISMATCH_FIX = ("this project tokenizes as BERT's uncased BertTokenizer; start from a model "
                "tokenized that way (or, accepting the difference, set it so in a copy of the "
                "folder)")


def is_tokenizer_json(path):
    return os.path.basename(str(path)) == TOKENIZER_JSON


def read_tokenizer_json(path):
    """The tokenizers library's file as a dict; None for another library's tokenizer.json
    (keras-hub's preset names its tokenizer config so: it holds no `model`)."""
    import json

    try:
        with open(path, "rb") as f:
            data = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise VocabError(f"{path}: not a JSON file ({error}): a damaged tokenizer.json; "
                         "save the tokenizer again") from None
    return data if isinstance(data, dict) and isinstance(data.get("model"), dict) else None


def tokenizer_json_vocab(path):
    """token -> id of a tokenizer.json (transformers 5's `save_pretrained`, the tokenizers
    library): its WordPiece `model.vocab`, once its model, normalizer and pre-tokenizer are
    checked to split text as ours does (one VocabError naming the field where they differ)."""
    data = read_tokenizer_json(path)
    if data is None:
        raise VocabError(f"{path}: no `model` (not a tokenizers library tokenizer.json): give "
                         "the model's vocab.txt")
    vocab = wordpiece_vocab(path, data)
    for problem in (_normalizer_difference(data.get("normalizer")),
                    _pre_tokenizer_difference(data.get("pre_tokenizer"))):
        if problem:
            raise VocabError(f"{path}: {problem}: {MISMATCH_FIX}")
    return vocab


def wordpiece_vocab(path, data):
    """token -> id of a tokenizer.json's WordPiece model, ids 0..N-1 (the lines of the
    vocab.txt it stands for), its added tokens among them."""
    model = data["model"]
    for key, expected in WORDPIECE.items():
        if model.get(key) != expected:
            raise VocabError(f"{path}: model.{key} is {model.get(key)!r}, not {expected!r}: "
                             "this project reads BERT's WordPiece vocabs only (ALBERT's "
                             "sentencepiece is not one); give a WordPiece model")
    raw = model.get("vocab")
    if not isinstance(raw, dict) or not all(isinstance(t, str) and type(i) is int
                                            for t, i in raw.items()):
        raise VocabError(f"{path}: model.vocab is not a token -> id object: a damaged "
                         "tokenizer.json; save the tokenizer again")
    by_id = {i: t for t, i in raw.items()}
    missing = next((i for i in range(len(raw)) if i not in by_id), None)
    if missing is not None:
        raise VocabError(f"{path}: model.vocab has no token with id {missing} (ids must be 0 to "
                         f"{len(raw) - 1}, one row of the embedding table each): a damaged "
                         "tokenizer.json; save the tokenizer again")
    odd = next((t for t in raw if not t or t != t.strip() or len(t.split()) != 1), None)
    if odd is not None:
        raise VocabError(f"{path}: model.vocab token {odd!r} (id {raw[odd]}) is empty or holds "
                         "whitespace, which no vocab.txt line can hold: give the model's vocab.txt")
    for added in data.get("added_tokens") or []:
        token, number = added.get("content"), added.get("id")
        if by_id.get(number) != token:  # a token added past model.vocab: a row ours lacks
            raise VocabError(f"{path}: added_tokens holds {token!r} as id {number}, but "
                             f"model.vocab ({len(raw)} tokens) has {by_id.get(number)!r} there: "
                             "give a vocab.txt with every token in id order")
    return {by_id[i]: i for i in range(len(raw))}


def _normalizer_difference(normalizer):
    import json

    if normalizer == _own_json()["normalizer"]:  # a tokenizer.json of our own Tokenizer
        return None
    kind = normalizer.get("type") if isinstance(normalizer, dict) else None
    if kind != "BertNormalizer":
        return f"normalizer.type is {kind!r}, not 'BertNormalizer' (ours: lower-case, strip " \
               "accents, a token per CJK character, controls dropped)"
    for key, (expected, ours) in BERT_NORMALIZER.items():
        value = normalizer.get(key)
        if key == "strip_accents" and value is None:
            value = normalizer.get("lowercase")
        if value is not expected:
            return f"normalizer.{key} is {json.dumps(normalizer.get(key))}; {ours}"
    return None


def _pre_tokenizer_difference(pre_tokenizer):
    if pre_tokenizer == _own_json()["pre_tokenizer"]:
        return None
    kind = pre_tokenizer.get("type") if isinstance(pre_tokenizer, dict) else None
    return f"pre_tokenizer.type is {kind!r}; ours splits words as 'BertPreTokenizer' " \
           "(whitespace and each punctuation mark)"


def _own_json():
    """Our tokenizer's own normalizer and pre-tokenizer as tokenizer.json writes them."""
    import json

    rust = RustTokenizer(WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    rust.normalizer, rust.pre_tokenizer = bert4keras_normalizer(), pre_tokenizers.BertPreTokenizer()
    return json.loads(rust.to_str())


def vocab_bytes(path):
    """The bytes of the vocab.txt `path` stands for: the file's own, or a tokenizer.json's
    tokens one a line in id order (what a run keeps as RUN/vocab.txt and records)."""
    if is_tokenizer_json(path):
        vocab = load_vocab(path)
        return "".join(token + "\n" for token in vocab).encode("utf-8")
    with open(path, "rb") as f:
        return f.read()


def bert4keras_normalizer(lowercase=True):
    steps = [normalizers.Replace(BERT4KERAS_SPACES, " "), normalizers.Replace(BERT4KERAS_CONTROLS, "")]
    # clean_text=False: HF's own cleaning also drops private-use and unassigned
    # characters, which bert4keras keeps (they become [UNK]).
    steps.append(normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                            strip_accents=lowercase, lowercase=lowercase))
    return normalizers.Sequence(steps)


def keeps_text(text, lowercase=True):
    """Whether the tokenizer keeps any of `text` (a word, or [UNK]): False for a blank text
    and for one of characters it drops only (U+200B and other format characters, controls
    as \\x00, a lone combining accent), which it reads as the empty text."""
    if not text.strip():
        return False
    return bool(_split_words(lowercase)(text))


@functools.lru_cache(maxsize=2)
def _split_words(lowercase):
    normalizer, pre_tokenizer = bert4keras_normalizer(lowercase), pre_tokenizers.BertPreTokenizer()
    return lambda text: pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))


@dataclass
class Encoding:
    """token_ids/segment_ids with `[CLS] a [SEP] (b [SEP])`; offsets[i] = (start, end)
    of token i in its own text (text for segment 0, text_b for segment 1), (0, 0) for specials."""
    token_ids: list
    segment_ids: list
    offsets: list


class Tokenizer:
    def __init__(self, vocab_path: str | os.PathLike[str], lowercase: bool = True,
                 max_chars_per_word: int = 200) -> None:
        self.vocab_path = vocab_path
        self.vocab = load_vocab(vocab_path)
        missing = [t for t in SPECIAL_TOKENS if t not in self.vocab]
        if missing:
            raise VocabError(f"{vocab_path}: missing special tokens {missing}; a bert4keras vocab "
                             "starts with [PAD] (id 0), [UNK], [CLS], [SEP], [MASK]")
        if self.vocab["[PAD]"] != 0:
            raise ValueError(f"{vocab_path}: [PAD] must be id 0 (padding masks token id 0)")
        self.inverse_vocab = {i: t for t, i in self.vocab.items()}
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            self.vocab[t] for t in SPECIAL_TOKENS)
        self._rust = RustTokenizer(WordPiece(self.vocab, unk_token="[UNK]",
                                             max_input_chars_per_word=max_chars_per_word))
        self._rust.normalizer = bert4keras_normalizer(lowercase)
        self._rust.pre_tokenizer = pre_tokenizers.BertPreTokenizer()

    @property
    def vocab_size(self):
        return len(self.vocab)

    def fingerprint(self):
        """sha256 of the whole tokenizer (vocab, normalizer, WordPiece settings): the
        part of a features cache key that says which tokenizer made the features."""
        return hashlib.sha256(self._rust.to_str().encode("utf-8")).hexdigest()

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of `text`, without [CLS]/[SEP]."""
        return self._rust.encode(text, add_special_tokens=False).tokens

    def token_to_id(self, token: str) -> int:
        return self.vocab.get(token, self.unk_id)

    def id_to_token(self, token_id: int) -> str:
        return self.inverse_vocab[token_id]

    def decode(self, token_ids: Iterable[int]) -> str:
        """Readable text: specials dropped, `##` pieces joined, CJK without spaces."""
        tokens = [self.inverse_vocab[i] for i in token_ids if i not in
                  (self.pad_id, self.cls_id, self.sep_id, self.mask_id)]
        return _join_pieces(tokens)

    def encode(self, text: str, text_b: str | None = None,
               max_length: int | None = None) -> tuple[list[int], list[int]]:
        """(token_ids, segment_ids), truncated exactly as bert4keras's `encode(maxlen=...)`."""
        encoding = self.encode_with_offsets(text, text_b, max_length)
        return encoding.token_ids, encoding.segment_ids

    def encode_with_offsets(self, text: str, text_b: str | None = None,
                            max_length: int | None = None) -> Encoding:
        first = self._rust.encode(text, add_special_tokens=False)
        second = self._rust.encode(text_b, add_special_tokens=False) if text_b is not None else None
        return self._assemble(first, second, max_length)

    def encode_batch(self, texts: Iterable[str], texts_b: Iterable[str] | None = None,
                     max_length: int | None = None) -> list[Encoding]:
        """Encodings for many texts at once (Rust, parallel); same results as `encode_with_offsets`."""
        firsts = self._rust.encode_batch(list(texts), add_special_tokens=False)
        if texts_b is None:
            return [self._assemble(f, None, max_length) for f in firsts]
        seconds = self._rust.encode_batch(list(texts_b), add_special_tokens=False)
        return [self._assemble(f, s, max_length) for f, s in zip(firsts, seconds)]

    def _assemble(self, first, second, max_length):
        a = [[self.cls_id, (0, 0)], *map(list, zip(first.ids, first.offsets)), [self.sep_id, (0, 0)]]
        b = None
        if second is not None:
            b = [[self.cls_id, (0, 0)], *map(list, zip(second.ids, second.offsets)),
                 [self.sep_id, (0, 0)]]
        if max_length is not None:
            # bert4keras: pairs get maxlen + 1 because b's [CLS] is dropped afterwards.
            truncate_sequences(max_length + (b is not None), -2, a, b)
        if b is not None:
            b = b[1:]
        pieces = a + (b or [])
        token_ids = [p[0] for p in pieces]
        offsets = [tuple(p[1]) for p in pieces]
        segment_ids = [0] * len(a) + [1] * len(b or [])
        return Encoding(token_ids, segment_ids, offsets)


def truncate_sequences(max_length, index, *sequences):
    """bert4keras's rule: pop `index` from the longest sequence (first on ties) until they fit."""
    sequences = [s for s in sequences if s]
    while sum(len(s) for s in sequences) > max_length:
        longest = max(range(len(sequences)), key=lambda i: (len(sequences[i]), -i))
        sequences[longest].pop(index)
    return sequences


def _join_pieces(tokens):
    text = ""
    for token in tokens:
        if token.startswith("##"):
            text += token[2:]
        elif text and (len(token) > 1 or token.isascii()) and text[-1].isascii():
            text += " " + token
        else:
            text += token
    return text


# Character-level vocabularies in bert4keras's vocab.txt layout (what `mtl vocab build` and
# the prepare stage write).
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
    """The texts of a raw corpus line (itself) or of a typed example: the fields its type
    names in TEXTS (data_adapters/examples.py), in that order, each text of a field that
    holds several (choices, negatives). What a vocab counts and the mlm task reads."""
    if isinstance(example, str):
        yield example
        return
    for name in type(example).TEXTS:
        value = getattr(example, name)
        if isinstance(value, str):
            yield value
        elif value is not None:
            yield from value


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
