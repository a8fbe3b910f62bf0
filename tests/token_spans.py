"""An independent oracle for the features' span placement (features.TokenLocator): the
token span covering a character span, found by scanning every token's offsets."""


def char_span_to_token_span(offsets, segment_ids, start, end, segment=0, text=None):
    """Token span (first, last inclusive) covering the half-open char span [start, end) of
    `segment`'s text, or None when part of it is not in the kept tokens (truncated away).

    With `text`, characters no token covers (spaces, dropped controls) do not count
    as lost; without it, the kept tokens must reach both ends of the span.
    """
    first = last = None
    for i, ((s, e), seg) in enumerate(zip(offsets, segment_ids)):
        if seg != segment or s == e or e <= start or s >= end:
            continue
        if first is None:
            first = i
        last = i
    if first is None:
        return None
    kept_start, kept_end = offsets[first][0], offsets[last][1]
    if text is not None:
        outside = text[start:kept_start] + text[kept_end:end]
        return (first, last) if not outside.strip() else None
    return (first, last) if kept_start <= start and kept_end >= end else None
