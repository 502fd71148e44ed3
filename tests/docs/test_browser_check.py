"""The browser check (tests/docs/browser_check.py, `make docs-check`) finds each fault it promises, on a page
made to have them. Needs Chromium and chromedriver (`make setup-browser`; `make test` installs them first)."""

from __future__ import annotations

import shutil

import pytest

from tests.docs import browser_check

pytestmark = pytest.mark.skipif(
    shutil.which("chromedriver") is None or not any(shutil.which(b) for b in browser_check.BROWSERS),
    reason="no Chromium/chromedriver: make setup-browser installs them",
)

PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<script src="https://cdn.example.org/worker-shim.js"></script></head>
<body><div class="md-content" style="width: 600px"><div class="md-content__inner md-typeset">
<pre><code style="display: block; overflow: auto">{long_line}</code></pre>
<img src="missing.png" alt="a figure">
<p>Typeset: <span class="arithmatex">\\(q\\)</span>; raw: $\\beta = 0.05$.</p>
<table><tr><td style="width: 40px; display: block"><code style="word-break: break-all">grpo+branch_token</code></td></tr></table>
</div></div></body></html>
"""


def test_the_check_finds_each_fault(tmp_path):
    (tmp_path / "index.html").write_text(PAGE.format(long_line="x" * 200), encoding="utf-8")
    failures = browser_check.check(tmp_path).failures
    wide = [f.split(": ", 1)[1] for f in failures if f.startswith("index.html @ 1280 px")]
    expected = [
        "code block overflows its column by",
        "image does not load: missing.png",
        "math left untypeset: \\(q\\)",
        'raw LaTeX in the text: "$\\\\beta = 0.05$"',
        "identifier broken over two lines in a table: grpo+branch_token",
        "no search box",
        "network request (the site must work offline): https://cdn.example.org/worker-shim.js",
    ]
    for message in expected:
        assert any(f.startswith(message) for f in wide), (message, wide)
    assert any("page scrolls sideways" in f for f in failures if "@ 390 px" in f), failures
