"""Helpers shared by op families whose bodies repeat the same steps (QnnOpDef.h Lstm and Gru:
the recurrent ops' optional inputs and sequence layout).

Kept apart from ops/base.py (the Op contract and its validation) so that a family's module
reads its own maths plus these few named steps.
"""
from __future__ import annotations

import numpy as np


def optional_input(items, i: int):
    """``items[i]``, or None for an optional input past the end of the node's list."""
    return items[i] if i < len(items) else None


def sigmoid(v: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * v))  # overflow-free logistic


def steps_first(x: np.ndarray, time_major: bool) -> tuple[np.ndarray, int | None]:
    """A recurrent op's input as [steps, batch, features], and the axis its sequence came on
    (None for a rank-2 [batch, features] input: one step)."""
    if x.ndim == 3:
        seq_axis = 0 if time_major else 1
        return np.moveaxis(x, seq_axis, 0), seq_axis
    return x[None], None


def sequence_output(out: np.ndarray, seq_axis: int | None) -> np.ndarray:
    """The per-step outputs [steps, batch, n] back in the input's layout (``steps_first``)."""
    return np.ascontiguousarray(np.moveaxis(out, 0, seq_axis) if seq_axis is not None else out[0])


__all__ = ["optional_input", "sequence_output", "sigmoid", "steps_first"]
