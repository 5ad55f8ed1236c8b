"""Shared test code: environments, builders, stand-ins and checks that more than one test module
uses (the QNN APIs and vendor-document sections each module drives are named in its docstring).

Where shared test code lives:

- ``tests/helpers/<topic>.py`` (this package), imported as ``from helpers.<topic> import name``
  (pytest puts tests/ on ``sys.path``; a subprocess script inserts it itself):

  ========================  ===========================================================
  ``graph_env``             raw-ABI ``Env`` (logger, backend, device, context, graph 'g')
                            and ``H`` (plus SoC devices, HTP custom configs, binaries)
  ``batch_env``             raw-ABI ``Env`` for graphs built, executed and memRegistered
  ``context_env``           raw-ABI ``Env`` for context binaries; ListAsync notifications
  ``profile_env``           raw-ABI ``Env`` for QnnProfile; event readers and checks; a
                            profiled ONNX Runtime session
  ``system_lib``            cffi access to libQnnSystem.so (ours or the vendor's):
                            serialization targets, profile records, tensor footprints
  ``binary_builders``       context-binary graphs on the core objects; blob metadata edits
  ``fake_graph``            light Graph / Node stand-ins for the HTP cost model and prepare
  ``trace_check``           Trace Event Format checker, trace readers, QHAS HTML parser
  ``kernel_compare``        reference vs fast kernels of one op
  ``float_graphs``,         small ONNX graphs for ONNX Runtime's QNN EP
  ``lstm_models``
  ``ort``                   the QNN EP device (registered by qnnemu.onnxruntime) and
                            pinning our library
  ========================  ===========================================================

- the long-standing helper modules at the top of tests/ stay where they are, one job each:
  ``abi.py`` (the raw C function table through cffi), ``optest.py`` (op checks at the ``ops``
  level), ``strategies.py`` (hypothesis strategies), ``vendor.py`` (locating the vendor's
  libraries) and ``models.py`` (ONNX models for the ORT tests and benchmarks);
- ``conftest.py``: the fixtures pytest injects by name and the hypothesis profiles.

The rules, checked by tests/test_test_hygiene.py: a test module never imports another test
module -- not at module level, not inside a function, not in a subprocess script it writes (a
script may import the module that writes it, to run that module's own table in a clean
process) -- and nothing here imports a test module.  A test module keeps its tests, its rule
tables (``RULE_IDS``, ``RULE_CASES``, ...) and what only it uses; when a second module needs
something, it moves here.  (Until the package's rule registry replaces them, the two rule-id
meta-tests may still import other test modules for their rule tables, and read nothing else.)
Constants that mirror the package (the handle base, type codes, the EP name) come from the
package, not copies.
"""
