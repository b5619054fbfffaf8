"""``neardup params`` and the CLI's conventions: help everywhere, one-line errors, exit codes."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from neardup import sketch
from neardup.cli import main


def neardup_command() -> list[str]:
    """The installed console script next to this interpreter (``python -m neardup.cli`` from the repository
    root would import the source tree, which has no compiled module in a fresh clone)."""
    script = Path(sys.executable).with_name("neardup")
    return [str(script)] if script.exists() else [sys.executable, "-m", "neardup.cli"]


COMMANDS = ["serve", "load", "dedup", "params", "bench", "valkey-module"]


def test_params_text(capsys: pytest.CaptureFixture[str]) -> None:
    # The default: bands chosen for recall at the threshold, the collection a service creates.
    assert main(["params", "--threshold", "0.8", "--num-perm", "128"]) == 0
    out = capsys.readouterr().out
    assert "16 bands x 6 rows" in out and "0.80    0.9923  <- threshold" in out
    assert (
        "1408 one-permutation bins of 2 bits (a document of at most a quarter as many shingles keeps" in out
    )
    assert "(482 bytes per document" in out
    # Given weights: the banding that minimizes the weighted error probabilities.
    assert main(["params", "--threshold", "0.8", "--num-perm", "128", "--fn-weight", "0.85"]) == 0
    out = capsys.readouterr().out
    assert "16 bands x 8 rows" in out
    fp, fn = sketch.error_probabilities(0.8, 16, 8)
    assert f"{fp:.4f}" in out and f"{fn:.4f}" in out
    assert "0.80    0.9470  <- threshold" in out
    plot = [line for line in out.splitlines() if "|" in line]
    assert len(plot) == 17 and plot[0].startswith("1.00 |") and plot[-1].startswith("0.00 |")
    assert plot[-1].split("|", 1)[1].startswith("*")  # P(0) = 0
    assert plot[0].rstrip().endswith("*")  # P(1) = 1


def test_params_json_and_weights(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["params", "-t", "0.9", "-k", "256", "--fn-weight", "0.8", "--fp-weight", "0.2", "--json"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert (data["bands"], data["rows"]) == sketch.optimal_bands(0.9, 256, 0.2, 0.8)
    assert data["verify"] == "estimate" and data["verification_floor"] == pytest.approx(0.9)
    # only one weight given: the other is 1 minus it
    assert main(["params", "-t", "0.9", "-k", "256", "--fn-weight", "0.8", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert (one["bands"], one["rows"]) == (data["bands"], data["rows"])
    # without weights: the service's banding, chosen for recall at the threshold
    assert main(["params", "-t", "0.8", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert (default["bands"], default["rows"]) == (16, 6) and default["candidate_probability"]["0.8"] > 0.99
    assert main(["params", "-t", "0.8", "--verify", "exact", "--json"]) == 0
    exact = json.loads(capsys.readouterr().out)
    assert exact["verify"] == "exact" and exact["standard_error_at_threshold"] == 0.0
    assert data["candidate_probability"]["0.9"] == pytest.approx(
        float(sketch.collision_probability(0.9, data["bands"], data["rows"]))
    )
    assert main(["params", "-t", "0.8", "--bands", "16", "--rows", "8", "--json"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert (given["bands"], given["rows"]) == (16, 8)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["params", "--threshold", "1.5"], "threshold must be"),
        (["params", "--bands", "4"], "both --bands and --rows"),
        (["params", "--bands", "20", "--rows", "10"], "at most --num-perm"),
        (["params", "--threshold", "abc"], "invalid float value"),
        (["nonsense"], "invalid choice"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], words: str) -> None:
    result = subprocess.run([*neardup_command(), *args], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("neardup") and words in line


@pytest.mark.parametrize("command", COMMANDS)
def test_help_everywhere(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: neardup {command}")
    if command in ("load", "dedup"):
        assert ("exit status:" in out and "examples:" in out) or "example:" in out


def test_top_level_help_lists_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "130"):
        assert f"\n  {code}" in out


def test_bench_passes_arguments_through(tmp_path: Path) -> None:
    # A stand-in bench/ in the working directory (looked at first): the real scripts need the [bench] extra.
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "bench_sketch.py").write_text("import json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (tmp_path / "bench" / "bench_service.py").write_text("import sys\nsys.exit(3)\n")
    run = functools.partial(
        subprocess.run, capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path
    )
    result = run([*neardup_command(), "bench", "sketch", "--", "--quick", "--only", "similarity"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["--quick", "--only", "similarity"]
    assert run([*neardup_command(), "bench", "all", "--quick"]).returncode == 3  # the scripts' status


def test_valkey_module_prints_the_path_of_the_installed_module() -> None:
    done = subprocess.run([*neardup_command(), "valkey-module"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.name == "neardup_valkey.so" and path.read_bytes()[:4] == b"\x7fELF"
