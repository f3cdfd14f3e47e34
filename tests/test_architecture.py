"""Dependency contracts between privml's layers, checked on the source (an import-linter in a test).

- The math (mechanisms, accounting, losses) imports no estimator, data, study, audit, serving or CLI code.
- Private prediction never imports the server; nothing but the CLI imports the CLI.
- Nothing in privml imports privml.testing (deliberately broken code for tests and benchmarks).
- The numpy core never imports torch at module level: torch stays an optional extra.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "privml"


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(name: str, path: Path, *, top_level_only: bool) -> set[str]:
    """Modules imported by module ``name`` at ``path`` (relative imports resolved), skipping TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if isinstance(child, ast.Import) and (depth == 0 or not top_level_only):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and (depth == 0 or not top_level_only):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child, depth + (1 if nested else 0))

    visit(tree, 0)
    return found


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _within(*packages: str) -> Callable[[str], bool]:
    return lambda name: any(name == p or name.startswith(p + ".") for p in packages)


def _violations(sources: Callable[[str], bool], forbidden: tuple[str, ...], *, top_level_only: bool = False
                ) -> list[str]:
    out = []
    for name, path in MODULES.items():
        if not sources(name):
            continue
        for imported in _imports(name, path, top_level_only=top_level_only):
            if _within(*forbidden)(imported):
                out.append(f"{name} imports {imported}")
    return sorted(out)


MATH = ("privml.mechanisms", "privml.accounting", "privml.losses")
HIGHER = ("privml.linear", "privml.prediction", "privml.selection", "privml.torch", "privml.data", "privml.study",
          "privml.audit", "privml.serve", "privml.cli", "privml.ledger", "privml.testing", "privml.io")


def test_the_math_imports_nothing_above_it() -> None:
    assert _violations(_within(*MATH), HIGHER) == []


def test_prediction_never_imports_the_server_or_the_cli() -> None:
    assert _violations(_within("privml.prediction"), ("privml.serve", "privml.cli")) == []


def test_only_the_cli_imports_the_cli() -> None:
    assert _violations(lambda name: not _within("privml.cli")(name), ("privml.cli",)) == []


def test_nothing_imports_the_negative_controls() -> None:
    assert _violations(lambda name: not _within("privml.testing")(name), ("privml.testing",)) == []


def test_the_numpy_core_never_imports_torch_at_module_level() -> None:
    # The torch negative controls subclass torch classes, so they import torch; no privml module may import them
    # (test_nothing_imports_the_negative_controls), so importing privml or privml.testing still loads no torch.
    core = lambda name: not _within("privml.torch", "privml.testing.torch_controls")(name)  # noqa: E731
    assert _violations(core, ("torch", "privml.torch"), top_level_only=True) == []


@pytest.mark.parametrize("contract", [test_the_math_imports_nothing_above_it, test_only_the_cli_imports_the_cli])
def test_the_checker_sees_a_planted_violation(tmp_path, monkeypatch, contract) -> None:
    planted = tmp_path / "privml" / "accounting" / "bad.py"
    planted.parent.mkdir(parents=True)
    planted.write_text("def f():\n    from privml.cli.main import main\n    from privml.linear import base\n")
    monkeypatch.setitem(MODULES, "privml.accounting.bad", planted)
    with pytest.raises(AssertionError):
        contract()


def test_private_selection_never_imports_the_study() -> None:
    # The study calls privml.selection (Liu-Talwar random stopping), never the reverse.
    assert _violations(_within("privml.selection"), ("privml.study", "privml.cli")) == []


#: numpy Generator methods that draw privacy noise (uniform coins, permutations and integers are not noise)
NOISE_SAMPLERS = {"normal", "standard_normal", "laplace", "gamma", "standard_gamma", "exponential",
                  "standard_exponential", "gumbel"}
#: where a noise sampler may be called: the mechanisms, torch's device-side sampler (its own module), the
#: auditing tools (canaries and probe inputs, not privacy noise) and the deliberately broken negative controls
NOISE_HOMES = ("privml.mechanisms", "privml.torch", "privml.audit", "privml.testing")


def _noise_draws(name: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [f"{name}:{node.lineno} calls .{node.func.attr}()" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in NOISE_SAMPLERS
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id in {"math", "special", "stats"})]


def test_every_noise_draw_goes_through_the_mechanisms() -> None:
    # Issue 17: noise is drawn in privml.mechanisms (sample_noise and the mechanism classes), once.
    found = [hit for name, path in MODULES.items() if not _within(*NOISE_HOMES)(name)
             for hit in _noise_draws(name, path)]
    assert found == []


def test_the_noise_check_sees_a_planted_draw(tmp_path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text("def f(rng, w):\n    return w + rng.normal(0.0, 1.0, size=w.shape)\n")
    assert _noise_draws("privml.linear.bad", planted) == ["privml.linear.bad:2 calls .normal()"]
