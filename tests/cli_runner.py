"""Run the ``privml`` CLI in-process, as the tests of every subcommand do."""

from __future__ import annotations

import contextlib
import io
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


class TrainedFile:
    """A model file ``privml train`` wrote for a test: its JSON report, and ``privml audit --model`` of it."""

    def __init__(self, report: dict):
        self.report = report
        self.path: str = report["model"]

    def audit(self, capsys, *options: str) -> dict:
        """The JSON report of ``privml audit --model FILE *options`` (it must succeed)."""
        return run_json(capsys, "audit", "--model", self.path, *options)


def train(out, *options: str) -> TrainedFile:
    """``privml train *options --out OUT --json`` in-process, outside capsys (so a module-scoped fixture can share
    one file among the tests that only read it)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["train", *options, "--out", str(out), "--json"])
    assert code == 0, stderr.getvalue()
    lines = stdout.getvalue().strip().splitlines()
    assert len(lines) == 1, "stdout must carry exactly one JSON object"
    return TrainedFile(json.loads(lines[0]))
