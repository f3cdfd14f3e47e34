"""The entry point: lazy subcommands, so `privml --help` starts without numpy."""

from __future__ import annotations

import argparse
import subprocess
import sys

from privml.cli._common import COMMAND_HELP
from privml.cli.main import COMMANDS, build_parser


def _choices(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_the_stub_help_lines_match_the_subcommands() -> None:
    full = _choices(build_parser())
    helps = {action.dest: action.help for action in full._choices_actions}
    assert helps == COMMAND_HELP and list(COMMANDS) == list(COMMAND_HELP)


def test_help_loads_no_numeric_library() -> None:
    code = ("import sys; from privml.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('numpy', 'scipy', 'sklearn', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_account_loads_only_numpy_and_scipy_special() -> None:
    # Start-up (issue 30: at most 1.2x a bare `import numpy, scipy.special`): the PLD's FFT is numpy's, and
    # nothing of scikit-learn, torch or scipy's heavier packages is imported.
    code = ("import sys; from privml.cli.main import main\n"
            "main(['account', 'dpsgd', '--noise-multiplier', '1.1', '--sample-rate', '0.004', '--steps', '1000',"
            " '--delta', '1e-5'])\n"
            "heavy = ('sklearn', 'torch', 'scipy.fft', 'scipy.optimize', 'scipy.stats', 'scipy.signal', 'scipy.integrate')\n"
            "print(sorted(m for m in heavy if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_a_command_registers_only_itself_in_full() -> None:
    parser = build_parser(["account"])
    choices = _choices(parser).choices
    assert choices["account"].add_help and not choices["train"].add_help
