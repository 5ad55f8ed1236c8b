"""Shared test code: environments, builders, stand-ins and constants used by more than one test
module (the QNN APIs each helper drives are named in its own docstring).

Where shared test code lives:

- ``tests/helpers/<topic>.py`` (this package): everything more than one test module needs that
  is built on qnnemu or the raw ABI -- ABI environments (``graph_env``, ``batch_env``,
  ``context_env``, ``profile_env``), builders (``binary_builders``, ``fake_graph``,
  ``lstm_models``, ...) and ONNX Runtime's QNN EP (``ort``).  Import them as
  ``from helpers.<topic> import name`` (tests/ is on ``sys.path`` under pytest; a subprocess
  script puts it there itself).
- the five long-standing helper modules at the top of tests/ stay where they are, each with one
  job: ``abi.py`` (the raw C function table through cffi), ``optest.py`` (op checks at the
  ``ops`` level), ``strategies.py`` (hypothesis strategies), ``vendor.py`` (locating the
  vendor's libraries) and ``models.py`` (ONNX models for the ORT tests and benchmarks).
- ``conftest.py``: fixtures pytest injects by name and the hypothesis profiles.

The rules (checked by tests/test_test_hygiene.py): a test module never imports another test
module -- not at module level, not inside a function, not in a subprocess script it writes --
and nothing here imports a test module.  A test module keeps its own tests, its rule tables
(``RULE_IDS``, ``RULE_CASES``, ...) and what only it uses; when a second module needs something,
it moves here.  Constants that mirror the package (handle values, type codes, ...) are imported
from the package, not copied.
"""
