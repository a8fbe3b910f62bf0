"""nltk.word_tokenize as the CMRC 2018 script ran it (NLTK 3.4.5 on Python 2), without Punkt.

word_tokenize = Punkt sentence splitting, then an "improved" TreebankWordTokenizer per
sentence. NLTK loads Punkt's model from nltk_data, a download, so this is the tokenizer
alone on the whole text (word_tokenize(text, preserve_line=True)): it differs only where
Punkt would end a sentence inside one non-Chinese run of an answer ("hello world. good
bye": Punkt makes "world" "."; here "world."). Measured against the script with NLTK's
English Punkt model in docs/task_specs.md. The regular expressions are NLTK's
(Apache 2.0), compiled as Python 2 compiled them: `\\d`, `\\s`, `\\b` ASCII-only except
where NLTK asked for Unicode.
"""
import re

A = re.ASCII


def _rules(*pairs, flags=A):
    return [(re.compile(p, flags), r) for p, r in pairs]


STARTING_QUOTES = [
    (re.compile("([«“‘„]|[`]+)"), r" \1 "),  # improved_open_quote_regex (re.U)
    *_rules((r'^\"', r"``"), (r"(``)", r" \1 "), (r"([ \(\[{<])(\"|\'{2})", r"\1 `` ")),
    (re.compile(r"(?i)(\')(?!re|ve|ll|m|t|s|d)(\w)\b"), r"\1 \2"),  # improved (re.U)
]
PUNCTUATION = [
    (re.compile(r'([^\.])(\.)([\]\)}>"\'' "»”’ " r"]*)\s*$"), r"\1 \2 \3 "),  # improved (re.U)
    *_rules((r"([:,])([^\d])", r" \1 \2"), (r"([:,])$", r" \1 "), (r"\.\.\.", r" ... "),
            (r"[;@#$%&]", r" \g<0> "),
            (r'([^\.])(\.)([\]\)}>"\']*)\s*$', r"\1 \2\3 "),
            (r"[?!]", r" \g<0> "), (r"([^'])' ", r"\1 ' ")),
]
PARENS_BRACKETS = _rules((r"[\]\[\(\)\{\}\<\>]", r" \g<0> "))
DOUBLE_DASHES = _rules((r"--", r" -- "))
ENDING_QUOTES = [
    (re.compile("([»”’])"), r" \1 "),  # improved_close_quote_regex (re.U)
    *_rules((r'"', " '' "), (r"(\S)(\'\')", r"\1 \2 "),
            (r"([^' ])('[sS]|'[mM]|'[dD]|') ", r"\1 \2 "),
            (r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) ", r"\1 \2 ")),
]
CONTRACTIONS = _rules(*[(p.replace("(?#X)", ""), r" \1 \2 ") for p in (
    r"(?i)\b(can)(?#X)(not)\b", r"(?i)\b(d)(?#X)('ye)\b", r"(?i)\b(gim)(?#X)(me)\b",
    r"(?i)\b(gon)(?#X)(na)\b", r"(?i)\b(got)(?#X)(ta)\b", r"(?i)\b(lem)(?#X)(me)\b",
    r"(?i)\b(mor)(?#X)('n)\b", r"(?i)\b(wan)(?#X)(na)\s",
    r"(?i) ('t)(?#X)(is)\b", r"(?i) ('t)(?#X)(was)\b")])


def word_tokenize(text):
    """The tokens NLTK 3.4.5's word_tokenize(text, preserve_line=True) gives."""
    for rules in (STARTING_QUOTES, PUNCTUATION, PARENS_BRACKETS, DOUBLE_DASHES):
        for pattern, substitution in rules:
            text = pattern.sub(substitution, text)
    text = " " + text + " "
    for rules in (ENDING_QUOTES, CONTRACTIONS):
        for pattern, substitution in rules:
            text = pattern.sub(substitution, text)
    return text.split()
