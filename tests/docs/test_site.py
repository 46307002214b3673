"""The built documentation site reads right: no raw reST markup (roles such as ``:func:``, ``Usage::``
blocks) reaches the rendered API reference, and help texts are plain words. Builds the site with
``mkdocs build --strict`` into a temporary folder (``make test`` builds it too, before the tests)."""

from __future__ import annotations

import re

import pytest

RAW_ROLE = re.compile(r":(mod|func|meth|class|attr|data|obj|exc):(<code>|`)")


@pytest.mark.slow
def test_no_raw_rest_markup_in_the_built_site(site):
    found = []
    for page in site.rglob("*.html"):
        text = page.read_text(errors="replace")
        found += [f"{page.relative_to(site)}: {m.group(0)}" for m in RAW_ROLE.finditer(text)]
        found += [f"{page.relative_to(site)}: Usage::" for _ in re.finditer(r"Usage::", text)]
    assert not found, f"{len(found)} raw reST markups, e.g. {found[:5]}"


@pytest.mark.parametrize("command", ["measure", "finetune", "claim", "profile", "compare"])
def test_help_texts_are_plain_words(command, capsys):
    from vitplast.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and not RAW_ROLE.search(text), text


@pytest.mark.slow
def test_site_carries_pages_not_build_scripts(site):
    """The site ships no Python (docs/generate.py makes docs/generated/ and stays out of it); the home
    page shows the demo's heatmap and its formulas as math (arithmatex spans, typeset by MathJax)."""
    assert not list(site.rglob("*.py"))
    home = (site / "index.html").read_text()
    assert 'src="generated/demo/plasticity_heatmap.png"' in home
    assert (site / "generated" / "demo" / "plasticity_heatmap.png").is_file()
    assert 'class="arithmatex"' in home and "\\frac{" in home


@pytest.mark.slow
def test_the_claim_page_shows_tables_not_a_wide_text_block(site):
    """The claim guide shows the default claim as tables, and none of its code blocks is wider than the
    content column holds without scrolling (about 80 characters of the theme's monospace at 1280 px;
    tests/docs/test_browser.py measures it in a browser)."""
    import html

    page = (site / "guides" / "claim.html").read_text()
    assert page.count("<table>") >= 2 and "Verdict:" in page
    widths = [len(line) for pre in re.findall(r"<pre.*?</pre>", page, re.S)
              for line in html.unescape(re.sub(r"<[^>]+>", "", pre)).splitlines()]
    assert max(widths) <= 80, f"a code block line of {max(widths)} characters"
