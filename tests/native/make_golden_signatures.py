"""Writes golden_signatures.json: MinHash signatures and band keys of fixed texts, computed by the
pure-Python reference.

Run once when the signature format is (re)defined: python tests/native/make_golden_signatures.py
The test compares the compiled core against this file, so any change of hashing, tokenizing or
normalization fails it. Never regenerate it to make a failing test pass: that would silently break
every stored index.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import reference as ref  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG!",
    "Hello",
    "",
    " \t\n ",
    "ΟΔΟΣ ΣΑΣ σας Σ — final sigma",
    "café e\u0301 ﬁne ½ İstanbul Ǆ ﬃ Ω K Å",
    "漢字かなカタカナ 中文文本没有空格 ﾊﾝｶｸ",
    "كَتَبَ الوَلَدُ الدَّرْسَ",
    "हिन्दी भाषा में लिखा गया पाठ",
    "🙂 emoji 👍🏽 ok \ud800 lone \udfff",
    "\u1100\u1161\u11a8 \uac00\u11a8 한국어 텍스트",
    "def main(argv):\n    return run(argv[1:], verbose=True)  # snake_case_names_split",
    " ".join(f"w{i}" for i in range(300)),
]
CASES = [
    {"num_perm": 128, "seed": 1, "shingle": "word", "size": 5},
    {"num_perm": 64, "seed": 42, "shingle": "word", "size": 3},
    {"num_perm": 16, "seed": 7, "shingle": "char", "size": 4},
]


def main() -> None:
    entries = []
    for case in CASES:
        for text in TEXTS:
            sig = ref.signature(text, **case)  # type: ignore[arg-type]
            entries.append(
                {
                    **case,
                    "text": text,
                    "signature": [int(v) for v in sig],
                    "band_keys_4x4": [str(k) for k in ref.band_keys(sig, 4, 4)],
                }
            )
    lines = ",\n".join(json.dumps(entry, ensure_ascii=True) for entry in entries)
    (HERE / "golden_signatures.json").write_text("[\n" + lines + "\n]\n")
    print(f"wrote {len(entries)} golden vectors")


if __name__ == "__main__":
    main()
