"""Writes golden_estimate_sketch.json: the stored parts of the estimate sketch for fixed texts,
computed by the pure-Python reference (tests/reference.py): band keys (the estimate mode's salt) and
the adaptive one-permutation bins (mode byte, then the two 2-bit planes or a sparse document's bitmap
and wide codes).

Run once when the estimate sketch is (re)defined: python tests/native/make_golden_estimate_sketch.py
Never regenerate it to make a failing test pass: every estimate-mode collection stores these bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import reference as ref  # noqa: E402
from make_golden_signatures import TEXTS  # noqa: E402

#: The signatures' texts, and longer ones whose bins are dense at 1,408 bins (and sparse ones of every width).
LONG_TEXTS = [" ".join(f"x{(i * 7919) % 5003}" for i in range(n)) for n in (120, 700, 2500)]

CASES = [
    {"num_perm": 128, "seed": 1, "shingle": "word", "size": 5, "bins": 1408, "bands": 16, "rows": 6},
    {"num_perm": 64, "seed": 42, "shingle": "word", "size": 3, "bins": 512, "bands": 11, "rows": 4},
    {"num_perm": 16, "seed": 7, "shingle": "char", "size": 4, "bins": 128, "bands": 4, "rows": 4},
]


def main() -> None:
    entries = []
    for case in CASES:
        for text in TEXTS + LONG_TEXTS:
            opts = {"seed": case["seed"], "shingle": case["shingle"], "size": case["size"]}
            sig = ref.signature(text, num_perm=case["num_perm"], **opts)  # type: ignore[arg-type]
            entries.append(
                {
                    **case,
                    "text": text,
                    "band_keys": [str(k) for k in ref.estimate_band_keys(sig, case["bands"], case["rows"])],
                    "bins_hex": ref.estimate_sketch(text, bins=case["bins"], **opts).hex(),  # type: ignore[arg-type]
                }
            )
    lines = ",\n".join(json.dumps(entry, ensure_ascii=True) for entry in entries)
    (HERE / "golden_estimate_sketch.json").write_text("[\n" + lines + "\n]\n")
    print(f"wrote {len(entries)} golden vectors")


if __name__ == "__main__":
    main()
