"""The longest-common-substring F1 of CMRC 2018's and DuReader's official scripts (their
find_lcs), shared by scorers/cmrc2018.py, scorers/dureader.py and metrics.cmrc_f1: each
tokenizes its own way, then scores the tokens here."""


def lcs_length(a, b):
    """Length of the longest common contiguous run of two token sequences."""
    best, row = 0, [0] * (len(b) + 1)
    for x in a:
        previous, row = row, [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                row[j + 1] = previous[j] + 1
                best = max(best, row[j + 1])
    return best


def lcs_f1(gold, predicted):
    """F1 of the longest common substring's length over the two token lists (0 when none)."""
    common = lcs_length(gold, predicted)
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)
