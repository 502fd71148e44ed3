"""Typesets the pages' math at build time: LaTeX to MathML, so the site needs no script, no font and no
network to show a formula, from a server or from file:// (a MkDocs hook, mkdocs.yml ``hooks``).

Pages write ``$...$`` inline and ``$$...$$`` displayed (on lines of their own); pymdownx.arithmatex finds them
(so a ``$`` in a code span or block is never math) and wraps them in ``<span class="arithmatex">\\(...\\)`` /
``<div class="arithmatex">\\[...\\]``; this hook turns each into MathML Core with latex2mathml, the
markup Chromium, Firefox and Safari render natively. A formula that latex2mathml cannot convert, or that needs
something outside MathML Core (``\\mathbf``, ``aligned``), fails the build with the page and the formula.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

from latex2mathml.converter import convert
from mkdocs.exceptions import PluginError

# An inline formula with the punctuation that touches it ("(q)", "$q$," ...): kept on one line together.
INLINE = re.compile(r'([(\[]?)<span class="arithmatex">\\\((.*?)\\\)</span>([)\].,;:!?]*)', re.S)
BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)
MATHML = "{http://www.w3.org/1998/Math/MathML}"
CORE = {
    "math", "mi", "mn", "mo", "ms", "mtext", "mspace", "mrow", "mfrac", "msqrt", "mroot", "mstyle", "merror",
    "mpadded", "mphantom", "msub", "msup", "msubsup", "munder", "mover", "munderover", "mmultiscripts",
    "mprescripts", "none", "mtable", "mtr", "mtd", "semantics", "annotation", "annotation-xml",
}  # fmt: skip
"""The elements of MathML Core (w3.org/TR/mathml-core), what browsers render."""
# latex2mathml writes \sim as an identifier "~"; the relation is U+223C.
FIXES = ((r"\sim", r"\thicksim"),)


def to_mathml(latex: str, display: bool) -> str:
    """MathML Core for one formula.

    Raises:
        ValueError: latex2mathml fails, or its output uses something outside MathML Core.
    """
    for old, new in FIXES:
        latex = re.sub(re.escape(old) + r"(?![A-Za-z])", new.replace("\\", "\\\\"), latex)
    try:
        mathml = convert(latex, display="block" if display else "inline")
        root = ET.fromstring(mathml)
    except Exception as exc:  # latex2mathml raises its own exception types, or writes XML that does not parse
        raise ValueError(f"latex2mathml: {type(exc).__name__}: {exc}") from None
    for element in root.iter():
        tag = element.tag.removeprefix(MATHML)
        if tag not in CORE:
            raise ValueError(f"<{tag}> is not MathML Core")
        variant = element.get("mathvariant")
        if variant not in (None, "normal"):
            raise ValueError(f'mathvariant="{variant}" is not MathML Core (write the Unicode letter: 𝔼, 𝐱)')
        if tag == "mi" and element.text and element.text.startswith("\\"):
            raise ValueError(f"unknown command {element.text}")
    if display:
        mathml = mathml.replace('display="block"', 'display="block" class="md-math-block"', 1)
    return mathml


def _convert(page: str, latex: str, display: bool) -> str:
    latex = html.unescape(latex).strip()
    try:
        return to_mathml(latex, display)
    except ValueError as exc:
        raise PluginError(f"{page}: the formula {latex!r}: {exc}") from None


def on_page_content(html_text: str, page, **kwargs) -> str:
    where = page.file.src_uri
    html_text = BLOCK.sub(lambda m: f'<div class="math">{_convert(where, m[1], True)}</div>', html_text)
    return INLINE.sub(
        lambda m: f'<span class="math">{m[1]}{_convert(where, m[2], False)}{m[3]}</span>', html_text
    )
