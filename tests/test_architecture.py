"""Dependency contracts between privml's layers, checked on the source (an import-linter in a test).

- The math (mechanisms, accounting, losses) imports no estimator, data, study, audit, serving or CLI code.
- Private prediction never imports the server; nothing but the CLI imports the CLI.
- Nothing in privml imports privml.testing (deliberately broken code for tests and benchmarks).
- The numpy core never imports torch at module level: torch stays an optional extra.
- No import cycle between two files; an import inside a function says why it is there (an optional extra,
  start-up time, the platform, or a module run with ``python -m``) in a ``# lazy(KIND): reason`` comment.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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
    # The torch negative controls (DP-SGD engines, the feature mean) import torch; no privml module may import them
    # (test_nothing_imports_the_negative_controls), so importing privml or privml.testing still loads no torch.
    torch_controls = ("privml.testing.torch_controls", "privml.testing.feature_mean_controls")
    core = lambda name: not _within("privml.torch", *torch_controls)(name)  # noqa: E731
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


# ----------------------------------------------------------------- imports inside functions, and cycles
#: Why an import may sit inside a function: an optional extra (torch, matplotlib, FastAPI, ...), start-up time
#: (a command that must not load what only some of its paths need), or the platform (POSIX-only modules).
LAZY_KINDS = ("extra", "startup", "platform")
LAZY_MARK = re.compile(r"#\s*lazy\((\w+)\):\s*(\S.*)")


@dataclass(frozen=True)
class ImportSite:
    module: str
    line: int
    targets: tuple[str, ...]  # the privml files (module names) it imports
    in_function: bool
    mark: re.Match[str] | None


def _file_of(name: str, modules: dict[str, Path]) -> str | None:
    """The privml file an imported name lives in: the module itself, or the package whose attribute it is."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _import_sites(name: str, path: Path, modules: dict[str, Path]) -> Iterator[ImportSite]:
    """Every import statement of module ``name`` (TYPE_CHECKING blocks included: a cycle of types is a cycle)."""
    text = path.read_text()
    lines = text.splitlines()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST, in_function: bool) -> Iterator[ImportSite]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                if isinstance(child, ast.Import):
                    names = [alias.name for alias in child.names]
                else:
                    base = child.module or ""
                    if child.level:
                        anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                        base = ".".join([*anchor, base] if base else anchor)
                    names = [f"{base}.{alias.name}" for alias in child.names]
                targets = {_file_of(n, modules) for n in names} - {None, name}
                source = "\n".join(lines[child.lineno - 1 : child.end_lineno])
                yield ImportSite(name, child.lineno, tuple(sorted(t for t in targets if t)), in_function,
                                 LAZY_MARK.search(source))
            nested = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from visit(child, in_function or nested)

    yield from visit(ast.parse(text, filename=str(path)), False)


def _unmarked_lazy_imports(modules: dict[str, Path]) -> list[str]:
    out = []
    for name, path in modules.items():
        for site in _import_sites(name, path, modules):
            if site.in_function and (site.mark is None or site.mark.group(1) not in LAZY_KINDS):
                out.append(f"{name}:{site.line}")
    return out


def _cycles(modules: dict[str, Path]) -> list[list[str]]:
    """The import cycles between files (strongly connected components of more than one file), from the
    module-level and function-level imports, leaving out the function-level ones marked with a reason."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for site in _import_sites(name, path, modules):
            if not (site.in_function and site.mark is not None):
                edges[name].update(site.targets)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return cycles


def test_imports_inside_functions_say_why() -> None:
    assert _unmarked_lazy_imports(MODULES) == []


def test_no_import_cycle_between_files() -> None:
    assert _cycles(MODULES) == []


def test_the_cycle_check_sees_a_planted_cycle(tmp_path) -> None:
    root = tmp_path / "privml" / "pkg"
    root.mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from privml.pkg.b import g\n\ndef f():\n    return g\n")
    (root / "b.py").write_text("def g():\n    from privml.pkg import a\n    return a\n")
    (root / "c.py").write_text("def h():\n    from privml.pkg import a  # lazy(startup): planted\n    return a\n")
    planted = {"privml.pkg": root / "__init__.py", "privml.pkg.a": root / "a.py", "privml.pkg.b": root / "b.py",
               "privml.pkg.c": root / "c.py"}
    assert _unmarked_lazy_imports(planted) == ["privml.pkg.b:2"]
    assert _cycles(planted) == [["privml.pkg.a", "privml.pkg.b"]]
    (root / "b.py").write_text("def g():\n    from privml.pkg import a  # lazy(extra): planted\n    return a\n")
    assert _unmarked_lazy_imports(planted) == [] and _cycles(planted) == []


# ----------------------------------------------------------------- private modules (issue 33)
#: The modules (not packages) that are public: users import or run them by their module path. Every other
#: module under src/privml is private: its name, or the name of a package above it, starts with "_"
#: (scikit-learn's convention: a package is the API, it exports its names, its modules are free to move).
PUBLIC_MODULES = {
    # top-level single-module concepts, imported from by README.md and docs/
    "privml.budget",
    "privml.exceptions",
    "privml.guarantee",
    "privml.io",
    "privml.neighbouring",
    "privml.registry",
    "privml.release",
    # the console entry point (pyproject's [project.scripts]; the Makefile and .ci run `python -m privml.cli.main`)
    "privml.cli.main",
}
#: Documented as not API (deliberately broken code shared by the tests and benchmarks): left as it is.
NOT_API = ("privml.testing",)


def _is_private(name: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in name.split("."))


def _public_modules_outside_the_list(modules: dict[str, Path]) -> list[str]:
    return sorted(name for name, path in modules.items()
                  if path.name != "__init__.py" and not _is_private(name) and name not in PUBLIC_MODULES
                  and not _within(*NOT_API)(name))


def test_every_module_but_the_listed_public_ones_is_private() -> None:
    assert _public_modules_outside_the_list(MODULES) == []
    assert PUBLIC_MODULES <= set(MODULES)  # an entry whose module is gone (or renamed) goes too


def test_the_private_module_check_sees_a_public_one(tmp_path) -> None:
    planted = {"privml.linear": PACKAGE / "linear" / "__init__.py", "privml.linear.helpers": tmp_path / "helpers.py",
               "privml.linear._ok": tmp_path / "_ok.py", "privml.torch._ghost.base": tmp_path / "base.py",
               "privml.testing.planted": tmp_path / "planted.py", "privml.budget": PACKAGE / "budget.py"}
    assert _public_modules_outside_the_list(planted) == ["privml.linear.helpers"]
