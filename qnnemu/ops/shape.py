"""Data movement: Reshape, Transpose, Concat (QnnOpDef.h QNN_OP_RESHAPE, QNN_OP_TRANSPOSE,
QNN_OP_CONCAT).

Reshape has no shape parameter: the target shape is the node's declared output tensor, which
``infer`` receives as ``declared_outputs`` (Op.check and the graph layer pass it).
"""
from __future__ import annotations

import numpy as np

from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_float_inputs, same_spec


def _count(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


class Reshape(Op):
    inputs = ("in[0]",)

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs: list[TensorSpec] | None = None) -> list[TensorSpec]:
        op = cls.op_type
        check_float_inputs(op, inputs)
        if not declared_outputs:
            raise OpCheckError(f"QNNEMU-{op}-output-unknown", "outputTensors[0].dimensions",
                               "Reshape takes its shape from the declared output tensor, "
                               "and none was given")
        x, want = inputs[0], tuple(declared_outputs[0].shape)
        if _count(want) != _count(x.shape):
            raise OpCheckError(f"QNNEMU-{op}-element-count", "outputTensors[0].dimensions",
                               f"output dimensions {list(want)} hold {_count(want)} elements, "
                               f"input {list(x.shape)} holds {_count(x.shape)}")
        return [same_spec(x, shape=want)]

    def _run(self, x):
        if not self.output_specs:
            raise OpCheckError("QNNEMU-Reshape-output-unknown", "outputTensors[0].dimensions",
                               "Reshape needs its output spec to run")
        return x.reshape(self.output_specs[0].shape)


class Transpose(Op):
    inputs = ("in[0]",)
    params = {"perm": ParamSpec("tensor", ("uint",), shape=(None,), required=True)}

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op = cls.op_type
        check_float_inputs(op, inputs)
        x = inputs[0]
        perm = [int(v) for v in np.asarray(params["perm"]).reshape(-1)]
        if sorted(perm) != list(range(x.rank)):
            raise OpCheckError(f"QNNEMU-{op}-perm", "params[perm]",
                               f"perm must be a permutation of 0..{x.rank - 1} (input rank "
                               f"{x.rank}), got {perm}")
        return [same_spec(x, shape=tuple(x.shape[p] for p in perm))]

    def _run(self, x, perm):
        return np.ascontiguousarray(np.transpose(x, [int(p) for p in perm]))


class Concat(Op):
    inputs = ("in*",)
    params = {"axis": ParamSpec("scalar", ("uint",), required=True)}

    @classmethod
    def infer(cls, inputs: list[TensorSpec], params,
              declared_outputs=None) -> list[TensorSpec]:
        op = cls.op_type
        check_float_inputs(op, inputs)
        first = inputs[0]
        axis = params["axis"]
        if not 0 <= axis < first.rank:
            raise OpCheckError(f"QNNEMU-{op}-axis", "params[axis]",
                               f"axis must be in [0, {first.rank - 1}] for rank {first.rank} "
                               f"inputs, got {axis}")
        total = 0
        for i, spec in enumerate(inputs):
            if spec.rank != first.rank:
                raise OpCheckError(f"QNNEMU-{op}-input-rank", f"inputTensors[{i}].rank",
                                   f"all inputs must have input 0's rank {first.rank}, input "
                                   f"{i} has rank {spec.rank} ({list(spec.shape)})")
            same = all(d == e for j, (d, e) in enumerate(zip(spec.shape, first.shape))
                       if j != axis)
            if not same:
                raise OpCheckError(f"QNNEMU-{op}-dimensions", f"inputTensors[{i}].dimensions",
                                   f"dimensions other than axis {axis} must equal input 0's "
                                   f"{list(first.shape)}, got {list(spec.shape)}")
            total += spec.shape[axis]
        shape = list(first.shape)
        shape[axis] = total
        return [same_spec(first, shape=tuple(shape))]

    def _run(self, *arrays, axis):
        return np.concatenate(arrays, axis=axis)


__all__ = ["Reshape", "Transpose", "Concat"]
