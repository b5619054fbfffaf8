"""Writes golden_exact_sketch.json: the stored parts of the exact sketch for fixed texts, computed by
the pure-Python reference (tests/reference.py): band keys (the exact mode's salt) and the sorted
distinct 32-bit shingle hashes.

Run once when the exact sketch is (re)defined: python tests/native/make_golden_exact_sketch.py
Never regenerate it to make a failing test pass: every exact-mode collection stores these bytes.
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

#: The salt of the exact mode's band keys (the service's, app/domain/banding.py).
EXACT_SALT = 0x6E6431642D763200

CASES = [
    {"num_perm": 128, "seed": 1, "shingle": "word", "size": 5, "bands": 18, "rows": 6},
    {"num_perm": 64, "seed": 42, "shingle": "word", "size": 3, "bands": 11, "rows": 4},
    {"num_perm": 16, "seed": 7, "shingle": "char", "size": 4, "bands": 4, "rows": 4},
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
                    "band_keys": [
                        str(k) for k in ref.salted_band_keys(sig, case["bands"], case["rows"], EXACT_SALT)
                    ],
                    "exact": ref.shingle_keys(text, size=case["size"], shingle=case["shingle"]),
                }
            )
    lines = ",\n".join(json.dumps(entry, ensure_ascii=True) for entry in entries)
    (HERE / "golden_exact_sketch.json").write_text("[\n" + lines + "\n]\n")
    print(f"wrote {len(entries)} golden vectors")


if __name__ == "__main__":
    main()
