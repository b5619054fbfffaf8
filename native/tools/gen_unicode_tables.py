"""Generate native/unicode_tables.inc: the Unicode data the C++ text pipeline needs.

The tables are generated once and committed, so signatures never change when the Python, compiler or
machine changes (stored indexes depend on that). Regenerating with another Unicode version changes
signatures of texts using characters whose properties changed: do it only with a new format version.

Run: python native/tools/gen_unicode_tables.py   (uses this Python's unicodedata; records its version)

What is generated, per code point (two-stage lookup: block index by cp >> 7, then 128 entries):
  flags   ALNUM (str.isalnum), MARK (Mn/Mc/Me), SPACE (str.isspace), NOSPACE (an alphanumeric of a script
          written without spaces: each is a word of its own), STABLE (NFKC leaves it and its neighbours
          alone: NFKC(c) == c, ccc 0, never the second of a composition), CASED / CASE_IGNORABLE (the
          Final_Sigma context of str.lower), LOWER_SPECIAL (str.lower gives more than one character, or is
          contextual: capital sigma)
  ccc     canonical combining class
  lower   str.lower() of the character alone, as a delta, when it is one character
and the full NFKD decompositions (non-Hangul), the canonical composition pairs, the multi-character
lower-case mappings.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

MAX_CP = 0x110000
BLOCK_SHIFT = 7
BLOCK = 1 << BLOCK_SHIFT

F_ALNUM, F_MARK, F_SPACE, F_NOSPACE = 1, 2, 4, 8
F_STABLE, F_CASED, F_CASE_IGNORABLE, F_LOWER_SPECIAL = 16, 32, 64, 128

# Scripts written without spaces between words: each of their letters is a word of its own, so word
# n-grams over them are character n-grams. Han (with radicals, compatibility ideographs and the
# supplementary planes), Hiragana, Katakana, Bopomofo, Yi, Thai, Lao, Khmer, Myanmar.
NOSPACE_RANGES = [
    (0x0E00, 0x0EFF),  # Thai, Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # ideographic iteration mark, closing mark, number zero
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3038, 0x303C),
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA000, 0xA4CF),  # Yi
    (0xA9E0, 0xA9FF),  # Myanmar extended-B
    (0xAA60, 0xAA7F),  # Myanmar extended-A
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x1B000, 0x1B16F),  # Kana supplement/extended
    (0x20000, 0x3FFFF),  # CJK extensions B.. and the third plane
]

HANGUL_S = (0xAC00, 0xD7A3)


def in_nospace(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in NOSPACE_RANGES)


def main() -> None:
    out_path = Path(__file__).resolve().parent.parent / "unicode_tables.inc"
    chars = [chr(cp) for cp in range(MAX_CP)]

    # Composition pairs: (a, b) -> c for every primary composite c (canonical, two characters, and
    # NFC puts it back together, which leaves out the composition exclusions).
    pairs: dict[tuple[int, int], int] = {}
    for cp in range(MAX_CP):
        if HANGUL_S[0] <= cp <= HANGUL_S[1]:
            continue
        d = unicodedata.decomposition(chars[cp])
        if not d or d.startswith("<"):
            continue
        parts = [int(p, 16) for p in d.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chars[cp]:
            pairs[(parts[0], parts[1])] = cp
    seconds = {b for (_, b) in pairs}
    seconds.update(range(0x1161, 0x1176))  # Hangul V jamo (algorithmic LV)
    seconds.update(range(0x11A8, 0x11C3))  # Hangul T jamo (algorithmic LVT)

    props: dict[tuple[int, int, int], int] = {}
    prop_list: list[tuple[int, int, int]] = []
    per_cp = [0] * MAX_CP
    decomps: dict[int, str] = {}
    lower_special: dict[int, str] = {}
    for cp in range(MAX_CP):
        c = chars[cp]
        flags = 0
        if c.isalnum():
            flags |= F_ALNUM
            if in_nospace(cp):
                flags |= F_NOSPACE
        if unicodedata.category(c) in ("Mn", "Mc", "Me"):
            flags |= F_MARK
        if c.isspace():
            flags |= F_SPACE
        ccc = unicodedata.combining(c)
        nfkc = unicodedata.normalize("NFKC", c)
        if nfkc == c and ccc == 0 and cp not in seconds:
            flags |= F_STABLE
        if not HANGUL_S[0] <= cp <= HANGUL_S[1]:
            nfkd = unicodedata.normalize("NFKD", c)
            if nfkd != c:
                decomps[cp] = nfkd
        # Final_Sigma context, probed through str.lower itself so it is exactly CPython's rule:
        # 'a' c 'Σ' ends in final sigma iff c is case-ignorable or cased; c 'Σ' iff c is cased and not
        # case-ignorable.
        x = ("a" + c + "\u03a3").lower()[-1] == "\u03c2"
        y = (c + "\u03a3").lower()[-1] == "\u03c2"
        if y:
            flags |= F_CASED
        elif x:
            flags |= F_CASE_IGNORABLE
        low = c.lower()
        delta = 0
        if cp == 0x03A3 or len(low) != 1:
            flags |= F_LOWER_SPECIAL
            if len(low) != 1:
                lower_special[cp] = low
        else:
            delta = ord(low) - cp
        key = (flags, ccc, delta)
        index = props.get(key)
        if index is None:
            index = props[key] = len(prop_list)
            prop_list.append(key)
        per_cp[cp] = index
    assert len(prop_list) < 65536

    blocks: dict[tuple[int, ...], int] = {}
    block_list: list[tuple[int, ...]] = []
    stage1: list[int] = []
    for start in range(0, MAX_CP, BLOCK):
        block = tuple(per_cp[start : start + BLOCK])
        bi = blocks.get(block)
        if bi is None:
            bi = blocks[block] = len(block_list)
            block_list.append(block)
        stage1.append(bi)

    def rows(values: list[int], per_line: int, fmt: str = "{}") -> str:
        lines = []
        for i in range(0, len(values), per_line):
            lines.append("    " + ",".join(fmt.format(v) for v in values[i : i + per_line]) + ",")
        return "\n".join(lines)

    decomp_keys = sorted(decomps)
    decomp_data: list[int] = []
    decomp_index: list[int] = []
    for cp in decomp_keys:
        decomp_index.append(len(decomp_data))
        decomp_data.extend(ord(ch) for ch in decomps[cp])
    decomp_index.append(len(decomp_data))
    pair_keys = sorted((a << 21) | b for (a, b) in pairs)
    pair_vals = [pairs[(k >> 21, k & 0x1FFFFF)] for k in pair_keys]
    special_keys = sorted(lower_special)

    text = [
        "// Generated by native/tools/gen_unicode_tables.py -- do not edit.",
        f"// Unicode {unicodedata.unidata_version}, from Python {sys.version.split()[0]}'s unicodedata.",
        "// Part of the signature format: regenerating with other data changes signatures.",
        "#pragma once",
        "#include <cstdint>",
        "namespace neardup::unicode {",
        f'inline constexpr const char* kUnicodeVersion = "{unicodedata.unidata_version}";',
        f"inline constexpr int kBlockShift = {BLOCK_SHIFT};",
        f"enum : uint8_t {{ ALNUM = {F_ALNUM}, MARK = {F_MARK}, SPACE = {F_SPACE}, NOSPACE = {F_NOSPACE},",
        f"  STABLE = {F_STABLE}, CASED = {F_CASED}, CASE_IGNORABLE = {F_CASE_IGNORABLE},"
        f" LOWER_SPECIAL = {F_LOWER_SPECIAL} }};",
        "struct Props { uint8_t flags; uint8_t ccc; int32_t lower_delta; };",
        f"inline constexpr Props kProps[{len(prop_list)}] = {{",
        "\n".join(f"    {{{f},{c},{d}}}," for (f, c, d) in prop_list),
        "};",
        f"inline constexpr uint16_t kStage1[{len(stage1)}] = {{",
        rows(stage1, 32),
        "};",
        f"inline constexpr uint16_t kStage2[{len(block_list) * BLOCK}] = {{",
        rows([v for block in block_list for v in block], 32),
        "};",
        f"inline constexpr uint32_t kDecompKeys[{len(decomp_keys)}] = {{",
        rows(decomp_keys, 16, "0x{:X}"),
        "};",
        f"inline constexpr uint16_t kDecompIndex[{len(decomp_index)}] = {{",
        rows(decomp_index, 24),
        "};",
        f"inline constexpr uint32_t kDecompData[{len(decomp_data)}] = {{",
        rows(decomp_data, 16, "0x{:X}"),
        "};",
        f"inline constexpr uint64_t kCompKeys[{len(pair_keys)}] = {{",
        rows(pair_keys, 8, "0x{:X}ull"),
        "};",
        f"inline constexpr uint32_t kCompValues[{len(pair_vals)}] = {{",
        rows(pair_vals, 16, "0x{:X}"),
        "};",
        f"inline constexpr uint32_t kLowerSpecialKeys[{len(special_keys)}] = {{",
        rows(special_keys, 16, "0x{:X}"),
        "};",
        f"inline constexpr uint32_t kLowerSpecialValues[{len(special_keys)}][4] = {{",
        "\n".join(
            "    {" + ",".join(f"0x{ord(ch):X}" for ch in (lower_special[k] + "\0" * 4)[:4]) + "},"
            for k in special_keys
        ),
        "};",
        "}  // namespace neardup::unicode",
        "",
    ]
    out_path.write_text("\n".join(line for line in text if line != ""))
    print(
        f"wrote {out_path}: {len(prop_list)} props, {len(block_list)} blocks, {len(decomp_keys)} decomps,"
        f" {len(pair_keys)} pairs, {len(special_keys)} special lower"
    )


if __name__ == "__main__":
    main()
