"""``neardup params``: the bands and rows chosen for a threshold, their error probabilities, P(s) at a
few similarities, and the S-curve drawn in the terminal."""

from __future__ import annotations

import argparse

import orjson

from neardup import sketch
from neardup.commands.common import CliError, ExitCode
from neardup.domain.index import collection_floor
from neardup.domain.models import RECALL_AT_THRESHOLD, CollectionParams, max_bands

SIMILARITIES = (0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
WIDTH = 60
HEIGHT = 17


def choose(args: argparse.Namespace) -> tuple[int, int]:
    try:
        if (args.bands is None) != (args.rows is None):
            raise CliError("give both --bands and --rows, or neither", ExitCode.USAGE)
        if args.bands is not None:
            if args.bands < 1 or args.rows < 1 or args.bands * args.rows > args.num_perm:
                raise CliError(
                    f"--bands x --rows must be positive and at most --num-perm ({args.num_perm})",
                    ExitCode.USAGE,
                )
            sketch.error_probabilities(args.threshold, args.bands, args.rows)  # validates the threshold
            return int(args.bands), int(args.rows)
        if args.fp_weight is None and args.fn_weight is None:  # the service's own choice
            return sketch.recall_bands(
                args.threshold, args.num_perm, RECALL_AT_THRESHOLD, max_bands(args.num_perm)
            )
        fp_weight = 1.0 - args.fn_weight if args.fp_weight is None else args.fp_weight
        fn_weight = 1.0 - args.fp_weight if args.fn_weight is None else args.fn_weight
        return sketch.optimal_bands(args.threshold, args.num_perm, fp_weight, fn_weight)
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None


def curve(threshold: float, bands: int, rows: int, width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    """The S-curve as text: y = P(s) from 0 to 1, x = s from 0 to 1, the threshold as a dashed column."""
    xs = [i / (width - 1) for i in range(width)]
    ps = sketch.collision_probability(xs, bands, rows).tolist()
    t_col = round(threshold * (width - 1))
    grid = [[" "] * width for _ in range(height)]
    for row in range(height):
        grid[row][t_col] = ":"
    for col, p in enumerate(ps):
        row = height - 1 - round(p * (height - 1))
        grid[row][col] = "*"
    lines = []
    for row in range(height):
        value = 1 - row / (height - 1)
        label = f"{value:4.2f}" if row in (0, (height - 1) // 2, height - 1) else "    "
        lines.append(f"{label} |{''.join(grid[row])}")
    lines.append("     +" + "-" * width)
    axis = [" "] * width
    for s in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        text = f"{s:.1f}"
        col = min(round(s * (width - 1)), width - len(text))
        axis[col : col + len(text)] = list(text)
    lines.append("      " + "".join(axis))
    lines.append(f"      Jaccard similarity s    (':' threshold {threshold})")
    return lines


def verification(args: argparse.Namespace, bands: int, rows: int) -> dict[str, object]:
    """What a candidate is verified on, in the collection these parameters make."""
    try:
        params = CollectionParams.create(
            "params", args.threshold, args.num_perm, bands=bands, rows=rows, verify=args.verify
        )
    except ValueError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    t = args.threshold
    if params.verify == "exact":
        error = 0.0
        sketch_name = "the sorted 32-bit hashes of every shingle (exact Jaccard)"
    else:
        chance = 2.0**-sketch.BITS_PER_BIN
        p = t + (1 - t) * chance
        error = (p * (1 - p) / params.bins) ** 0.5 / (1 - chance)
        sketch_name = (
            f"{params.bins} one-permutation bins of {sketch.BITS_PER_BIN} bits (a document of at most a "
            "quarter as many shingles keeps every shingle)"
        )
    return {
        "verify": params.verify,
        "sketch": sketch_name,
        "stored_bytes": params.stored_bytes,
        "standard_error_at_threshold": round(error, 5),
        "verification_floor": round(collection_floor(params), 5),
    }


def run(args: argparse.Namespace) -> int:
    bands, rows = choose(args)
    verified = verification(args, bands, rows)
    fp, fn = sketch.error_probabilities(args.threshold, bands, rows)
    probabilities = sketch.collision_probability(list(SIMILARITIES), bands, rows).tolist()
    if args.json:
        print(
            orjson.dumps(
                {
                    "threshold": args.threshold,
                    "num_perm": args.num_perm,
                    "bands": bands,
                    "rows": rows,
                    **verified,
                    "false_positive_probability": fp,
                    "false_negative_probability": fn,
                    "candidate_probability": {
                        f"{s:g}": p for s, p in zip(SIMILARITIES, probabilities, strict=True)
                    },
                }
            ).decode()
        )
        return ExitCode.OK
    chosen = "given" if args.bands is not None else "chosen"
    print(
        f"threshold {args.threshold}, num_perm {args.num_perm}: {bands} bands x {rows} rows ({chosen}; "
        f"{bands * rows} of {args.num_perm} slots)"
    )
    print(f"  false positive probability  {fp:.4f}  (mean P(s) over s < {args.threshold})")
    print(f"  false negative probability  {fn:.4f}  (mean 1 - P(s) over s >= {args.threshold})")
    print(
        f"  verify {verified['verify']}: candidates are verified on {verified['sketch']} "
        f"({verified['stored_bytes']} bytes per document with the band keys"
        f"{', plus 4 per shingle' if verified['verify'] == 'exact' else ''}), standard error "
        f"{verified['standard_error_at_threshold']:.4f} at the threshold, a match needs "
        f"{verified['verification_floor']:.4f}: a false positive of the banding costs time, not a wrong "
        "answer"
    )
    print()
    print("     s    P(s) = 1 - (1 - s^r)^b")
    for s, p in zip(SIMILARITIES, probabilities, strict=True):
        mark = "  <- threshold" if abs(s - args.threshold) < 1e-9 else ""
        print(f"  {s:4.2f}    {p:.4f}{mark}")
    print()
    for line in curve(args.threshold, bands, rows):
        print(line)
    return ExitCode.OK
