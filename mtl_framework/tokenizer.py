"""bert4keras-compatible WordPiece tokenizer, backed by HuggingFace `tokenizers` (Rust).

Same ids as `bert4keras.tokenizers.Tokenizer(vocab, do_lower_case=True)`:
Chinese characters and punctuation split one per token, WordPiece (`##`) for
the rest, lower-casing with accents stripped (NFD, drop Mn), control
characters dropped. Adds what span tasks need: character offsets per token.
"""
from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tokenizers import Regex, normalizers, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer
from tokenizers.models import WordPiece

from mtl_framework.errors import UserError

if TYPE_CHECKING:
    import os
    from collections.abc import Iterable

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# bert4keras's _is_space (\t \n \r and Unicode Zs) become spaces; Cc/Cf controls and
# U+FFFD are dropped. Spaces first: \t \n \r are themselves Cc.
BERT4KERAS_SPACES = Regex(r"[\t\n\r\p{Zs}]")
BERT4KERAS_CONTROLS = Regex(r"[\p{Cc}\p{Cf}\x{fffd}]")


class VocabError(UserError, ValueError):
    """A vocab.txt that cannot be used (not UTF-8, no special tokens): one line."""


def load_vocab(path):
    """token -> id from a bert4keras/BERT vocab.txt (first field of each line)."""
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


def bert4keras_normalizer(lowercase=True):
    steps = [normalizers.Replace(BERT4KERAS_SPACES, " "), normalizers.Replace(BERT4KERAS_CONTROLS, "")]
    # clean_text=False: HF's own cleaning also drops private-use and unassigned
    # characters, which bert4keras keeps (they become [UNK]).
    steps.append(normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                            strip_accents=lowercase, lowercase=lowercase))
    return normalizers.Sequence(steps)


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
