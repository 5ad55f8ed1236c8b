"""Writes the example's data files (weights, adapter weights, inputs, input list) from a fixed
seed, so that the committed files can be regenerated and checked (tests/test_examples.py).

Files (float32, little-endian, row-major; the formats of docs/graph-json.md and of
qnnemu-net-run's input lists):

- ``fc_weight.raw`` [16, 32]: FullyConnected weights (out, in) of graph ``mlp`` in mlp.json;
- ``lora_a.raw`` [32, 4], ``lora_b.raw`` [4, 16]: the graph's UPDATEABLE_STATIC LoRA factors
  as prepared (B is zero, as a LoRA branch starts: the base graph computes Relu(FC(x)));
- ``adapter/lora_a.raw``, ``adapter/lora_b.raw``: adapter ``lora`` (adapter.json);
- ``input_0.raw``, ``input_1.raw`` [1, 32]: two inputs ``x``; ``input_list.txt`` lists them.

Run ``python make_data.py`` in this directory to rewrite them.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 20261126
IN, OUT, RANK = 32, 16, 4


def data() -> dict[str, np.ndarray]:
    """File name (relative to examples/) -> its float32 contents."""
    rng = np.random.default_rng(SEED)

    def normal(*shape, scale):
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    return {
        "fc_weight.raw": normal(OUT, IN, scale=0.25),
        "lora_a.raw": normal(IN, RANK, scale=0.25),
        "lora_b.raw": np.zeros((RANK, OUT), np.float32),
        "adapter/lora_a.raw": normal(IN, RANK, scale=0.25),
        "adapter/lora_b.raw": normal(RANK, OUT, scale=0.25),
        "input_0.raw": normal(1, IN, scale=1.0),
        "input_1.raw": normal(1, IN, scale=1.0),
    }


INPUT_LIST = "input_0.raw\ninput_1.raw\n"


def main() -> None:
    for name, array in data().items():
        (HERE / name).parent.mkdir(exist_ok=True)
        array.astype("<f4").tofile(HERE / name)
    (HERE / "input_list.txt").write_text(INPUT_LIST)


if __name__ == "__main__":
    main()
