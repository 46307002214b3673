"""The package's layers, read from its own source: no module imports another that imports it back
(directly or through a chain), and imports run one way: in the kernels, measure -> ops -> backends;
in the applications, cli -> commands (measure, finetune, claim, profile) -> shared (options, models, data,
runs, runtime, outputs) -> vitplast_kernels."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"vitplast_kernels": ROOT / "vitplast_kernels", "vitplast": ROOT / "python" / "vitplast"}


def _module_name(pkg: str, path: Path) -> str:
    rel = path.relative_to(PACKAGES[pkg]).with_suffix("")
    parts = [pkg, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _typing_only(tree: ast.AST) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:``: imports for annotations, which never run."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def _imports(pkg: str, path: Path, modules: set[str]) -> set[str]:
    """Modules of the project that ``path`` imports (at any depth of the file, deferred imports inside
    functions included; imports under ``if TYPE_CHECKING:``, for annotations only, are not imports)."""
    name = _module_name(pkg, path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            targets = [f"{stem}.{a.name}" for a in node.names] + [stem]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # 'pkg.mod.func' -> 'pkg.mod'
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    files = {(pkg, p) for pkg, root in PACKAGES.items() for p in root.rglob("*.py")}
    modules = {_module_name(pkg, p) for pkg, p in files}
    graph = {_module_name(pkg, p): _imports(pkg, p, modules) for pkg, p in files}
    # importing a package's submodule runs the package's __init__ first: not an edge of its own
    return {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == 1:
                return stack[stack.index(t):] + [t]
            if t not in state and (found := visit(t)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_typing_only_imports_are_not_imports():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nimport b\n"
                     "def f():\n    import c\n")
    hidden = _typing_only(tree)
    imported = [n.names[0].name for n in ast.walk(tree) if isinstance(n, ast.Import) and id(n) not in hidden]
    assert imported == ["b", "c"]


def test_cycle_detector_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("lower,upper", [("backends", "ops"), ("backends", "measure"), ("ops", "measure"),
                                         ("backends", "testing"), ("ops", "testing"), ("measure", "testing")])
def test_imports_run_one_way(lower, upper):
    graph = _graph()
    bad = [f"{m} -> {t}" for m, ts in graph.items() for t in ts
           if m.startswith(f"vitplast_kernels.{lower}") and t.startswith(f"vitplast_kernels.{upper}")]
    assert not bad, f"{lower} must not import {upper}: {bad}"


COMMANDS = ("measure", "finetune", "claim", "profile", "compare")
# what the commands share, in the one order they import each other: a package imports only those after
# it (runs uses the option groups and the models; the models use the data; the data the option groups'
# types only for annotations), and none imports a command, an integration or cli
SHARED_ORDER = ("criteria", "runs", "options", "models", "data", "runtime", "outputs")
SHARED = SHARED_ORDER


def app_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Edges that break the applications' direction: nothing imports ``cli``; a shared module imports no
    command; a command imports another only through its package (its public function: claim ->
    ``vitplast.finetune``), never its modules; integrations use only vitplast_kernels and the shared
    modules; the kernels never import the applications."""
    bad = []
    for m, ts in graph.items():
        part = m.split(".")
        layer = part[1] if m.startswith("vitplast.") and len(part) > 1 else None
        for t in ts:
            tp = t.split(".")
            target = tp[1] if t.startswith("vitplast.") and len(tp) > 1 else None
            if m.startswith("vitplast_kernels") and t.startswith("vitplast."):
                bad.append(f"{m} -> {t} (kernels import no application)")
            elif target == "cli" and layer != "cli":
                bad.append(f"{m} -> {t} (nothing imports cli)")
            elif layer in SHARED and target in COMMANDS + ("integrations",):
                bad.append(f"{m} -> {t} (shared modules import no command)")
            elif (layer in SHARED and target in SHARED and layer != target
                  and SHARED_ORDER.index(target) < SHARED_ORDER.index(layer)):
                bad.append(f"{m} -> {t} (shared packages import only those after them in "
                           f"{' > '.join(SHARED_ORDER)})")
            elif layer == "integrations" and target in COMMANDS:
                bad.append(f"{m} -> {t} (integrations use vitplast_kernels and the shared modules only)")
            elif layer in COMMANDS and target in COMMANDS and target != layer and len(tp) > 2:
                bad.append(f"{m} -> {t} (a command uses another only through its package's public names)")
    return sorted(bad)


def test_app_imports_run_one_way():
    bad = app_layer_violations(_graph())
    assert not bad, "application layers: " + "; ".join(bad)


@pytest.mark.parametrize("edge", [("vitplast.models.weights", "vitplast.finetune.model"),
                                  ("vitplast.measure.run", "vitplast.cli"),
                                  ("vitplast.claim.finetuning", "vitplast.finetune.loop"),
                                  ("vitplast.integrations.hf_callback", "vitplast.claim"),
                                  ("vitplast.models.digits", "vitplast.runs.paths"),
                                  ("vitplast.options.groups", "vitplast.runs.grid"),
                                  ("vitplast_kernels.measure.capture", "vitplast.models.weights")])
def test_app_layer_check_finds_a_planted_violation(edge):
    graph = _graph()
    graph.setdefault(edge[0], set()).add(edge[1])
    assert any(v.startswith(f"{edge[0]} -> {edge[1]} ") for v in app_layer_violations(graph))


def test_app_package_has_a_small_top_level():
    top = sorted(p.name for p in PACKAGES["vitplast"].glob("*.py"))
    assert len(top) <= 4, f"python/vitplast/ should hold subpackages, not modules: {top}"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for root in PACKAGES.values() for p in root.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450}
    assert not long, f"split these by job (about 400 lines at most): {long}"
