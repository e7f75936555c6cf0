"""Where a value sits in a step's long lists (a history is a thousand elements): searched with
list.index, in C, since what is looked for is rare."""
from __future__ import annotations


def positions(values: list, value) -> list:
    """The indices of the items of values that are value (or equal to it), in order."""
    out, i = [], -1
    try:
        while True:
            i = values.index(value, i + 1)
            out.append(i)
    except ValueError:
        return out
