"""Documentation that cannot go stale: every Python, bash and console block of README.md and docs/ runs
here, with small settings (`docs_blocks` says what runs and how a block is annotated); the
README stays a front door and relative links point to files that exist. (``make test`` and ``make docs``
build the site with ``mkdocs build --strict``.)

``vitplast`` commands run in this process through `vitplast.cli.main` in the page's own directory,
with the small settings of `SMALL` that the line does not set itself appended (fewer batches and
steps: the flags the page shows are checked, the work is cut); the digits ViT is the shipped one, the
model every reader's command uses. ``make`` targets are checked to exist (``make test`` is this suite),
``pip install`` lines to name extras and pins the project has, ``python -m bench.*`` lines to name flags
their ``--help`` lists; ``torchrun`` runs for real, in a subprocess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.util
import io
import os
import re
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from docs_blocks import (
    ROOT,
    TIME,
    Block,
    Command,
    commands,
    documentation_pages,
    needs_time,
    output_matches,
    page_blocks,
)

SMALL = {  # appended to each vitplast command (argparse keeps the last value of a flag)
    "measure": ["--batches", "1", "--batch-size", "16", "--no-progress"],
    "finetune": ["--steps", "4", "--batch-size", "16", "--eval-limit", "64", "--monitor-every", "2",
                 "--no-progress"],
    "claim": ["--steps", "2", "--seed", "0,1", "--lr", "0.01", "--optimizer", "sgd", "--pairs", "32",
              "--pair-batch", "16", "--bootstrap", "20", "--permutations", "100", "--eval-limit", "64",
              "--no-progress"],
    "profile": ["--reps", "1", "--batch-size", "2", "--depth", "2", "--no-layers"],
    "compare": [],
}
README_MAX_LINES = 150


@dataclasses.dataclass
class Page:
    """What a page's blocks (of one part of it, `Block.part`) share: a directory, a namespace and the
    blocks run so far."""

    directory: Path
    namespace: dict
    done: int = 0
    status: int = 0  # the last command's exit status ($ echo $?)


PAGES: dict[str, Page] = {}  # by Block.part
BLOCKS = [b for p in documentation_pages() for b in page_blocks(p)]


def _slow_deselected(config) -> bool:
    return "not slow" in (config.getoption("markexpr") or "")


@pytest.fixture(scope="module", autouse=True)
def _pages_end_with_the_module():
    """The pages' namespaces (their models and monitors) are dropped after the last block, and Dynamo's
    hook-guard setting, which their monitors and troubleshooting.md change, is given back."""
    before = torch._dynamo.config.skip_nnmodule_hook_guards
    yield
    PAGES.clear()
    gc.collect()
    torch._dynamo.reset()
    torch._dynamo.config.skip_nnmodule_hook_guards = before


@pytest.fixture(scope="session")
def digits_cache(tmp_path_factory):
    """An empty ``$VITPLAST_CACHE``: the pages' default model is the shipped digits ViT (the one every
    reader gets), and nothing a page runs reads or fills the user's cache."""
    cache = tmp_path_factory.mktemp("digits-cache")
    before = os.environ.get("VITPLAST_CACHE")
    os.environ["VITPLAST_CACHE"] = str(cache)
    yield cache
    if before is None:
        os.environ.pop("VITPLAST_CACHE", None)
    else:
        os.environ["VITPLAST_CACHE"] = before


def make_images(folder: str | os.PathLike, classes: int = 2, per_class: int = 8, size: int = 40) -> Path:
    """An ImageFolder of random PNGs (``folder/class_k/img_i.png``), for pages that show ``--data DIR``."""
    from PIL import Image

    gen = torch.Generator().manual_seed(0)
    root = Path(folder)
    for k in range(classes):
        (root / f"class_{k}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = (torch.rand(size, size, 3, generator=gen) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / f"class_{k}" / f"img_{i}.png")
    return root


def save_weights(model_name: str, path: str | os.PathLike, **kwargs) -> Path:
    """A timm model's random weights as a safetensors checkpoint (a stand-in for pretrained ones)."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model(model_name, pretrained=False, **kwargs)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return Path(path)


HELPERS = {"make_images": make_images, "save_weights": save_weights}


@contextlib.contextmanager
def _in(directory: Path):
    before = os.getcwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


# ------------------------------------------------------------------------------------------ commands
def small_flags(command: str, given: list[str]) -> list[str]:
    """The small settings of ``vitplast COMMAND`` that the command line does not set itself (what a page
    shows explicitly, an error's trigger for one, is run as shown; ``small:`` in a directive overrides)."""
    flags = SMALL.get(command, [])
    out, i = [], 0
    while i < len(flags):
        takes_value = i + 1 < len(flags) and not flags[i + 1].startswith("--")
        if flags[i] not in given:
            out += flags[i:i + 1 + takes_value]
        i += 1 + takes_value
    return out


def _vitplast(argv: list[str], block: Block) -> tuple[int, str]:
    from vitplast.cli import main

    small = [] if block.directive.as_is or not argv else small_flags(argv[0], argv[1:])
    if "--help" in argv or "--version" in argv or "--dry-run" in argv:
        small = [f for f in small if f == "--no-progress"] if "--dry-run" in argv else []
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main([*argv, *small, *block.directive.small])
        except SystemExit as exc:  # --help, --version, bad usage: argparse ends them
            status = int(exc.code or 0)
    return status, out.getvalue() + err.getvalue()


def _make(argv: list[str]) -> tuple[int, str]:
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    missing = [t for t in argv[1:] if not t.startswith("-") and "=" not in t and t not in targets]
    return (2, f"make: no target {missing}") if missing else (0, "")


def _pip(argv: list[str]) -> tuple[int, str]:
    table = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([\w-]+)\s*=", table, re.M))
    problems = []
    for word in argv[2:]:
        m = re.fullmatch(r"(?:vitplast-kernels|\.)\[([\w,-]+)\]", word)
        if m:
            problems += [f"no extra {e!r}" for e in m.group(1).split(",") if e not in extras]
        pin = re.fullmatch(r"torch==([\w.]+)", word)
        if pin and not torch.__version__.startswith(pin.group(1)):
            problems.append(f"pinned torch {pin.group(1)}, the project runs {torch.__version__}")
    return (1, "; ".join(problems)) if problems else (0, "")


def _python_module(argv: list[str]) -> tuple[int, str]:
    """``python -m bench.X FLAGS``: the module's ``--help`` lists every flag used (nothing is timed)."""
    module = argv[2]
    if not module.startswith("bench."):
        return 1, f"the docs runner runs python -m bench.* only, got {module}"
    out = io.StringIO()
    saved = sys.argv
    sys.argv = [module, "--help"]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), _in(ROOT):
            with contextlib.suppress(SystemExit):
                runpy.run_module(module, run_name="__main__")
    finally:
        sys.argv = saved
    flags = [a.split("=")[0] for a in argv[3:] if a.startswith("--")]
    missing = [f for f in flags if f not in out.getvalue()]
    return (1, f"{module} --help lists no {missing}") if missing else (0, out.getvalue())


def _torchrun(argv: list[str], env: dict, block: Block) -> tuple[int, str]:
    rest = argv[1:]
    if "vitplast.cli" in rest:
        k = rest.index("vitplast.cli")
        sub = rest[k + 1] if k + 1 < len(rest) else ""
        small = [] if block.directive.as_is else small_flags(sub, rest[k + 2:])
        rest = [*rest, *small, *block.directive.small]
    torchrun = Path(sys.executable).with_name("torchrun")
    proc = subprocess.run([str(torchrun), *rest], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})
    return proc.returncode, proc.stdout + proc.stderr


def run_command(cmd: Command, page: Page, block: Block) -> tuple[int, str]:
    argv, env = list(cmd.argv), {}
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
        key, _, value = argv.pop(0).partition("=")
        env[key] = value
    name = argv[0] if argv else ""
    if name == "echo" and argv[1:] == ["$?"]:
        return 0, str(page.status)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        if name == "vitplast":
            return _vitplast(argv[1:], block)
        if name == "python" and argv[1:2] == ["-m"] and argv[2:3] == ["vitplast.cli"]:
            return _vitplast(argv[3:], block)
        if name == "make":
            return _make(argv)
        if name == "pip" and argv[1:2] == ["install"]:
            return _pip(argv)
        if name == "python" and argv[1:2] == ["-m"]:
            return _python_module(argv)
        if name == "torchrun":
            return _torchrun(argv, env, block)
        if name in ("ls", "tensorboard"):  # what a page shows is there (tensorboard: its --logdir)
            paths = [a for a in argv[1:] if not a.startswith("-")]
            missing = [p for p in paths if not Path(p).exists()]
            return (2, f"{name}: no {missing}") if missing else (0, "\n".join(sorted(
                q.name for p in paths for q in (Path(p).iterdir() if Path(p).is_dir() else [Path(p)]))))
        return 127, f"the docs runner does not run {name!r}: add a handler to test_docs.py or a skip"
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------------------------------ blocks
def _code(block: Block) -> str:
    code = block.code
    for old, new in block.directive.replace:
        assert old in code, f"{block.id}: replace: {old!r} is not in the block"
        code = code.replace(old, new)
    return code


def run_block(block: Block, page: Page) -> None:
    with _in(page.directory):
        if block.directive.setup:
            exec(compile(block.directive.setup, f"{block.id} (setup)", "exec"), page.namespace)
        if block.language == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(_code(block), block.id, "exec"), page.namespace)
            return
        shown = dataclasses.replace(block, code=_code(block))
        for cmd in commands(shown):
            if needs_time(cmd) and not any("error:" in line for line in cmd.expected):  # errors are quick
                assert TIME.search(cmd.comment), (
                    f"{block.id}: {cmd.text!r} takes long: say how long in its comment (# about N min ...)")
            start = time.perf_counter()
            status, output = run_command(cmd, page, block)
            page.status = status
            if block.language == "console":
                missing = output_matches(cmd.expected, output)
                assert missing is None, f"{block.id}: {cmd.text!r} printed no line {missing!r}:\n{output}"
                continue  # a console block shows its status with $ echo $?
            assert status == 0, (f"{block.id}: {cmd.text!r} ended with status {status} after "
                                 f"{time.perf_counter() - start:.1f} s:\n{output[-3000:]}")


def _missing(block: Block) -> str | None:
    """Why ``block`` cannot run here: its skip reason, or what it needs that is not installed."""
    d = block.directive
    if d.skip:
        return d.skip
    for need in d.needs:
        if need == "cuda" and not torch.cuda.is_available():
            return "needs CUDA"
        if need != "cuda" and importlib.util.find_spec(need) is None:
            return f"needs {need}"
    return None


def _runs_now(block: Block, config) -> bool:
    """Whether an earlier block of a page runs before a selected one (slow ones only with slow tests)."""
    return _missing(block) is None and not (block.directive.slow and _slow_deselected(config))


def _param(block: Block):
    # a page's blocks (a part's) share one namespace and folder: under pytest-xdist (--dist loadgroup)
    # they run in one worker, in order, instead of each worker running the earlier blocks again; the
    # parts of a long page may run in both workers
    marks = [pytest.mark.xdist_group(block.part)] + ([pytest.mark.slow] if block.directive.slow else [])
    return pytest.param(block, id=block.id, marks=marks)


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_block_runs(block, digits_cache, tmp_path_factory, request):
    reason = _missing(block)
    if reason:
        pytest.skip(reason)
    page = PAGES.get(block.part)
    if page is None:
        name = re.sub(r"\W", "_", block.part)
        page = PAGES[block.part] = Page(tmp_path_factory.mktemp(name), {"__name__": "docs", **HELPERS})
    mine = [b for b in BLOCKS if b.part == block.part]
    index = mine.index(block)
    for earlier in mine[page.done:index]:  # blocks of the page not yet run (a -k selection): run them now
        if _runs_now(earlier, request.config):
            run_block(earlier, page)
    page.done = max(page.done, index + 1)
    run_block(block, page)


# ------------------------------------------------------------------------------------------ the site
def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: keep it a front door"


def test_pages_link_to_pages_that_exist():
    """Relative links of the README and the pages point to files of the repository."""
    broken = []
    for page in documentation_pages():
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken
