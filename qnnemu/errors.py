"""Errors raised by the core and turned into Qnn_ErrorHandle_t codes at the ABI boundary.

Every validation rule has a stable id (``rule``) that appears in the message, in the style of
the Vulkan validation layers: ``[QNNEMU-graphAddNode-param-type] graphAddNode:
opConfig.v1.params[2] (stride): ...``.
"""
from __future__ import annotations


class QnnError(Exception):
    """A failure with the QNN error code the API call returns."""

    def __init__(self, code: int, message: str, rule: str | None = None):
        self.code = int(code)
        self.rule = rule
        self.detail = message
        super().__init__(f"[{rule}] {message}" if rule else message)


class OpCheckError(ValueError):
    """An op's inputs, outputs or parameters break one of its rules.

    ``path`` is relative to the op config, e.g. ``inputTensors[1].dimensions`` or
    ``params[stride]``; the graph layer prefixes the API function and ``opConfig.v1.``.
    """

    def __init__(self, rule: str, path: str, message: str):
        self.rule = rule
        self.path = path
        self.detail = message
        super().__init__(f"[{rule}] {path}: {message}")


class OpUnsupportedError(OpCheckError):
    """Valid by the op definition, but something this emulator cannot execute (yet)."""
