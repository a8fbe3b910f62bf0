"""What DuReader robust's and checklist's evaluate.py share (LIC 2020 / LIC 2021).

A text is lower-cased and the scripts' punctuation removed (whitespace is kept);
Chinese characters (the CJK blocks of BERT's tokenizer) and "=" are tokens of their
own, every run of other characters (spaces included) is one token. EM: equal
normalised texts; F1: longest common substring of the tokens, best over the answers.
"""
from mtl_framework.scoring.scorers.lcs import lcs_f1

# The scripts' list; its "……" (two characters) never equals one character.
PUNCTUATION = set(":_`，。：？！()“”；’《》·、,「」（）－～『』|")
CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
       (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def normalize(text):
    return "".join(c for c in text.lower() if c not in PUNCTUATION)


def tokens(text):
    out, run = [], ""
    for char in text:
        if char == "=" or any(low <= ord(char) <= high for low, high in CJK):
            if run:
                out.append(run)
                run = ""
            out.append(char)
        else:
            run += char
    return out + [run] if run else out


def f1(answers, prediction):
    """Best over the answers of the scripts' LCS F1 (find_lcs: scorers/lcs.py)."""
    predicted = tokens(normalize(prediction))
    return max([0.0] + [lcs_f1(tokens(normalize(a)), predicted) for a in answers])


def em(answers, prediction):
    return float(any(normalize(a) == normalize(prediction) for a in answers))


def figures(em_sum, f1_sum, total, skip):
    em_score, f1_score = (em_sum / total, f1_sum / total) if total else (0.0, 0.0)
    return {"f1": f1_score, "em": em_score, "total": total, "skip": skip}
