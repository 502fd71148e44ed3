"""The pages' math, typeset as MathML at build time (docs/_ext/math_hook.py): what a formula becomes, and
the formulas that would not show in a browser fail the build with the page and the formula."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError

from tests.docs.blocks import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import math_hook  # noqa: E402


def _page(name: str = "objective.md"):
    return SimpleNamespace(file=SimpleNamespace(src_uri=name))


def test_inline_and_displayed_math_become_mathml():
    html = (
        '<p>with <span class="arithmatex">\\(q &gt; 0\\)</span>, and</p>\n'
        '<div class="arithmatex">\\[\\pi^\\star \\propto q\\,\\pi_{\\text{ref}}\\]</div>'
    )
    out = math_hook.on_page_content(html, page=_page())
    assert "arithmatex" not in out
    assert '<span class="math"><math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">' in out
    assert "<mo>&#x0003E;</mo>" in out  # q > 0: the HTML escape undone before conversion
    assert '<div class="math"><math xmlns="http://www.w3.org/1998/Math/MathML" display="block"' in out


def test_punctuation_stays_with_its_formula():
    html = '<p>branch (<span class="arithmatex">\\(q\\)</span>), or</p>'
    out = math_hook.on_page_content(html, page=_page())
    assert out.startswith('<p>branch <span class="math">(<math') and out.endswith("</math>),</span> or</p>")


def test_sim_is_the_relation():
    assert "<mo>&#x0223C;</mo>" in math_hook.to_mathml(r"y \sim \pi", display=False)


@pytest.mark.parametrize(
    "latex, message",
    [
        (r"\mathbf{1}", 'mathvariant="bold" is not MathML Core'),
        (r"\begin{aligned} a &= b \end{aligned}", "latex2mathml"),
        (r"\nosuchcommand x", "unknown command \\nosuchcommand"),
    ],
)
def test_math_a_browser_would_not_show_fails_the_build(latex, message):
    html = f'<span class="arithmatex">\\({latex}\\)</span>'
    with pytest.raises(PluginError) as error:
        math_hook.on_page_content(html, page=_page("methods.md"))
    assert str(error.value).startswith("methods.md: the formula ") and message in str(error.value)
