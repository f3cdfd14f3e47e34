"""Run the ``privml`` CLI in-process, as the tests of every subcommand do."""

from __future__ import annotations

import json

from privml.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``privml *argv``."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse errors exit through SystemExit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv: str) -> dict:
    """The one JSON object ``privml *argv --json`` prints (it must succeed)."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == 1, "stdout must carry exactly one JSON object"
    return json.loads(lines[0])
