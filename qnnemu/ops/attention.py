"""Attention ops (QnnOpDef.h): RotaryEmbedding (QNN_OP_ROTARY_EMBEDDING) and the QNN 2.50
GroupQueryAttention (QNN_OP_GROUP_QUERY_ATTENTION).

Both follow the ONNX / ONNX Runtime semantics ONNX Runtime's QNN EP maps onto them: ONNX
RotaryEmbedding (opset 23; the EP refuses com.microsoft RotaryEmbedding) and
com.microsoft GroupQueryAttention.  What the vendor's x86-64 libQnnHtp.so (QNN 2.51) was seen to
do decided the points those leave open; tests/test_ops_vendor_new.py pins it.

Data types: real values (float32, float16 computed in float64 and rounded back, or quantized
fixed point dequantized by the plan); integer inputs as stated per op.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import OpUnsupportedError
from ..headers import Q
from ..spec import dtypes
from .base import Op, OpCheckError, ParamSpec, TensorSpec, check_rank, check_real, same_spec, warn

_F32, _F16 = Q.QNN_DATATYPE_FLOAT_32, Q.QNN_DATATYPE_FLOAT_16
_I32, _U32 = Q.QNN_DATATYPE_INT_32, Q.QNN_DATATYPE_UINT_32


def _real_class(spec: TensorSpec) -> str:
    return {_F32: "float32", _F16: "float16"}.get(spec.dtype, "fixed point")


def _same_real_class(op: str, inputs: list, idxs) -> None:
    """Real inputs ``idxs`` share one class: float32, float16 or fixed point (any widths)."""
    first = None
    for i in idxs:
        spec = inputs[i] if i < len(inputs) else None
        if spec is None:
            continue
        check_real(op, i, spec)
        if first is None:
            first = (i, _real_class(spec))
        elif _real_class(spec) != first[1]:
            raise OpCheckError(f"QNNEMU-{op}-dtype-mismatch", f"inputTensors[{i}].dataType",
                               f"{op} inputs {first[0]} and {i} must both be float32, both "
                               f"float16 or both fixed point; got {dtypes.name(inputs[first[0]].dtype)}"
                               f" and {dtypes.name(spec.dtype)}")


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rot: int,
           interleaved: bool) -> np.ndarray:
    """Rotary embedding of the first ``rot`` features of ``x`` [..., S, H] (float64): ``cos`` /
    ``sin`` [..., S, rot/2] broadcast against x's leading dimensions.  Non-interleaved: the
    halves x[:rot/2], x[rot/2:rot] are the pairs' components; interleaved: x[0::2], x[1::2]."""
    out = x.copy()
    if rot == 0:
        return out
    half = rot // 2
    if interleaved:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2] = cos * x1 - sin * x2
        out[..., 1:rot:2] = sin * x1 + cos * x2
    else:
        x1, x2 = x[..., :half], x[..., half:rot]
        out[..., :half] = cos * x1 - sin * x2
        out[..., half:rot] = sin * x1 + cos * x2
    return out


# ---- RotaryEmbedding ---------------------------------------------------------------------------
class RotaryEmbedding(Op):
    """Rotary position embedding of the heads of in[0] (ONNX RotaryEmbedding, opset 23).

    Inputs: in[0] x [B, N, S, H] (a 3-D [N, S, H] is batch 1: the vendor prepends it); in[1]
    cos_cache and in[2] sin_cache, same shape; in[3]? position_ids (INT_32 / UINT_32).
    Parameters: ``interleaved`` (BOOL_8, default false), ``rotary_embedding_dim`` (UINT_32; rot).

    The first rot features of each head are rotated, the rest pass unchanged::

        x1, x2 = x[..., :rot/2], x[..., rot/2:rot]       (interleaved: x[0:rot:2], x[1:rot:2])
        out1 = cos * x1 - sin * x2,   out2 = sin * x1 + cos * x2

    with cos/sin the cache rows of each token's position: cos_cache[position_ids[b, s]] for a
    2-D cache [max_pos, C]; without position_ids, a 2-D cache is indexed by the token's index s
    (positions 0..S-1) and a 3-D cache [B or 1, S, C] holds each token's row.  The first rot/2
    columns of C are used.  position_ids may be [B, S], [1, S] or [S] (one row for every batch).

    ONNX Runtime's QNN EP emits it for ONNX RotaryEmbedding (reshaping/transposing a 3-D
    [B, S, N*H] input to [B, N, S, H]), with rotary_embedding_dim always set, a 2-D cache and
    position_ids cast to INT_32.

    What the vendor's x86-64 libQnnHtp.so (QNN 2.51) does and qnnemu follows:

    - v68 devices have no RotaryEmbedding kernel (graphFinalize fails, "could not create op");
      v69 and later compute the above (in float16 for float32 graphs).  qnnemu runs it on every
      arch.
    - rotary_embedding_dim absent: rot = H.  Explicitly 0: nothing is rotated (out = x), unlike
      ONNX where 0 means H -- warning QNNEMU-RotaryEmbedding-dim-zero.  Odd: rounded down to
      even -- warning QNNEMU-RotaryEmbedding-dim-odd.  Larger than H: refused
      (QNNEMU-RotaryEmbedding-dim; the vendor reads past the head).
    - A cache wider than rot/2 columns: its first rot/2 are used (warning
      QNNEMU-RotaryEmbedding-cache-wider); narrower: refused (QNNEMU-RotaryEmbedding-cache-shape;
      the vendor reads past it).
    - position_ids with more rows than the batch: the first B rows are used (warning
      QNNEMU-RotaryEmbedding-position-batch; the vendor does this for a 3-D x).
    - A 3-D cache with position_ids: its first row is the [max_position, rot/2] table (warning
      QNNEMU-RotaryEmbedding-cache-first-row).
    - Refused as the vendor refuses them: INT_64 position_ids (graphFinalize fails), x of rank
      5, x and caches of different float types.
    - A position outside the cache: the vendor's execution fails, so does qnnemu's
      (QNNEMU-RotaryEmbedding-position-range, at graphExecute).
    """

    inputs = ("in[0]", "in[1]", "in[2]", "in[3]?")
    native_int_inputs = (3,)            # position_ids
    params = {
        "interleaved": ParamSpec("scalar", ("bool",), default=False),
        "rotary_embedding_dim": ParamSpec("scalar", ("uint", "int"), default=None),
    }

    @staticmethod
    def rot_dim(head: int, param) -> int:
        """The rotated width: ``head`` when the parameter is absent, else it rounded down to
        even (0 rotates nothing)."""
        return head if param is None else int(param) // 2 * 2

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type

        def fail(rule, path, msg):
            return OpCheckError(f"QNNEMU-{op}-{rule}", path, msg)
        x, cos, sin = inputs[0], inputs[1], inputs[2]
        pos = inputs[3] if len(inputs) > 3 else None
        _same_real_class(op, inputs, (0, 1, 2))
        check_rank(op, 0, x, (3, 4))
        x4 = (1,) * (4 - x.rank) + tuple(x.shape)
        b, _, s, head = x4
        dim = params["rotary_embedding_dim"]
        if dim is not None and int(dim) > head:
            raise fail("dim", "params[rotary_embedding_dim]",
                       f"rotary_embedding_dim {dim} exceeds the head size {head} (in[0]'s last "
                       f"dimension)")
        if dim is not None and int(dim) == 0:
            warn(f"QNNEMU-{op}-dim-zero", "params[rotary_embedding_dim]",
                 "rotary_embedding_dim 0 rotates nothing on the HTP (out = in[0]); ONNX reads 0 "
                 "as the head size -- omit the parameter for that")
        elif dim is not None and int(dim) % 2:
            warn(f"QNNEMU-{op}-dim-odd", "params[rotary_embedding_dim]",
                 f"rotary_embedding_dim {dim} is odd; the HTP rotates {int(dim) // 2 * 2} "
                 f"features")
        rot = cls.rot_dim(head, dim)
        if tuple(sin.shape) != tuple(cos.shape):
            raise fail("cache-shape", "inputTensors[2].dimensions",
                       f"sin_cache {list(sin.shape)} must have cos_cache's dimensions "
                       f"{list(cos.shape)}")
        if pos is not None:
            if pos.dtype not in (_I32, _U32):
                raise fail("position-dtype", "inputTensors[3].dataType",
                           f"position_ids must be INT_32 or UINT_32 (the HTP has no INT_64 "
                           f"kernel; ONNX Runtime's QNN EP casts them), got {dtypes.name(pos.dtype)}")
            if cos.rank not in (2, 3):
                raise fail("cache-rank", "inputTensors[1].rank",
                           f"with position_ids the caches are [max_position, rot/2] (2-D), got "
                           f"rank {cos.rank}")
            if cos.rank == 3:
                warn(f"QNNEMU-{op}-cache-first-row", "inputTensors[1].rank",
                     f"a 3-D cache {list(cos.shape)} with position_ids: its first row "
                     f"[{cos.shape[1]}, {cos.shape[2]}] is the position table, as on the HTP")
            rows = pos.shape[0] if pos.rank == 2 else 1
            if pos.rank not in (1, 2) or pos.shape[-1] != s or (rows != 1 and rows < b):
                raise fail("position-shape", "inputTensors[3].dimensions",
                           f"position_ids must be [{b}, {s}], [1, {s}] or [{s}] (batch {b}, "
                           f"sequence {s}), got {list(pos.shape)}")
            if rows > b and rows != 1:
                warn(f"QNNEMU-{op}-position-batch", "inputTensors[3].dimensions",
                     f"position_ids has {rows} rows for a batch of {b}: the first {b} are used")
        else:
            if cos.rank not in (2, 3):
                raise fail("cache-rank", "inputTensors[1].rank",
                           f"the caches are 2-D [positions, rot/2] or 3-D [batch, sequence, "
                           f"rot/2], got rank {cos.rank}")
            if cos.rank == 2 and cos.shape[0] < s:
                raise fail("cache-shape", "inputTensors[1].dimensions",
                           f"without position_ids a 2-D cache needs a row per token (>= {s} "
                           f"rows), got {list(cos.shape)}")
            if cos.rank == 3 and (cos.shape[0] not in (1, b) or cos.shape[1] != s):
                raise fail("cache-shape", "inputTensors[1].dimensions",
                           f"a 3-D cache is [{b} or 1, {s}, rot/2] (batch {b}, sequence {s}), "
                           f"got {list(cos.shape)}")
        width = cos.shape[-1]
        if width < rot // 2:
            raise fail("cache-shape", "inputTensors[1].dimensions",
                       f"the caches' last dimension must hold rot/2 = {rot // 2} values (rot "
                       f"{rot}), got {list(cos.shape)}")
        if width > rot // 2 and rot:
            warn(f"QNNEMU-{op}-cache-wider", "inputTensors[1].dimensions",
                 f"the caches have {width} columns; the first rot/2 = {rot // 2} are used")
        return [same_spec(x)]

    def _run(self, x, cos, sin, pos=None, *, interleaved, rotary_embedding_dim):
        x4 = np.asarray(x, np.float64).reshape((1,) * (4 - x.ndim) + x.shape)
        b, _, s, head = x4.shape
        rot = self.rot_dim(head, rotary_embedding_dim)
        half = rot // 2
        cos = np.asarray(cos, np.float64)[..., :half]
        sin = np.asarray(sin, np.float64)[..., :half]
        if pos is not None:
            if cos.ndim == 3:  # the HTP reads the first row as the position table
                cos, sin = cos[0], sin[0]
            p = np.asarray(pos, np.int64).reshape(-1, s)[:b]
            if p.size and (p.min() < 0 or p.max() >= cos.shape[0]):
                raise OpCheckError("QNNEMU-RotaryEmbedding-position-range", "inputTensors[3]",
                                   f"position_ids must be in [0, {cos.shape[0] - 1}] (the "
                                   f"caches' rows); got values in [{p.min()}, {p.max()}]")
            c, sn = cos[p], sin[p]                      # [B or 1, S, rot/2]
        elif cos.ndim == 2:
            c, sn = cos[None, :s], sin[None, :s]
        else:
            c, sn = cos, sin
        y = rotate(x4, c[:, None], sn[:, None], rot, bool(interleaved))
        return y.reshape(x.shape).astype(x.dtype)


# ---- GroupQueryAttention -----------------------------------------------------------------------
Q_IN, SEQLENS_K, TOTAL_LEN, K_IN, V_IN, PAST_K, PAST_V, COS, SIN, POS_IDS = range(10)


class GroupQueryAttention(Op):
    """Grouped-query attention with a KV cache and optional rotary embedding (QNN 2.50 op
    definitions; ONNX Runtime's com.microsoft GroupQueryAttention).

    Inputs, in QNN's order (ORT's EP reorders the contrib op's): in[0] query [B, S, N*H];
    in[1] seqlens_k INT_32 [B] (each batch's total length - 1); in[2] total_sequence_length
    INT_32 (rank 0 or [1]); in[3] key and in[4] value [B, S, Nkv*H]; in[5]? past_key and in[6]?
    past_value [B, Nkv, L, H]; in[7]? cos_cache and in[8]? sin_cache [max_position, rot/2];
    in[9]? position_ids INT_32 [B, S].  Parameters: ``num_heads`` N and ``kv_num_heads`` Nkv
    (required, N a multiple of Nkv), ``do_rotary`` (default 0), ``scale`` (default 0:
    1/sqrt(H)).  Outputs: out[0] [B, S, N*H], out[1] present_key and out[2] present_value
    [B, Nkv, L, H] (the HTP needs them: a node without them is refused, as the vendor's
    graphFinalize does).

    Per batch b (ORT's CPU kernel): a first prompt (S == total_sequence_length) has no past;
    otherwise past_len = seqlens_k[b] + 1 - S tokens of the cache come before the new ones.
    With ``do_rotary`` the query and key heads are rotated (non-interleaved, rot = 2 * cache
    columns) at positions position_ids[b, s], or past_len + s.  present = past with the S new
    keys/values written at past_len (the KV-cache update: ORT's result when past and present
    share a buffer, and the vendor's); without past, zeros and the new rows.  Query head h
    attends, causally, to the first past_len + s + 1 keys of KV head h // (N / Nkv)::

        out = softmax(scale * q k^T) v

    computed in float64.  ONNX Runtime's QNN EP emits it for com.microsoft GroupQueryAttention
    when its ``op_affinity`` option places the op on the HTP, with all ten inputs (NULL
    tensors for absent ones); packed QKV, rotary_interleaved, softcap, local windows, smooth
    softmax, attention bias and QK output are not part of the QNN op.

    The vendor's x86-64 libQnnHtp.so (QNN 2.51), as ONNX Runtime's EP drives it, computes this
    on v69+ devices (in float16; tests/test_ops_vendor_new.py compares prompts, token steps,
    batches with different lengths, rotary with and without position_ids, grouped heads,
    scale and float16).  Refused by it: v68 devices (no kernel), a node without the present
    outputs, a node whose trailing optional inputs are left off instead of passed as NULL
    tensors (graphFinalize: "No registered op found"; qnnemu takes that form, its graph layer
    does not tell the two apart); a rank-0 total_sequence_length whose dimensions pointer is
    not NULL crashes its process (the EP and qnnemu.client pass NULL).
    """

    inputs = ("in[0]", "in[1]", "in[2]", "in[3]?", "in[4]?", "in[5]?", "in[6]?", "in[7]?",
              "in[8]?", "in[9]?")
    native_int_inputs = (1, 2, 9)       # seqlens_k, total_sequence_length, position_ids
    outputs = ("out[0]", "out[1]", "out[2]")
    params = {
        "num_heads": ParamSpec("scalar", ("uint", "int"), required=True),
        "kv_num_heads": ParamSpec("scalar", ("uint", "int"), required=True),
        "do_rotary": ParamSpec("scalar", ("uint", "int", "bool"), default=0),
        "scale": ParamSpec("scalar", ("float",), default=0.0),
    }

    @classmethod
    def infer(cls, inputs, params, declared_outputs=None):
        op = cls.op_type

        def fail(rule, path, msg):
            return OpCheckError(f"QNNEMU-{op}-{rule}", path, msg)

        def get(i):
            return inputs[i] if i < len(inputs) else None
        nh, kvh = int(params["num_heads"]), int(params["kv_num_heads"])
        if nh <= 0 or kvh <= 0 or nh % kvh:
            raise fail("heads", "params[kv_num_heads]",
                       f"num_heads ({nh}) and kv_num_heads ({kvh}) must be > 0 with num_heads a "
                       f"multiple of kv_num_heads")
        if int(params["do_rotary"]) not in (0, 1):
            raise fail("do-rotary", "params[do_rotary]",
                       f"do_rotary must be 0 or 1, got {params['do_rotary']}")
        if not math.isfinite(params["scale"]):
            raise fail("scale", "params[scale]", f"scale must be finite, got {params['scale']}")
        if get(K_IN) is None or get(V_IN) is None:
            missing = K_IN if get(K_IN) is None else V_IN
            raise OpUnsupportedError(f"QNNEMU-{op}-packed-qkv", f"inputTensors[{missing}]",
                                     "key and value (in[3], in[4]) are required: packed QKV in "
                                     "the query is not supported (by the HTP either); split it")
        _same_real_class(op, inputs, (Q_IN, K_IN, V_IN, PAST_K, PAST_V, COS, SIN))
        q = inputs[Q_IN]
        check_rank(op, Q_IN, q, (3,))
        b, s, hidden = q.shape
        if hidden % nh:
            raise fail("query-shape", "inputTensors[0].dimensions",
                       f"the query's last dimension {hidden} must be num_heads ({nh}) x head "
                       f"size")
        head = hidden // nh
        for i in (K_IN, V_IN):
            if tuple(inputs[i].shape) != (b, s, kvh * head):
                raise fail("kv-shape", f"inputTensors[{i}].dimensions",
                           f"key and value must be [{b}, {s}, {kvh * head}] (batch, sequence, "
                           f"kv_num_heads x head size {head}); got {list(inputs[i].shape)}")
        sl, total = inputs[SEQLENS_K], inputs[TOTAL_LEN]
        if sl.dtype != _I32 or tuple(sl.shape) != (b,):
            raise fail("seqlens-k", "inputTensors[1]",
                       f"seqlens_k must be INT_32 [{b}]; got {dtypes.name(sl.dtype)} "
                       f"{list(sl.shape)}")
        if total.dtype != _I32 or tuple(total.shape) not in ((), (1,)):
            raise fail("total-sequence-length", "inputTensors[2]",
                       f"total_sequence_length must be an INT_32 scalar (rank 0 or [1]); got "
                       f"{dtypes.name(total.dtype)} {list(total.shape)}")
        pk, pv = get(PAST_K), get(PAST_V)
        if (pk is None) != (pv is None):
            raise fail("past", f"inputTensors[{PAST_V if pv is None else PAST_K}].type",
                       "past_key and past_value go together")
        cache_len = None
        if pk is not None:
            cache_len = pk.shape[2] if pk.rank == 4 else -1
            for i in (PAST_K, PAST_V):
                if inputs[i].rank != 4 or tuple(inputs[i].shape) != (b, kvh, cache_len, head):
                    raise fail("past", f"inputTensors[{i}].dimensions",
                               f"past_key and past_value must be [{b}, {kvh}, L, {head}] (batch, "
                               f"kv_num_heads, cache length, head size); got "
                               f"{list(inputs[i].shape)}")
            if cache_len < s:
                raise fail("past", f"inputTensors[{PAST_K}].dimensions",
                           f"the cache length {cache_len} is shorter than the sequence {s}")
        cos, sin, pos = get(COS), get(SIN), get(POS_IDS)
        if int(params["do_rotary"]):
            if cos is None or sin is None:
                raise fail("rotary-cache", f"inputTensors[{COS if cos is None else SIN}].type",
                           "do_rotary needs cos_cache and sin_cache (in[7], in[8])")
            if cos.rank != 2 or tuple(sin.shape) != tuple(cos.shape) or \
                    not 0 < 2 * cos.shape[1] <= head:
                raise fail("rotary-cache", "inputTensors[7].dimensions",
                           f"cos_cache and sin_cache must both be [max_position, rot/2] with "
                           f"rot <= head size {head}; got {list(cos.shape)} and "
                           f"{list(sin.shape)}")
            if pos is not None and (pos.dtype != _I32 or tuple(pos.shape) != (b, s)):
                raise fail("position-ids", "inputTensors[9]",
                           f"position_ids must be INT_32 [{b}, {s}]; got "
                           f"{dtypes.name(pos.dtype)} {list(pos.shape)}")
        out = same_spec(q)
        if declared_outputs is not None and len(declared_outputs) < 3:
            raise OpUnsupportedError(
                f"QNNEMU-{op}-present", "numOfOutputs",
                f"the present_key and present_value outputs are required (the HTP writes the "
                f"cache; {len(declared_outputs)} output(s) declared)")
        present_len = cache_len
        if present_len is None:
            declared = declared_outputs[1] if declared_outputs is not None else None
            present_len = declared.shape[2] if declared is not None and \
                len(declared.shape) == 4 else s
            if present_len < s:
                raise fail("present-shape", "outputTensors[1].dimensions",
                           f"the present cache length {present_len} is shorter than the "
                           f"sequence {s}")
        present = same_spec(inputs[K_IN], shape=(b, kvh, present_len, head))
        return [out, present, same_spec(inputs[V_IN], shape=(b, kvh, present_len, head))]

    def _run(self, *arrays, num_heads, kv_num_heads, do_rotary, scale):
        def get(i):
            return arrays[i] if i < len(arrays) else None
        q = np.asarray(arrays[Q_IN], np.float64)
        dtype = arrays[Q_IN].dtype
        b, s, hidden = q.shape
        nh, kvh = int(num_heads), int(kv_num_heads)
        head = hidden // nh
        k = np.asarray(arrays[K_IN], np.float64).reshape(b, s, kvh, head).transpose(0, 2, 1, 3)
        v = np.asarray(arrays[V_IN], np.float64).reshape(b, s, kvh, head).transpose(0, 2, 1, 3)
        q = q.reshape(b, s, nh, head).transpose(0, 2, 1, 3)               # [B, N, S, H]
        seqlens = np.asarray(arrays[SEQLENS_K], np.int64).reshape(b)
        total = int(np.asarray(arrays[TOTAL_LEN]).reshape(-1)[0])
        pk, pv = get(PAST_K), get(PAST_V)
        if pk is not None:
            length = pk.shape[2]
        elif len(self.output_specs) > 1:
            length = self.output_specs[1].shape[2]
        else:
            length = max(total, s)
        past = np.zeros(b, np.int64) if s == total else seqlens + 1 - s
        if past.min() < 0 or (past + s).max() > length:
            raise OpCheckError(
                "QNNEMU-GroupQueryAttention-sequence-lengths", "inputTensors[1]",
                f"seqlens_k {seqlens.tolist()} with total_sequence_length {total} and "
                f"sequence {s} put the new tokens at {past.tolist()}, outside the cache of "
                f"{length} (each past length seqlens_k + 1 - S must be >= 0 and fit)")
        if int(do_rotary):
            cos = np.asarray(get(COS), np.float64)
            sin = np.asarray(get(SIN), np.float64)
            pos_ids = get(POS_IDS)
            pos = (np.asarray(pos_ids, np.int64) if pos_ids is not None
                   else past[:, None] + np.arange(s)[None, :])
            if pos.min() < 0 or pos.max() >= cos.shape[0]:
                raise OpCheckError(
                    "QNNEMU-GroupQueryAttention-position-range", "inputTensors[9]",
                    f"rotary positions {pos.min()}..{pos.max()} fall outside the caches' "
                    f"{cos.shape[0]} rows")
            c, sn = cos[pos][:, None], sin[pos][:, None]                   # [B, 1, S, rot/2]
            rot = 2 * cos.shape[1]
            q = rotate(q, c, sn, rot, False)
            k = rotate(k, c, sn, rot, False)
        # The KV-cache update: the past, with the new keys/values written at each past length.
        present_k = np.asarray(pk, np.float64).copy() if pk is not None else \
            np.zeros((b, kvh, length, head))
        present_v = np.asarray(pv, np.float64).copy() if pv is not None else \
            np.zeros((b, kvh, length, head))
        for i in range(b):
            p = int(past[i])
            present_k[i, :, p:p + s] = k[i]
            present_v[i, :, p:p + s] = v[i]
        alpha = float(scale) if float(scale) != 0.0 else 1.0 / math.sqrt(head)
        group = nh // kvh
        out = np.empty((b, nh, s, head))
        for i in range(b):
            n = int(past[i]) + s
            keys = np.repeat(present_k[i, :, :n], group, axis=0)           # [N, n, H]
            vals = np.repeat(present_v[i, :, :n], group, axis=0)
            logits = alpha * (q[i] @ keys.transpose(0, 2, 1))              # [N, S, n]
            causal = np.arange(n)[None, :] <= (int(past[i]) + np.arange(s))[:, None]
            logits = np.where(causal[None], logits, -np.inf)
            logits -= logits.max(axis=-1, keepdims=True)
            w = np.exp(logits)
            w /= w.sum(axis=-1, keepdims=True)
            out[i] = w @ vals
        y = out.transpose(0, 2, 1, 3).reshape(b, s, hidden).astype(dtype)
        return (y, present_k.astype(dtype), present_v.astype(dtype))


__all__ = ["RotaryEmbedding", "GroupQueryAttention", "rotate"]
