"""Writes golden_v2.json: the stored parts of sketch format 2 for fixed texts, computed by the
pure-Python reference (tests/reference.py): band keys (format-2 salt), the b-bit one-permutation bins
(estimate mode) and the sorted shingle hashes (exact mode).

Run once when format 2 is (re)defined: python tests/native/make_golden_v2.py
Never regenerate it to make a failing test pass: every format-2 collection stores these bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import reference as ref  # noqa: E402
from make_golden import TEXTS  # noqa: E402

CASES = [
    {
        "num_perm": 128,
        "seed": 1,
        "shingle": "word",
        "size": 5,
        "bins": 1024,
        "bits": 2,
        "bands": 18,
        "rows": 6,
    },
    {
        "num_perm": 64,
        "seed": 42,
        "shingle": "word",
        "size": 3,
        "bins": 512,
        "bits": 2,
        "bands": 11,
        "rows": 4,
    },
    {"num_perm": 16, "seed": 7, "shingle": "char", "size": 4, "bins": 128, "bits": 3, "bands": 4, "rows": 4},
]


def main() -> None:
    entries = []
    for case in CASES:
        for text in TEXTS:
            opts = {"seed": case["seed"], "shingle": case["shingle"], "size": case["size"]}
            sig = ref.signature(text, num_perm=case["num_perm"], **opts)  # type: ignore[arg-type]
            entries.append(
                {
                    **case,
                    "text": text,
                    "band_keys": [str(k) for k in ref.band_keys_v2(sig, case["bands"], case["rows"])],
                    "bins_hex": ref.oph_bins(text, bins=case["bins"], bits=case["bits"], **opts).hex(),  # type: ignore[arg-type]
                    "exact": ref.shingle_keys(text, size=case["size"], shingle=case["shingle"]),
                }
            )
    lines = ",\n".join(json.dumps(entry, ensure_ascii=True) for entry in entries)
    (HERE / "golden_v2.json").write_text("[\n" + lines + "\n]\n")
    print(f"wrote {len(entries)} golden vectors")


if __name__ == "__main__":
    main()
