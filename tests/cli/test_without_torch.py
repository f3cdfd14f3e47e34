"""The core install has no torch: every torch path is one line naming the torch extra, never a traceback.

Torch's absence is simulated in a fresh interpreter by an import hook that finds no ``torch`` (the test
environment has it installed), so each command meets exactly the ``ModuleNotFoundError`` a core install raises.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def load_preset_methods(name: str) -> list[str]:
    """The preset's methods in its order (the order its notes follow)."""
    from privml.study import load_preset

    return list(load_preset(name).methods)

NO_TORCH = textwrap.dedent("""
    import importlib.abc
    import sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.partition(".")[0] == "torch":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
""")

EXTRA = "install the torch extra, pip install 'privml[torch]'"


def run_without_torch(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", NO_TORCH + textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def cli_without_torch(*argv: str) -> subprocess.CompletedProcess[str]:
    return run_without_torch("from privml.cli.main import main\nsys.exit(main(sys.argv[1:]))\n", *argv)


def test_the_simulation_hides_torch():
    result = run_without_torch("import torch\n")
    assert result.returncode == 1 and "ModuleNotFoundError: No module named 'torch'" in result.stderr


def test_training_a_cnn_names_the_torch_extra(tmp_path):
    result = cli_without_torch("train", "--method", "dpsgd-cnn", "--dataset", "mnist", "--epsilon", "1", "--offline")
    assert result.returncode == 2
    assert result.stderr == f"privml train: error: --method dpsgd-cnn needs PyTorch, which the core install lacks: {EXTRA}\n"


def test_a_study_leaves_the_cnn_methods_out_with_a_note_before_any_run(tmp_path):
    # paper-cnn: the three CNN methods (subsample-and-aggregate over CNN teachers too, whose aggregator
    # imports without torch: it used to be planned and fail run by run) are left out, the linear ones run.
    code = """
        import json
        from privml.study import load_preset, plan
        jobs, notes = plan(load_preset("paper-cnn"))
        print(json.dumps({"methods": sorted({job.method for job in jobs}), "notes": notes}))
    """
    planned = json.loads(run_without_torch(code).stdout)
    assert planned["methods"] == ["dpsgd", "nonprivate", "subsample-aggregate"]
    cnn = [m for m in load_preset_methods("paper-cnn") if m.endswith("-cnn") or m.startswith("scatter-")]
    assert [n for n in planned["notes"] if EXTRA in n] == [
        next(n for n in planned["notes"] if n.startswith(f"method {m!r}")) for m in cnn]
    # The CLI says so before the first run (run_study replaced by a stand-in that marks where runs begin).
    code = """
        import privml.study, privml.study._runner
        privml.study._runner.check_dataset = lambda spec, local: None
        def first_run(*args, **kwargs):
            sys.stderr.write("RUNS START\\n")
            raise SystemExit(0)
        privml.study.run_study = first_run
        from privml.cli.main import main
        main(["study", "run", "paper-cnn", "--out", sys.argv[1], "--no-progress", "--offline"])
    """
    err = run_without_torch(code, str(tmp_path / "study")).stderr.splitlines()
    assert err[-1] == "RUNS START"
    assert [line.split("'")[1] for line in err if line.startswith("note: ") and EXTRA in line] == cnn
