"""The fields of sagerl's config dataclasses, as the API pages show them: name, type, default, unit, help.

One source of truth: a field's help is what the command line shows for it. For a field declared with
``field(..., metadata={"help": ...})`` (``SAGEConfig``: TRL's ``HfArgumentParser`` and ``--help`` read that
metadata) it is ``metadata["help"]``, and its unit is ``metadata["metavar"]`` (the placeholder argparse prints
after the option, ``--tau nats``; a key argparse accepts, unlike a ``unit`` key, which would break
``HfArgumentParser``). For a plain field it is the attribute's docstring (the string on the line under the
field, which the API reference also reads). Which classes count as config classes, and the test that every
field of each has its help: tests/docs/test_config_fields.py.

Used by the griffe extension of the API reference (docs/_ext/griffe_rst.py: a "Fields" table appended to
each config class's docstring) and by the test. The class is imported when it can be (so a help written as
an f-string and a default computed from a constant show their values); otherwise (the verl plugin's config
without verl installed) its source is read with ``ast``, which gives the defaults as written.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the sagerl beside these docs, whatever else is installed (an editable
    sys.path.insert(0, str(ROOT))  # install of another checkout, as `.venv/bin/mkdocs` would import)
CONFIG_NAME = re.compile(r"(Config|Settings|Params)$")
"""A dataclass of sagerl whose name ends so is a config class: its fields are documented in a table."""
NOT_USER_CONFIG = {
    "sagerl.demo.DemoSettings": "the demo's command-line flags; `python -m sagerl.demo --help` documents them",
    "sagerl.char_lm.CharLMConfig": "the planted task's built-in character models' architecture, not a setting",
    "sagerl.train.run.ResolvedConfig": "what `sagerl train` resolves from a preset and overrides, not a setting",
}
"""Config-named dataclasses that are not users' settings (no table, no help required), with the reason."""
ROLE = re.compile(r":(?:func|mod|class|data|attr|meth|exc|obj|const|py:\w+):`~?\.?([^`]+)`")


@dataclass(frozen=True)
class FieldDoc:
    name: str
    type: str
    default: str  # as Python writes it; "required" when the field has no default
    unit: str  # "" when the field declares none
    help: str  # "" when the field has none (the test fails on it)


def module_file(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def config_classes() -> list[str]:
    """The dotted paths (``module.Class``) of every config class in sagerl, read from the sources."""
    found = []
    for path in sorted((ROOT / "sagerl").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if any(part.startswith("_") and part != "__init__" for part in parts):
            continue
        module = ".".join(p for p in parts if p != "__init__")
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.ClassDef)
                and CONFIG_NAME.search(node.name)
                and not node.name.startswith("_")
                and _is_dataclass(node)
                and f"{module}.{node.name}" not in NOT_USER_CONFIG
            ):
                found.append(f"{module}.{node.name}")
    return found


def _is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if ast.unparse(target).split(".")[-1] == "dataclass":
            return True
    return False


@dataclass
class _Declared:
    name: str
    annotation: str
    default: str
    help: str
    unit: str
    docstring: str


def _declared_fields(module: str, name: str) -> list[_Declared]:
    """The fields a class's body declares (not the inherited ones), read from its source."""
    tree = ast.parse(module_file(module).read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    out = []
    body = cls.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = ast.unparse(node.annotation)
        if annotation.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
            continue
        default, help_text, unit = "required", "", ""
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field":
            keywords = {k.arg: k.value for k in value.keywords}
            if "default" in keywords:
                default = _literal(keywords["default"])
            elif "default_factory" in keywords:
                default = f"{ast.unparse(keywords['default_factory'])}()"
            metadata = keywords.get("metadata")
            if isinstance(metadata, ast.Dict):
                for key, item in zip(metadata.keys, metadata.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(item, ast.Constant):
                        if key.value == "help":
                            help_text = str(item.value)
                        elif key.value == "metavar":
                            unit = str(item.value)
                    elif isinstance(key, ast.Constant) and key.value == "help":
                        help_text = ast.unparse(item)  # an f-string: its value needs the import
        elif value is not None:
            default = _literal(value)
        following = body[i + 1] if i + 1 < len(body) else None
        docstring = ""
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docstring = following.value.value
        out.append(_Declared(node.target.id, annotation, default, help_text, unit, docstring))
    return out


def _literal(node: ast.expr) -> str:
    """A default as written, a literal shown as :func:`_shown` shows a value."""
    try:
        return _shown(ast.literal_eval(node))
    except ValueError:
        return ast.unparse(node)


def _shown(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Path):
        return f'"{value}"'
    return repr(value)


def config_fields(path: str) -> list[FieldDoc]:
    """Every field the config class ``path`` (``module.Class``) declares itself, in source order.

    Raises:
        StopIteration: no class of that name in the module's source.
    """
    module, _, name = path.rpartition(".")
    declared = _declared_fields(module, name)
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:  # the verl plugin without verl: the source as written
        cls = None
    runtime = {f.name: f for f in dataclasses.fields(cls)} if cls is not None else {}
    out = []
    for d in declared:
        # the annotation as written (HfArgumentParser rewrites the fields' types in place)
        default, help_text, unit, annotation = d.default, d.help, d.unit, d.annotation
        f = runtime.get(d.name)
        if f is not None:
            if f.default is not dataclasses.MISSING:
                default = _shown(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                default = _shown(f.default_factory())
            help_text = f.metadata.get("help", "")
            unit = f.metadata.get("metavar", "")
        text = help_text or d.docstring
        out.append(FieldDoc(d.name, annotation, default, unit, " ".join(text.split())))
    return out


def inherited_fields(path: str) -> list[str]:
    """The names of the fields a config class inherits (TRL's GRPOConfig's, verl's PolicyLossConfig's), or
    [] when the class does not import."""
    module, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except ImportError:
        return []
    own = {d.name for d in _declared_fields(module, name)}
    return [f.name for f in dataclasses.fields(cls) if f.init and f.name not in own]


def _cell(text: str) -> str:
    """Help text for a table cell: roles as code, ``|`` escaped outside code spans (inside them a table's
    parser does not split, and an escape would show)."""
    parts = ROLE.sub(lambda m: f"`{m[1]}`", text).split("`")
    return "`".join(part if i % 2 else part.replace("|", "\\|") for i, part in enumerate(parts))


def fields_table(path: str) -> str:
    """The Markdown table of a config class's own fields (the Unit column only when a field has a unit)."""
    fields = config_fields(path)
    with_unit = any(f.unit for f in fields)
    header = ["Field", "Type", "Default", *(["Unit"] if with_unit else []), "Description"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for f in fields:
        cells = [f"`{f.name}`", f"`{f.type}`", f"`{f.default}`"]
        if with_unit:
            cells.append(_cell(f.unit) or "—")
        cells.append(_cell(f.help) or "**(no help)**")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _base_name(path: str) -> str:
    module, _, name = path.rpartition(".")
    base = getattr(importlib.import_module(module), name).__mro__[1]
    return f"{base.__module__.split('.')[0]}.{base.__qualname__}"


SECTION = re.compile(
    r"^(Args|Arguments|Attributes|Raises|Returns|Yields|Examples?|Notes?|Warnings?):\s*$", re.M
)


def docstring_with_table(docstring: str, path: str) -> str:
    """``docstring`` with the class's "Fields" table before its first Google-style section (Raises, ...)."""
    names = inherited_fields(path)
    parts = ["**Fields**", "", fields_table(path)]
    if names:
        parts += [
            "",
            f'??? note "The {len(names)} fields inherited from `{_base_name(path)}`, each with its meaning unchanged"',
            "",
            "    " + ", ".join(f"`{n}`" for n in names),
        ]
    block = "\n".join(parts) + "\n"
    match = SECTION.search(docstring)
    if match is None:
        return f"{docstring.rstrip()}\n\n{block}"
    return f"{docstring[: match.start()].rstrip()}\n\n{block}\n{docstring[match.start() :]}"
