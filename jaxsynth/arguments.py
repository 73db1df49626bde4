"""The values the command line parses: numbers, lists and names, one way for every option.

Every option of ``jaxsynth`` that takes a number, a list or a name goes through these
``argparse`` types, so a refusal reads ``argument --eps: ...`` (one line, status 2):

* numbers are written in ASCII (``0-9``, a sign, a point, an exponent): Python's
  ``int("١٠")`` is 10, but on a command line such a value is refused;
* numbers are finite and within the option's range (``1e308`` parses, ``1e309`` is
  refused rather than read as infinity); ranges name what the machine can do, and what
  only the running device knows (memory) is checked once it is up;
* a list is comma-separated and has no empty item (``1,,2``, ``1,`` and ``,1`` are
  refused, never read as ``1,2`` or ``1``);
* a name (a mechanism, a data set, a column, a platform) is not empty.

Nothing here loads NumPy or JAX: arguments are refused before the library starts.
"""

from __future__ import annotations

import argparse
import math
import re

_INTEGER = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def short(text: str) -> str:
    """``repr(text)``, cut in the middle when long (a 30-digit number, say)."""
    return repr(text) if len(text) <= 40 else repr(text[:18] + "..." + text[-18:])


def _refuse(what: str, text: str):
    """The refusal of ``text`` where ``what`` was expected (ASCII named when it is the cause)."""
    ascii_note = "" if text.isascii() else " (digits in ASCII, 0-9)"
    return argparse.ArgumentTypeError(f"expected {what}{ascii_note}; got {short(text)}")


def power(value: int) -> str:
    """``2^k`` or ``2^k - 1`` for such values of at least 2^32 (the limits of seeds and
    keys), else the number."""
    for offset, suffix in ((0, ""), (1, " - 1")):
        if value + offset >= 2**32 and (value + offset) & (value + offset - 1) == 0:
            return f"2^{(value + offset).bit_length() - 1}{suffix}"
    return str(value)


def integer(minimum: int | None = None, maximum: int | None = None):
    """An integer of at least ``minimum`` (1: positive, 0: non-negative) and at most
    ``maximum`` (the allowed range is named when a value is outside it); without bounds,
    any integer (the library checks its range, naming the argument)."""
    what = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}")
    if maximum is not None:
        what = f"an integer in {minimum}..{power(maximum)}"

    def parse(text: str) -> int:
        stripped = text.strip()
        if not _INTEGER.fullmatch(stripped):
            raise _refuse(what, text)
        value = int(stripped)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise _refuse(what, text)
        return value

    return parse


def real(what: str, low: float = -math.inf, high: float = math.inf, *,
         closed_high: bool = True):
    """A finite number in ``(low, high]`` (``(low, high)`` without ``closed_high``);
    ``what`` names it in a refusal (``"a positive number"``).  Without bounds, any finite
    number (the library checks its range, naming the argument)."""

    def parse(text: str) -> float:
        stripped = text.strip()
        if stripped.lower().lstrip("+-") in ("inf", "infinity", "nan"):
            raise argparse.ArgumentTypeError(f"expected {what}, finite; got {short(text)}")
        if not _REAL.fullmatch(stripped):
            raise _refuse(what, text)
        value = float(stripped)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(
                f"expected {what}; got {short(text)}, beyond the largest float64 (~1.8e308)")
        if not (value > low and (value <= high if closed_high else value < high)):
            raise _refuse(what, text)
        return value

    return parse


def nonempty(text: str) -> str:
    """A name that is not empty (surrounding spaces dropped)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a name; got {text!r}")
    return text.strip()


def listed(parse, what: str):
    """A comma-separated list of ``what``, each item through ``parse``, none empty."""

    def values(text: str) -> list:
        items = text.split(",")
        if any(not item.strip() for item in items):
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}; got {short(text)} (empty items are not "
                "allowed)")
        try:
            return [parse(item) for item in items]
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(
                f"{exc}" + ("" if len(items) == 1 else f" in {short(text)}")) from None

    return values


names = listed(nonempty, "names")
