"""The handle table (qnnemu/core/handles.py) survives being re-entered by the thread that holds it.

The garbage collector runs finalizers wherever an allocation triggers it -- also inside
``HandleTable.live`` while the table's lock is held.  An ONNX Runtime session collected there
frees its QNN objects through our entries (destroyPowerConfigId, contextFree ...), which look up
the newest logger in the table or release handles: the same thread comes back into the table.
With a non-reentrant lock that thread deadlocked (seen in tests/test_htp_tiling.py's vendor
comparison, createPowerConfigId -> newest_logger -> live -> GC -> destroyPowerConfigId -> live).
"""
from __future__ import annotations

import threading

from qnnemu.core.handles import HandleTable


def test_a_finalizer_reentering_the_table_inside_live_does_not_deadlock():
    table = HandleTable()
    keep, gone = object(), object()
    kept, freed = table.new(keep), table.new(gone)
    reentered: list[list] = []
    entered: list[bool] = []

    class Reentering(dict):
        """values() runs what a finalizer run by the collector inside ``live`` would: a look-up
        of the live objects and a release, on the thread that holds the table's lock."""

        def values(self):
            if not entered:        # once: the finalizer's own look-up must not re-enter again
                entered.append(True)
                reentered.append(table.live())
                table.release(freed)
            return super().values()

    table._objects = Reentering(table._objects)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(table.live()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "HandleTable.live returned although a finalizer re-entered the table (no deadlock)"
    assert reentered == [[keep, gone]], "the re-entering look-up saw the objects live at that moment"
    assert result == [[keep]], "the outer look-up saw the table after the finalizer released a handle"
    assert table.lookup(kept) is keep and table.lookup(freed) is None, "the table holds only the kept object"
