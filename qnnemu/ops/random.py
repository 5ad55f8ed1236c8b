"""Random generators (QnnOpDef.h): RandomUniformLike (QNN_OP_RANDOM_UNIFORM_LIKE) and the QNN
2.50 RandomNormalLike (QNN_OP_RANDOM_NORMAL_LIKE).

Inputs: in[0] the output's shape, an INT_32/UINT_32 [rank] tensor; in[1]? a seed, FLOAT_32 (or
INT_32/UINT_32) [1] or rank 0.  The declared output tensor is the shape: the vendor ignores
in[0]'s values, so does qnnemu, with warning QNNEMU-<op>-shape-ignored when a static in[0]
disagrees.  Parameters: RandomUniformLike ``low`` (default 0.0) and ``high`` (default 1.0):
values uniform between them (low + (high - low) u, u in [0, 1); low >= high is taken too);
RandomNormalLike ``mean`` (default 0.0) and ``scale`` (default 1.0): values mean + scale z, z
standard normal (a negative scale mirrors z, which has the same distribution, as on the
vendor).  A fixed-point output (UFIXED_POINT_8 / SFIXED_POINT_8, 16-bit) gets the real values
quantized into its encoding by the plan, so they are clipped to its range.

How ONNX Runtime's QNN EP emits them (ONNX RandomUniformLike / RandomNormalLike): in[0] a static
UINT_32 shape, in[1] the ONNX ``seed`` attribute as a static FLOAT_32 [1] when it is set, a
UFIXED_POINT_8 output (for RandomUniformLike its encoding spans [min(low, 0), max(high, 0)])
followed by a Dequantize to float32: the HTP generates 8-bit codes.

Seeds: with a seed, every execution of a node draws the same values, and nodes with equal seeds
draw equal values (a generator seeded from the seed's value, restarted per execution); without
one, a node draws values seeded from OS entropy when its graph is finalized, then the same
values on every execution (the vendor's pattern: constant across executions, different across
graphs).  The values cannot match the vendor's bit for bit (its generator is not public);
tests/test_ops_random.py checks range, moments and the seed rules.

What the vendor's x86-64 libQnnHtp.so (QNN 2.51) does (tests/test_ops_vendor_new.py):

- float32 outputs fail graphFinalize ("could not create op"), and so do RandomUniformLike's
  float16 and 16-bit fixed-point ones; RandomNormalLike also runs into float16 and 16-bit
  fixed point, and a plain INT_8/UINT_8/INT_16/UINT_16/BOOL_8 output of those widths is fixed
  point with scale 1 (ops/base.py AS_FIXED).  The op refuses the types no arch finalizes
  (QNNEMU-RandomUniformLike-output-dtype / QNNEMU-RandomNormalLike-output-dtype: a layout the
  op support data did not measure, such as one with a seed input, must not get through);
  which of the others an arch takes is op support data (qnnemu/htp/op_support.py).
- RandomNormalLike: codes of N(mean, scale) in the output's encoding, as here.
- RandomUniformLike: in the EP's configuration (encoding [low, high] with low <= 0 <= high) codes
  uniform over the whole 8-bit range, as here; outside it the vendor's codes depend on ``high``
  only and ignore the output's encoding (all 255 when low > 0), while qnnemu quantizes uniform
  values in [low, high) into the encoding (a plain UINT_8/BOOL_8 output, scale 1, is such a
  case: for low 0, high 1 the vendor writes codes uniform over 0..255, qnnemu 0 / 1 -- measured
  v73, docs/validation.md).  The vendor's stream also ignores the seed's value
  (any seed gives the same codes); qnnemu's depends on it, as ONNX's does.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import OpUnsupportedError
from ..headers import Q
from ..spec import dtypes
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, warn

_F32 = Q.QNN_DATATYPE_FLOAT_32
_FLOAT_OUTPUTS = (_F32, Q.QNN_DATATYPE_FLOAT_16)
_OUTPUTS_8 = (Q.QNN_DATATYPE_UFIXED_POINT_8, Q.QNN_DATATYPE_SFIXED_POINT_8)
_SEED_TYPES = (_F32, Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32)


def seed_key(value) -> int:
    """The generator seed of a seed value: its float32 bit pattern (an integer seed's too), so
    that every distinct float seeds a distinct stream."""
    return int(np.asarray(value, dtype=np.float32).reshape(-1)[0].view(np.uint32))


class _RandomLike(Op, register=False):
    inputs = ("in[0]", "in[1]?")
    # The output types the vendor's graph path finalizes on some arch (op_support.json; plain
    # 8/16-bit integers through the fixed view); FLOAT_32 never ("could not create op").
    output_types: tuple[int, ...] = _OUTPUTS_8
    output_what = "UFIXED_POINT_8 or SFIXED_POINT_8"
    native_int_inputs = (0, 1)          # the shape, the seed

    # the op's two float parameters, both required finite; the rule and the second one's path
    # say which is wrong
    finite_params: tuple[str, str] = ("", "")
    finite_rule = ""

    @classmethod
    def check_params(cls, params) -> None:
        a, b = cls.finite_params
        if not (math.isfinite(params[a]) and math.isfinite(params[b])):
            raise OpCheckError(cls.finite_rule, f"params[{b}]",
                               f"{a} and {b} must be finite numbers; got {a} {params[a]}, {b} "
                               f"{params[b]}")

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type

        def fail(rule, path, msg):
            return OpCheckError(f"QNNEMU-{op}-{rule}", path, msg)
        cls.check_params(params)
        shape_in = inputs[0]
        if shape_in.dtype not in (Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32):
            raise fail("shape-dtype", "inputTensors[0].dataType",
                       f"in[0] holds the output shape and must be INT_32 or UINT_32, got "
                       f"{dtypes.name(shape_in.dtype)}")
        check_rank(op, 0, shape_in, (1,))
        seed = inputs[1] if len(inputs) > 1 else None
        if seed is not None and (seed.dtype not in _SEED_TYPES or
                                 int(np.prod(seed.shape)) != 1):
            raise fail("seed", "inputTensors[1]",
                       f"the seed in[1] must be one FLOAT_32 (or INT_32/UINT_32) value, rank 0 "
                       f"or [1]; got {dtypes.name(seed.dtype)} {list(seed.shape)}")
        if not declared_outputs:
            raise fail("output-unknown", "outputTensors[0].dimensions",
                       f"{op} takes its shape from the declared output tensor, and none was given")
        out = declared_outputs[0]
        said = None if shape_in.data is None else \
            [int(v) for v in np.asarray(shape_in.data).reshape(-1)]
        if tuple(shape_in.shape) != (len(out.shape),) or (said is not None and
                                                          said != list(out.shape)):
            what = said if said is not None else f"{shape_in.shape[0]} dimensions"
            warn(f"QNNEMU-{op}-shape-ignored", "inputTensors[0]",
                 f"in[0] ({what}) does not describe the output tensor {list(out.shape)}; the "
                 f"output's dimensions decide, as on the HTP")
        if out.dtype not in cls.output_types:
            raise OpUnsupportedError(
                f"QNNEMU-{op}-output-dtype", "outputTensors[0].dataType",
                f"the HTP generates into {cls.output_what} outputs (or a plain integer of those widths: "
                f"fixed point with scale 1; Dequantize it for float values, as ONNX Runtime's QNN EP "
                f"does); got {dtypes.name(out.dtype)}")
        if out.dtype in _FLOAT_OUTPUTS:
            return [TensorSpec(tuple(out.shape), out.dtype)]
        return [TensorSpec(tuple(out.shape), _F32)]  # real values, quantized by the plan

    def __init__(self, params, inputs=None, outputs=None):
        super().__init__(params, inputs, outputs)
        seed = self.input_specs[1] if len(self.input_specs) > 1 else None
        # No seed: one draw of OS entropy per op instance (per finalized graph).
        self._entropy = None if seed is not None else np.random.SeedSequence().entropy

    def _generator(self, seed) -> np.random.Generator:
        key = self._entropy if seed is None else seed_key(seed)
        return np.random.Generator(np.random.PCG64(key))

    def _shape(self, shape_in) -> tuple[int, ...]:
        if self.output_specs:
            return tuple(self.output_specs[0].shape)
        return tuple(int(v) for v in np.asarray(shape_in).reshape(-1))


class RandomUniformLike(_RandomLike):
    params = {"low": ParamSpec("scalar", ("float",), default=0.0),
              "high": ParamSpec("scalar", ("float",), default=1.0)}

    finite_params = ("low", "high")
    finite_rule = "QNNEMU-RandomUniformLike-range"

    def _run(self, shape_in, seed=None, *, low, high):
        u = self._generator(seed).random(self._shape(shape_in))      # [0, 1), float64
        return (low + (high - low) * u).astype(np.float32)


class RandomNormalLike(_RandomLike):
    output_types = _OUTPUTS_8 + (Q.QNN_DATATYPE_UFIXED_POINT_16, Q.QNN_DATATYPE_SFIXED_POINT_16,
                                 Q.QNN_DATATYPE_FLOAT_16)
    output_what = "8/16-bit fixed point or FLOAT_16"
    params = {"mean": ParamSpec("scalar", ("float",), default=0.0),
              "scale": ParamSpec("scalar", ("float",), default=1.0)}

    finite_params = ("mean", "scale")
    finite_rule = "QNNEMU-RandomNormalLike-scale"

    def _run(self, shape_in, seed=None, *, mean, scale):
        z = self._generator(seed).standard_normal(self._shape(shape_in))
        return (mean + scale * z).astype(np.float32)


__all__ = ["RandomUniformLike", "RandomNormalLike", "seed_key"]
