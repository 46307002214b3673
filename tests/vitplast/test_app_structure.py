"""The applications' shape, read from their source: options stay typed (no ``cfg["..."]`` dict reads,
no ``_``-prefixed keys), one job per module (no public function name defined by two modules, besides
the command faces), short functions, and every command with the same three faces."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "python" / "vitplast"
COMMANDS = ("measure", "finetune", "claim", "profile", "compare")
FACES = {"add_arguments", "run"}  # what every command.py defines, by design
# what every module of a registry defines, by design: folder -> the functions of its interface
REGISTRY_FACES = {"runs/executors": {"from_options", "check_options"}}
MAX_FUNCTION_LINES = 80


def _trees():
    return {p: ast.parse(p.read_text()) for p in sorted(APP.rglob("*.py"))}


def dict_reads(tree: ast.AST) -> list[str]:
    """``cfg["key"]`` reads and ``x["_key"]`` / ``x.get("_key")`` test-hook keys."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)):
            name = node.value.id if isinstance(node.value, ast.Name) else None
            if name == "cfg" or node.slice.value.startswith("_"):
                found.append(f"{name}[{node.slice.value!r}] at line {node.lineno}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant)
                and str(node.args[0].value).startswith("_")):
            found.append(f".get({node.args[0].value!r}) at line {node.lineno}")
    return found


def duplicate_public_functions(trees: dict) -> dict[str, list[str]]:
    where = defaultdict(list)
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                if path.name == "command.py" and node.name in FACES:
                    continue
                if node.name in REGISTRY_FACES.get(str(path.parent.relative_to(APP)), ()):
                    continue
                where[node.name].append(str(path.relative_to(APP)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def executor_checks(trees: dict) -> list[str]:
    """Code outside runs/executors/ that asks which executor it holds: compares ``X.executor`` (the
    option naming it) or an executor's ``.name``, or calls ``isinstance(x, SomethingExecutor)``."""
    found = []
    for path, tree in trees.items():
        if "runs/executors" in str(path.parent.relative_to(APP)):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Attribute) and (side.attr == "executor" or (
                            side.attr == "name" and "executor" in ast.unparse(side.value).lower())):
                        found.append(f"{path.relative_to(APP)}:{node.lineno} {ast.unparse(node)}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "isinstance" and len(node.args) == 2
                    and "Executor" in ast.unparse(node.args[1])):
                found.append(f"{path.relative_to(APP)}:{node.lineno} {ast.unparse(node)}")
    return found


def digits_named(trees: dict) -> list[str]:
    """Code outside models/ that names the digits model: its name's constant, its module, or a model
    source's kind compared with ``"digits"`` (docstrings and help texts may name it)."""
    found = []
    for path, tree in trees.items():
        if path.parent.relative_to(APP).parts[:1] == ("models",):
            continue
        for node in ast.walk(tree):
            named = ((isinstance(node, ast.Name) and node.id == "DIGITS_MODEL")
                     or (isinstance(node, ast.alias) and node.name in ("DIGITS_MODEL", "digits"))
                     or (isinstance(node, ast.ImportFrom) and (node.module or "").endswith("models.digits"))
                     or (isinstance(node, ast.Compare) and "source.kind" in ast.unparse(node)
                         and "'digits'" in ast.unparse(node)))
            if named:
                found.append(f"{path.relative_to(APP)}:{getattr(node, 'lineno', '?')}")
    return sorted(set(found))


def long_functions(trees: dict, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    return [f"{p.relative_to(APP)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p, tree in trees.items() for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > limit]


def test_options_are_never_read_back_from_a_dict():
    bad = {str(p.relative_to(APP)): found for p, tree in _trees().items() if (found := dict_reads(tree))}
    assert not bad, f"typed options, not dict keys: {bad}"


def test_no_public_function_is_defined_twice():
    assert not (dups := duplicate_public_functions(_trees())), f"one job, one name: {dups}"


def test_no_code_outside_the_executors_asks_which_executor_it_holds():
    assert not (found := executor_checks(_trees())), f"use the Executor interface instead: {found}"


# measure/ is being rewritten around the criteria (the measuring loop); it still names the digits ViT
NAMES_DIGITS_FOR_NOW = ("measure/",)


def test_no_code_outside_models_names_the_digits_model():
    found = [f for f in digits_named(_trees()) if not f.startswith(NAMES_DIGITS_FOR_NOW)]
    assert not found, f"ask vitplast.models.families (family_of) instead: {found}"


def test_functions_are_short():
    assert not (long := long_functions(_trees())), f"split these by job: {long}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_the_three_faces(command):
    package = APP / command
    assert (package / "options.py").exists()
    tree = ast.parse((package / "command.py").read_text())
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign)
                for target in n.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
                if isinstance(t, ast.Name)}
    faces = defined | (assigned & FACES)  # defined, or made by options.fields.subcommand
    assert defined <= FACES and faces == FACES, (
        f"{command}/command.py defines {sorted(defined)}: add_arguments and run only")
    assert "HELP" in assigned, f"{command}/command.py: the user text of --help (HELP)"


def test_the_checks_find_planted_problems():
    planted = ast.parse("def f(cfg, o):\n    return cfg['lr'] + o.get('_say') + o['_stop_after']\n")
    assert len(dict_reads(planted)) == 3
    twice = {APP / "a.py": ast.parse("def g(): pass"), APP / "b.py": ast.parse("def g(): pass")}
    assert duplicate_public_functions(twice) == {"g": ["a.py", "b.py"]}
    asks = ast.parse("if opts.executor == 'ray': pass\nif executor.name != 'local': pass\n"
                     "isinstance(e, RayExecutor)\nif opts.jobs == 1: pass\n")
    assert len(executor_checks({APP / "claim" / "x.py": asks})) == 3
    assert not executor_checks({APP / "runs" / "executors" / "x.py": asks})
    digits = ast.parse("from ..models.builder import DIGITS_MODEL\nif source.kind == 'digits': pass\n"
                       "from vitplast.models.digits import pretrain\nx = 'digits:5-9'\n")
    assert len(digits_named({APP / "claim" / "x.py": digits})) == 3
    assert not digits_named({APP / "models" / "x.py": digits})
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions({APP / "c.py": ast.parse(f"def h():\n{body}\n")})
