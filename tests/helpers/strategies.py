"""Hypothesis strategies shared by the property-based tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
"""Any JSON value: scalars, and lists and objects of them, a few levels deep."""
