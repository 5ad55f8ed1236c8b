"""Where a validation rule fires: the QNN API function and the parameter path.

In the style of the Vulkan validation layers' ``Location``: a small immutable value that knows
the API function that is running and builds the path of the parameter being checked, e.g.::

    loc = Location("graphAddNode").field("opConfig").field("v1").index("inputTensors", 1)
    str(loc)  # 'graphAddNode: opConfig.v1.inputTensors[1]'

Every message of a validation rule (error or warning, qnnemu/rules.py) is built from one:
``[<rule id>] <function>: <parameter path>: <message>`` (docs/validation.md).  Raise an error
rule with :func:`qnnemu.rules.fail`, log a warning rule with :func:`qnnemu.rules.warn_at`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Location:
    """The API function (``graphAddNode``) and the path inside its parameters."""

    function: str
    parts: tuple[str, ...] = ()

    def field(self, name: str) -> Location:
        """``loc.field("opConfig")`` -> ``... opConfig``."""
        return Location(self.function, self.parts + (name,))

    def index(self, name: str, i: int) -> Location:
        """``loc.index("inputTensors", 1)`` -> ``... inputTensors[1]``."""
        return Location(self.function, self.parts + (f"{name}[{int(i)}]",))

    def key(self, name: str, key: str) -> Location:
        """``loc.key("params", "stride")`` -> ``... params[stride]`` (named entries)."""
        return Location(self.function, self.parts + (f"{name}[{key}]",))

    def path(self, relative: str) -> Location:
        """Appends an already-built relative path (``'params[stride]'``, an op's check)."""
        # A plain list, not a generator: this runs on hot paths and a generator-built tuple
        # lingers in the interpreter's free lists (tests/test_process_hygiene.py counts memory).
        parts = [p for p in relative.split(".") if p]
        return Location(self.function, self.parts + tuple(parts))

    @property
    def parameter(self) -> str:
        """The parameter path alone (``opConfig.v1.inputTensors[1]``); empty at the top."""
        return ".".join(self.parts)

    def __str__(self) -> str:
        return f"{self.function}: {self.parameter}" if self.parts else self.function


__all__ = ["Location"]
