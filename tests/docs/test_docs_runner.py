"""The docs runner itself: it parses the blocks and directives as documented, and it fails on what makes
documentation stale — a wrong directory name, a flag that does not exist, a long command without its
time, an output line that is not printed, a command it cannot run."""

from __future__ import annotations

import pytest
from docs_blocks import Block, Directive, commands, needs_time, output_matches, page_blocks, parse_directive
from test_docs import Page, run_block


def _block(code: str, language: str = "bash", **directive) -> Block:
    return Block("planted.md", 1, language, code, Directive(**directive))


def _run(block: Block, tmp_path) -> None:
    run_block(block, Page(tmp_path, {}))


def test_directives_and_blocks_are_parsed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("intro\n\n<!-- docs-test\nslow\nsmall: --steps 2\nreplace: a => b\nsetup:\n    x = 1\n"
                    "    y = 2\n-->\n```bash\nvitplast measure \\\n    --out res  # about 5 s\n```\n\n"
                    "```text\nnot run\n```\n\n```console\n$ vitplast compare a\n"
                    "vitplast compare: error: ...\n$ echo $?\n2\n```\n")
    import docs_blocks

    root, docs_blocks.ROOT = docs_blocks.ROOT, tmp_path
    try:
        blocks = page_blocks(page)
    finally:
        docs_blocks.ROOT = root
    assert [(b.language, b.line) for b in blocks] == [("bash", 11), ("console", 20)]
    d = blocks[0].directive
    assert d.slow and d.small == ["--steps", "2"] and d.replace == [("a", "b")] and d.setup == "x = 1\ny = 2"
    (cmd,) = commands(blocks[0])
    assert cmd.argv == ["vitplast", "measure", "--out", "res"] and cmd.comment == "about 5 s"
    console = commands(blocks[1])
    assert [c.argv for c in console] == [["vitplast", "compare", "a"], ["echo", "$?"]]
    assert console[0].expected == ["vitplast compare: error: ..."] and console[1].expected == ["2"]
    with pytest.raises(ValueError, match="give the reason"):
        parse_directive("skip:")
    assert blocks[0].part == "page.md" and parse_directive("part: shards").part == "shards"
    with pytest.raises(ValueError, match="give its name"):
        parse_directive("part:")


def test_output_lines_match_in_order_with_ellipses():
    out = "model: x\nranking: FC1 (1.0) > MHA (0.5)\nwrote res/plasticity.json\n"
    assert output_matches(["ranking: FC1 (...) > ...", "wrote ..."], out) is None
    assert output_matches(["wrote ...", "ranking: ..."], out) == "ranking: ..."


def test_long_commands_are_known():
    for line, long in (("make test", True), ("make install", False), ("vitplast finetune --out x", True),
                       ("vitplast claim --out x --dry-run", False), ("vitplast measure", False),
                       ("torchrun --nproc-per-node 2 -m vitplast.cli finetune", True)):
        assert needs_time(commands(_block(line))[0]) is long, line


@pytest.mark.parametrize("code, message", [
    ("vitplast measure --weights runs/c10/MHA_lr0.001_seed0", "ended with status 2"),
    ("vitplast measure --batch-sise 4", "ended with status 2"),
    ("vitplast finetune --train MHA --out runs/x", "takes long: say how long"),
    ("make the-docs", "ended with status 2"),
    ("pip install 'vitplast-kernels[nosuchextra]'", "ended with status 1"),
    ("python -m bench.compare --no-such-flag", "ended with status 1"),
    ("rm -rf /", "ended with status 127"),
])
def test_stale_commands_fail(tmp_path, code, message):
    with pytest.raises(AssertionError, match=message):
        _run(_block(code), tmp_path)


def test_a_missing_output_line_fails(tmp_path):
    with pytest.raises(AssertionError, match="printed no line"):
        _run(_block("$ vitplast compare a\nvitplast compare: error: no such thing", "console"), tmp_path)
    _run(_block("$ vitplast compare a\nvitplast compare: error: RUN: give at least two ...\n$ echo $?\n2",
                "console"), tmp_path)
