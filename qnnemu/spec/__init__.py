"""The spec layer: what ops, htp and core all need to describe tensors (QnnTypes.h).

- :mod:`qnnemu.spec.dtypes`: Qnn_DataType_t element sizes, numpy types, categories;
- :mod:`qnnemu.spec.tensor`: Qnn_TensorType_t roles (static, app input/output ...) and the
  ``TensorSpec`` / ``QuantSpec`` an op sees while checking (QnnOpDef.h tensor rules);
- :mod:`qnnemu.spec.params`: ``Param`` / ``ParamSpec``, an op's Qnn_Param_t and its declaration;
- :mod:`qnnemu.spec.quant`: the one quantizer: quantize / dequantize / requantize with each op's
  observed rounding, and QuantSpec <-> JSON (docs/quantization.md).

Only the base layer (errors, location, rules, headers) sits below it (tests/test_layers.py).
"""
