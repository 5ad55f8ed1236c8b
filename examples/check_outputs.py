"""Checks the example's outputs against numpy: the graph ``mlp`` of mlp.json is
y = Relu(x @ fc_weight^T + fc_bias + (x @ lora_a) @ lora_b), computed here in float64 from the
same files, with the description's LoRA factors for ``base`` and ``profiled`` (net-run on the
context binary) and ``vendor`` (net-run on the vendor's backend, when that directory exists),
and with the adapter's (adapter.json) for ``lora`` (apply_adapter.py).

    python examples/check_outputs.py examples/out

Prints one line per checked directory and exits with status 1 when an output differs from
numpy by more than 1e-4 relative to the output's largest magnitude (float32 on the default
SM8350 (v68) device differs by about 1e-7).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-4


def tensor(name: str, doc: dict) -> np.ndarray:
    spec = next(t for t in doc["graphs"][0]["tensors"] if t["name"] == name)
    data = spec["data"]
    values = np.fromfile(HERE / data, "<f4") if isinstance(data, str) else np.array(data, np.float32)
    return values.reshape(spec["dims"]).astype(np.float64)


def expected(x: np.ndarray, adapter: bool) -> np.ndarray:
    doc = json.loads((HERE / "mlp.json").read_text())
    w, b = tensor("fc_weight", doc), tensor("fc_bias", doc)
    a, bb = tensor("lora_a", doc), tensor("lora_b", doc)
    if adapter:
        files = json.loads((HERE / "adapter.json").read_text())["mlp"]
        a = np.fromfile(HERE / files["lora_a"], "<f4").reshape(a.shape).astype(np.float64)
        bb = np.fromfile(HERE / files["lora_b"], "<f4").reshape(bb.shape).astype(np.float64)
    return np.maximum(x @ w.T + b + (x @ a) @ bb, 0.0)


def main(out: Path) -> int:
    inputs = [line.split()[0] for line in (HERE / "input_list.txt").read_text().splitlines() if line.strip()]
    worst = 0.0
    for run, adapter in (("base", False), ("lora", True), ("profiled", False), ("vendor", False)):
        if not (out / run).is_dir():
            if run == "vendor":
                continue  # the vendor's run is optional
            print(f"{run}: missing {out / run}")
            return 1
        errors = []
        for n, name in enumerate(inputs):
            x = np.fromfile(HERE / name, "<f4").reshape(1, -1).astype(np.float64)
            want = expected(x, adapter)
            got = np.fromfile(out / run / f"Result_{n}" / "y.raw", "<f4").reshape(want.shape)
            errors.append(float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)))
        worst = max(worst, *errors)
        print(f"{run}: {len(inputs)} inferences, largest difference from numpy {max(errors):.1e} "
              f"(relative to the largest output)")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/out")))
