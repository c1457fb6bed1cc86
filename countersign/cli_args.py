"""The value types of the `countersign` command's flags (argparse `type=`): each returns the value or
raises `argparse.ArgumentTypeError`, which argparse prints as one line, exit 2."""

from __future__ import annotations

import argparse


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value
