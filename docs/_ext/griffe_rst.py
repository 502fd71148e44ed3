"""A griffe extension for the API reference: sagerl's docstrings use a few reStructuredText spellings
(``:func:`name```, ``Layout::`` before a literal block) and name parameters that share a description on
one line (``q_min, q_max: the clamp``); rewrite them as Markdown and Google style when griffe reads a
docstring, so that they render as code and as one entry per parameter (griffe then still checks every
documented name against the signature). Loaded by mkdocs.yml
(``plugins.mkdocstrings.handlers.python.options.extensions``); nothing else uses it.

:class:`ConfigFields` gives each config class (docs/_ext/config_fields.py says which) a table of its fields
with their type, default, unit and help, and keeps the fields out of the member list (the table shows them)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import griffe

sys.path.insert(0, str(Path(__file__).resolve().parent))
import config_fields  # noqa: E402  (beside this file; mkdocstrings loads this file by path)

ROLE = re.compile(r":(?:func|mod|class|data|attr|meth|exc|obj|const|py:\w+):`~?([^`]+)`")
LITERAL = re.compile(r"::\s*$", re.M)
SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Attributes|Keyword Args):\s*$")
GROUPED = re.compile(r"^(\s+)([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)+)(\s*\([^)]*\))?:(.*)$")


def split_grouped_parameters(text: str) -> str:
    """``a, b: text`` inside an Args/Attributes section -> ``a: text`` and ``b: text`` (continuation
    lines copied under each)."""
    lines = text.splitlines()
    out: list[str] = []
    section_indent = None
    i = 0
    while i < len(lines):
        line = lines[i]
        header = SECTION.match(line)
        if header:
            section_indent = len(header[1])
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        if line.strip() and section_indent is not None and indent <= section_indent:
            section_indent = None
        grouped = GROUPED.match(line) if section_indent is not None else None
        if grouped is None:
            out.append(line)
            i += 1
            continue
        block = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            block.append(lines[i])
            i += 1
        trailing = []
        while block and not block[-1].strip():
            trailing.append(block.pop())
        for name in re.split(r"\s*,\s*", grouped[2]):
            out.append(f"{grouped[1]}{name}{grouped[3] or ''}:{grouped[4]}")
            out.extend(block)
        out.extend(trailing)
    return "\n".join(out)


def rst_to_markdown(text: str) -> str:
    """``:func:`x``` -> ```x``` (a code span); a line ending in ``::`` ends in ``:`` (the indented block
    under it is a Markdown code block already)."""
    text = ROLE.sub(lambda m: f"`{m[1]}`", text)
    return split_grouped_parameters(LITERAL.sub(":", text))


class RstRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)


class ConfigFields(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path != "sagerl":
            return
        for path in config_fields.config_classes():
            cls = pkg.get_member(path.removeprefix("sagerl."))
            value = cls.docstring.value if cls.docstring is not None else ""
            cls.docstring = griffe.Docstring(
                config_fields.docstring_with_table(value, path),
                lineno=cls.docstring.lineno if cls.docstring is not None else cls.lineno,
                endlineno=cls.docstring.endlineno if cls.docstring is not None else cls.lineno,
                parent=cls,
            )
            for field in config_fields.config_fields(path):  # shown by the table, not as members (an
                if field.name in cls.members:  # attribute without a docstring is not rendered; it stays in
                    cls.members[field.name].docstring = None  # the signature)


CODE_SPAN = re.compile(r"(?<![`\[])(``?)(~?\.?[A-Za-z_][\w.]*)(\(\))?\1(?![`\]])")
DIRECTIVE = re.compile(r"^::: (\S+)((?:\n    .*)*)", re.M)


def rendered_modules(api_dir: Path) -> set[str]:
    """The modules whose members the API pages render (``::: module`` without ``members: false``)."""
    found = set()
    for page in api_dir.glob("*.md"):
        for match in DIRECTIVE.finditer(page.read_text(encoding="utf-8")):
            if not re.search(r"^\s+members:\s*false\s*$", match[2], re.M):
                found.add(match[1])
    return found


class CrossReferences(griffe.Extension):
    """Names in docstrings link to their entries: a code span holding a name (``GuideParams``,
    ``sagerl.objective.sage_loss``, ``.worker.SAGETrainingWorker``, ``compute_advantages()``, and the
    reStructuredText roles RstRoles turned into code spans) that resolves, in the docstring's scope, to an
    object the API pages render becomes a mkdocs-autorefs link to it; any other code span stays as it is
    (a config key, a file name, a value)."""

    def __init__(self) -> None:
        super().__init__()
        self.rendered = rendered_modules(Path(__file__).resolve().parents[1] / "api")

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        if pkg.path != "sagerl":
            return
        for obj in self._walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = self._link(obj, obj.docstring.value)

    def _walk(self, obj: griffe.Object):
        yield obj
        for member in list(obj.members.values()):
            if not member.is_alias:
                yield from self._walk(member)

    def _link(self, scope: griffe.Object, text: str) -> str:
        out, fenced = [], False
        for line in text.split("\n"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            out.append(line if fenced else CODE_SPAN.sub(lambda m: self._replace(scope, m), line))
        return "\n".join(out)

    def _replace(self, scope: griffe.Object, match: re.Match) -> str:
        name = match[2].lstrip("~")
        target = self._target(scope, name)
        if target is None:
            return match[0]
        shown = name.rsplit(".", 1)[-1] if match[2].startswith("~") or name.startswith(".") else name
        return f"[`{shown}{match[3] or ''}`][{target}]"

    def _target(self, scope: griffe.Object, name: str) -> str | None:
        """The canonical path of what ``name`` names, if the API pages render it."""
        collection = scope.modules_collection
        try:
            if name.startswith("."):  # relative to the docstring's package
                module = scope if scope.is_module else scope.module
                package = module if module.is_package else module.parent
                path = f"{package.path}{name}"
            elif "." in name and name.split(".")[0] == "sagerl":
                path = name
            else:
                head, _, rest = name.partition(".")
                path = scope.resolve(head) + (f".{rest}" if rest else "")
            obj = collection[path]
            while obj.is_alias:
                obj = obj.final_target
        except (KeyError, griffe.NameResolutionError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
        return obj.path if self._is_rendered(obj) else None

    def _is_rendered(self, obj: griffe.Object) -> bool:
        if not obj.path.startswith("sagerl.") or any(p.startswith("_") for p in obj.path.split(".")[1:]):
            return False
        if obj.is_module:
            return obj.path in self.rendered
        chain = []
        node = obj
        while not node.is_module:
            chain.append(node)
            node = node.parent
        return node.path in self.rendered and all(
            o.docstring is not None and o.docstring.value for o in chain
        )
