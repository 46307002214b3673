"""The package's layers, read from its own source: no module imports another that imports it back
(directly or through a chain), no package another that imports it back, and imports run one way: in the
kernels, measure -> ops -> backends; in the applications (DEVELOPERS.md, "Layout and the one import
direction"),

    cli -> commands (measure, finetune, claim, profile, compare), integrations
        -> criteria > runs > options > models > data > runtime > outputs   (the shared packages)
        -> vitplast_kernels

Every import counts: at module top, deferred inside a function, and under ``if TYPE_CHECKING:`` (an
annotation names what a module knows: the models typed with the option groups were a models <-> options
circle). An import inside a function is for an optional dependency or a heavy lazy load only, with the
reason in a comment beside it, and there are at most `MAX_DEFERRED` of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"vitplast_kernels": ROOT / "vitplast_kernels", "vitplast": ROOT / "python" / "vitplast"}
PROJECT = tuple(PACKAGES)


def _module_name(root: Path, pkg: str, path: Path) -> str:
    parts = [pkg, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(name: str, path: Path, modules: set[str]) -> set[str]:
    """Modules of the project that ``path`` (module ``name``) imports, at any depth of the file:
    deferred imports inside functions and imports under ``if TYPE_CHECKING:`` included."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
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


def _graph(packages: dict[str, Path] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules it imports. Importing ``a.b.c`` runs ``a`` and ``a.b`` first, so those
    packages are imported too, except the importer's own packages (already running when it runs)."""
    files = {_module_name(root, pkg, p): p for pkg, root in packages.items() for p in root.rglob("*.py")}
    graph = {}
    for m, path in files.items():
        targets = _imports(m, path, set(files))
        targets |= {p for t in targets for p in _parents(t) if p in files}
        graph[m] = {t for t in targets if t != m and not m.startswith(t + ".")}
    return graph


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between the packages of the applications (``vitplast.claim``, ``vitplast.models``, ...;
    the face ``vitplast`` is one too) and ``vitplast_kernels`` as a whole."""
    def package(m: str) -> str:
        part = m.split(".")
        return ".".join(part[:2]) if part[0] == "vitplast" else part[0]

    out: dict[str, set[str]] = {}
    for m, ts in graph.items():
        out.setdefault(package(m), set()).update(package(t) for t in ts if package(t) != package(m))
    return out


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


def test_no_package_cycle():
    cycle = _cycle(_package_graph(_graph()))
    assert cycle is None, "packages importing each other: " + " -> ".join(cycle)


def test_cycle_detector_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    assert _cycle(_package_graph({"vitplast.models.a": {"vitplast.data.b"},
                                  "vitplast.data.b": {"vitplast.runtime.c"},
                                  "vitplast.runtime.c": {"vitplast.models.d"}})) == [
        "vitplast.data", "vitplast.runtime", "vitplast.models", "vitplast.data"]


def test_a_planted_circle_through_deferred_and_annotation_imports_is_found(tmp_path):
    """The graph is read from the source as written: a circle closed only by an import inside a function
    or only under ``if TYPE_CHECKING:`` is a circle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import pkg.sub.b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n    return g\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import a\n")
    graph = _graph({"pkg": pkg})
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert _cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("")
    assert _cycle(_graph({"pkg": pkg})) is None
    # a package face that imports back what imports into the package is a circle too
    (pkg / "sub" / "__init__.py").write_text("from .. import a\n")
    assert _cycle(_graph({"pkg": pkg})) == ["pkg.a", "pkg.sub", "pkg.a"]


@pytest.mark.parametrize("lower,upper", [("backends", "ops"), ("backends", "measure"), ("ops", "measure"),
                                         ("backends", "testing"), ("ops", "testing"), ("measure", "testing")])
def test_imports_run_one_way(lower, upper):
    graph = _graph()
    bad = [f"{m} -> {t}" for m, ts in graph.items() for t in ts
           if m.startswith(f"vitplast_kernels.{lower}") and t.startswith(f"vitplast_kernels.{upper}")]
    assert not bad, f"{lower} must not import {upper}: {bad}"


COMMANDS = ("measure", "finetune", "claim", "profile", "compare")
# a command builds on another only where named here: a claim is finetuning runs plus an analysis, so claim
# uses finetune's run specs, checks and training loop (from their modules); no other command imports one
COMMAND_BASES = {"claim": ("finetune",)}
# what the commands share, in the one order they import each other: a package imports only those after
# it (runs uses the option groups and the models; the options build the models' and the data's requests;
# the models use the data), and none imports a command, an integration or cli
SHARED_ORDER = ("criteria", "runs", "options", "models", "data", "runtime", "outputs")
SHARED = SHARED_ORDER


def app_layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Edges that break the applications' direction: nothing imports ``cli`` or the face ``vitplast``
    (which the commands' API will import); a shared package imports no command, no integration, and only
    the shared packages after it; a command imports no other command but the ones it builds on
    (`COMMAND_BASES`); integrations use only vitplast_kernels and the shared packages (a command may use
    them: finetune records its steps with the step monitor); the kernels never import the applications."""
    bad = []
    for m, ts in graph.items():
        part = m.split(".")
        layer = part[1] if m.startswith("vitplast.") and len(part) > 1 else None
        for t in ts:
            tp = t.split(".")
            target = tp[1] if t.startswith("vitplast.") and len(tp) > 1 else None
            if m.startswith("vitplast_kernels") and (t == "vitplast" or t.startswith("vitplast.")):
                bad.append(f"{m} -> {t} (kernels import no application)")
            elif t == "vitplast" and m.startswith("vitplast."):
                bad.append(f"{m} -> {t} (nothing inside imports the package's face)")
            elif target == "cli" and layer != "cli":
                bad.append(f"{m} -> {t} (nothing imports cli)")
            elif layer in SHARED and target in COMMANDS + ("integrations",):
                bad.append(f"{m} -> {t} (shared packages import no command and no integration)")
            elif (layer in SHARED and target in SHARED and layer != target
                  and SHARED_ORDER.index(target) < SHARED_ORDER.index(layer)):
                bad.append(f"{m} -> {t} (shared packages import only those after them in "
                           f"{' > '.join(SHARED_ORDER)})")
            elif layer == "integrations" and target in COMMANDS:
                bad.append(f"{m} -> {t} (integrations use vitplast_kernels and the shared packages only)")
            elif (layer in COMMANDS and target in COMMANDS and target != layer
                  and target not in COMMAND_BASES.get(layer, ())):
                bad.append(f"{m} -> {t} (a command imports another only where it builds on it: "
                           f"{COMMAND_BASES})")
    return sorted(bad)


def test_app_imports_run_one_way():
    bad = app_layer_violations(_graph())
    assert not bad, "application layers: " + "; ".join(bad)


@pytest.mark.parametrize("edge", [("vitplast.models.weights", "vitplast.finetune.model"),
                                  ("vitplast.measure.run", "vitplast.cli"),
                                  ("vitplast.finetune.loop", "vitplast.claim.finetuning"),
                                  ("vitplast.measure.run", "vitplast.finetune"),
                                  ("vitplast.integrations.hf_callback", "vitplast.claim"),
                                  ("vitplast.models.digits", "vitplast.runs.paths"),
                                  ("vitplast.models.sources", "vitplast.options.groups"),
                                  ("vitplast.data.transforms", "vitplast.options.groups"),
                                  ("vitplast.data.datasets", "vitplast.models.builder"),
                                  ("vitplast.options.groups", "vitplast.runs.grid"),
                                  ("vitplast.outputs.plots", "vitplast.criteria.result"),
                                  ("vitplast.claim.grid", "vitplast"),
                                  ("vitplast_kernels.measure.capture", "vitplast.models.weights")])
def test_app_layer_check_finds_a_planted_violation(edge):
    graph = _graph()
    graph.setdefault(edge[0], set()).add(edge[1])
    assert any(v.startswith(f"{edge[0]} -> {edge[1]} ") for v in app_layer_violations(graph))


MAX_DEFERRED = 40  # imports of project modules inside functions, in python/vitplast


def deferred_imports(root: Path = PACKAGES["vitplast"]) -> list[tuple[str, int, bool]]:
    """``(file under root, line, reasoned)`` of every import of a project module inside a function under
    ``root``; ``reasoned``: a comment on its line(s) or on the line above says why it waits."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        seen: set[int] = set()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if id(node) in seen:
                    continue
                if isinstance(node, ast.ImportFrom):
                    ours = node.level > 0 or (node.module or "").split(".")[0] in PROJECT
                elif isinstance(node, ast.Import):
                    ours = any(a.name.split(".")[0] in PROJECT for a in node.names)
                else:
                    continue
                seen.add(id(node))
                if ours:
                    near = lines[node.lineno - 2: node.end_lineno]
                    found.append((str(path.relative_to(root)), node.lineno, any("#" in ln for ln in near)))
    return sorted(found)


def test_few_deferred_imports_each_with_its_reason():
    found = deferred_imports()
    assert len(found) <= MAX_DEFERRED, (
        f"{len(found)} imports of project modules inside functions (at most {MAX_DEFERRED}): import at "
        "the module's top unless it is for an optional dependency or a heavy lazy load")
    silent = [f"python/vitplast/{f}:{n}" for f, n, reasoned in found if not reasoned]
    assert not silent, f"say why these imports wait (a comment beside them): {silent}"


def test_deferred_import_count_reads_functions_only(tmp_path):
    (tmp_path / "m.py").write_text("from . import a\n\ndef f():\n    from . import b  # heavy: loads torch\n"
                                   "    def g():\n        import vitplast.c\n    import os\n")
    assert deferred_imports(tmp_path) == [("m.py", 4, True), ("m.py", 6, False)]


def test_app_package_has_a_small_top_level():
    top = sorted(p.name for p in PACKAGES["vitplast"].glob("*.py"))
    assert len(top) <= 4, f"python/vitplast/ should hold subpackages, not modules: {top}"


def test_no_module_over_400_lines():
    long = {str(p.relative_to(ROOT)): n for root in PACKAGES.values() for p in root.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 450}
    assert not long, f"split these by job (about 400 lines at most): {long}"
