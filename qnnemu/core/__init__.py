"""The emulator's object model behind the QNN API: log, backend, device, context, graph, tensor.

Nothing here imports cffi: the ABI layer (qnnemu/abi) converts C structs to these objects and
back.  Errors are raised as ``qnnemu.errors.QnnError`` carrying the QNN error code.
"""
