"""Numbers a user wrote, as floats, without an exception that is not a FormatError.

YAML and the command line hand over integers of any size: ``float(10**309)`` raises
OverflowError, and ``math.isfinite(10**309)`` too, which the command line would show as a
traceback.  Every place that turns a user's number into a float goes through here:

    finite_float(value, source, field)   a finite float; an int beyond the float range, inf and
                                         NaN are a FormatError naming source and field
    as_float(value, source, field)       the same, but inf and NaN pass (for settings whose own
                                         check says what infinity means there)
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .validate import fail

_NUMBER_TYPES = (int, float, np.integer, np.floating)


def as_float(value: Any, source: str, field: str) -> float:
    """An int or float (not a bool) as a float; an int too large for a float is a FormatError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _NUMBER_TYPES):
        raise fail(source, field, f"expected a number, got {short_repr(value)}")
    try:
        return float(value)
    except OverflowError:
        raise fail(source, field, f"{short_repr(value)} is beyond the range of a float (about 1.8e308)") from None


def finite_float(value: Any, source: str, field: str) -> float:
    """An int or float (not a bool) as a finite float: inf, NaN and an int beyond the float range
    are a FormatError naming source and field."""
    result = as_float(value, source, field)
    if not math.isfinite(result):
        raise fail(source, field, f"must be a finite number, got {short_repr(value)}")
    return result


def short_repr(value: Any, limit: int = 40) -> str:
    """A value for a message: an int of hundreds of digits by its first digits and its length
    (repr of an int of more than 4300 digits raises ValueError)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        digits = len(str(abs(value))) if value.bit_length() < 14000 else None
        size = f"{digits} digits" if digits is not None else f"{value.bit_length()} bits"
        return f"an integer of {size}"
    text = repr(value)
    return text if len(text) <= limit + 40 else text[:limit + 40] + "..."
