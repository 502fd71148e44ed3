"""The fields of sagerl's config dataclasses, as the API pages show them: name, type, default, unit, help.

One source of truth: a field's help is what the command line shows for it. For a field declared with
``field(..., metadata={"help": ...})`` (``SAGEConfig``: TRL's ``HfArgumentParser`` and ``--help`` read that
metadata) it is ``metadata["help"]``, and its unit is ``metadata["metavar"]`` (the placeholder argparse prints
after the option, ``--tau nats``; a key argparse accepts, unlike a ``unit`` key, which would break
``HfArgumentParser``). For a plain field it is the attribute's docstring (the string on the line under the
field, which the API reference also reads). Which classes count as config classes, and the test that every
field of each has its help: tests/docs/test_config_fields.py.

Used by the griffe extension of the API reference (docs/_ext/griffe_rst.py: a "Fields" table appended to
each config class's docstring) and by the test. The source is read with ``ast`` and the fields' defaults and
helps evaluated with the module's constants and its imports from sagerl (a help written as an f-string
shows its value), without importing the module itself: importing TRL for ``SAGEConfig`` would add seconds
to every build, and the verl plugin's config would need verl. tests/docs/test_config_fields.py checks the
result against the class as TRL's ``HfArgumentParser`` reads it.
"""

from __future__ import annotations

import ast
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
    annotation: str  # as written (HfArgumentParser rewrites a dataclass's field types in place)
    default: ast.expr | None
    default_factory: ast.expr | None
    help: ast.expr | None
    unit: ast.expr | None
    docstring: str


def _class_node(module: str, name: str) -> tuple[ast.Module, ast.ClassDef]:
    tree = ast.parse(module_file(module).read_text(encoding="utf-8"))
    return tree, next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _declared_fields(cls: ast.ClassDef) -> list[_Declared]:
    """The fields a class's body declares (not the inherited ones), as written."""
    out = []
    body = cls.body
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        annotation = ast.unparse(node.annotation)
        if annotation.startswith(("ClassVar", "typing.ClassVar", "InitVar")):
            continue
        default = factory = help_node = unit = None
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field":
            keywords = {k.arg: k.value for k in value.keywords}
            default, factory = keywords.get("default"), keywords.get("default_factory")
            metadata = keywords.get("metadata")
            if isinstance(metadata, ast.Dict):
                entries = {
                    k.value: v
                    for k, v in zip(metadata.keys, metadata.values, strict=True)
                    if isinstance(k, ast.Constant)
                }
                help_node, unit = entries.get("help"), entries.get("metavar")
        else:
            default = value
        following = body[i + 1] if i + 1 < len(body) else None
        docstring = ""
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docstring = following.value.value
        out.append(_Declared(node.target.id, annotation, default, factory, help_node, unit, docstring))
    return out


def _bound(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        return {alias.asname or alias.name for alias in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}


def _namespace(tree: ast.Module, expressions: list[ast.expr]) -> dict:
    """The names ``expressions`` read (the module's constants, what it imports from sagerl, and what those
    read in turn), without importing the module: its engine (TRL, verl) stays unimported, which keeps the
    build fast (importing ``sagerl.train`` imports TRL)."""
    needed = {n.id for e in expressions for n in ast.walk(e) if isinstance(n, ast.Name)}
    statements = [
        node
        for node in tree.body
        if (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sagerl")
        or isinstance(node, ast.Assign | ast.AnnAssign)
    ]
    chosen: list[ast.stmt] = []
    while True:  # what the chosen statements read is needed too
        more = [s for s in statements if s not in chosen and _bound(s) & needed]
        if not more:
            break
        chosen += more
        needed |= {n.id for s in more for n in ast.walk(s) if isinstance(n, ast.Name)}
    namespace: dict = {}
    for node in sorted(chosen, key=lambda s: s.lineno):
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), "<config>", "exec"), namespace)
        except Exception:  # noqa: BLE001 (a name the module takes from its engine: left as written)
            pass
    return namespace


def _value(node: ast.expr, namespace: dict) -> object:
    """The value of an expression of the module (a literal, a constant, an f-string).

    Raises:
        Exception: any the expression raises (a name the namespace lacks).
    """
    return eval(compile(ast.Expression(body=node), "<config>", "eval"), dict(namespace))  # noqa: S307


def _shown(value: object) -> str:
    if isinstance(value, str | Path):
        return f'"{value}"'
    return repr(value)


def config_fields(path: str) -> list[FieldDoc]:
    """Every field the config class ``path`` (``module.Class``) declares itself, in source order, with its
    default and help evaluated as Python would (f-strings, constants), read from the source.

    Raises:
        StopIteration: no class of that name in the module's source.
    """
    module, _, name = path.rpartition(".")
    tree, cls = _class_node(module, name)
    declared = _declared_fields(cls)
    expressions = [
        e for d in declared for e in (d.default, d.default_factory, d.help, d.unit) if e is not None
    ]
    namespace = _namespace(tree, expressions)

    def shown(node: ast.expr | None, call: bool = False) -> str:
        try:
            value = _value(node, namespace)
            return _shown(value() if call else value)
        except Exception:  # noqa: BLE001 (as written)
            return f"{ast.unparse(node)}()" if call else ast.unparse(node)

    def text(node: ast.expr | None) -> str:
        if node is None:
            return ""
        try:
            return str(_value(node, namespace))
        except Exception:  # noqa: BLE001
            return ast.unparse(node)

    out = []
    for d in declared:
        if d.default is not None:
            default = shown(d.default)
        elif d.default_factory is not None:
            default = shown(d.default_factory, call=True)
        else:
            default = "required"
        help_text = text(d.help) or d.docstring
        out.append(FieldDoc(d.name, d.annotation, default, text(d.unit), " ".join(help_text.split())))
    return out + _method_settings(cls)


METHOD_SETTINGS_DECORATOR = "with_method_settings"
"""A config class decorated so (``SAGEConfig``) also has a field for every method setting, which the methods'
modules declare (``sagerl.objective.registry.METHOD_SETTINGS``) and the decorator adds after the class's own."""


def _method_settings(cls: ast.ClassDef) -> list[FieldDoc]:
    """The fields :data:`METHOD_SETTINGS_DECORATOR` adds to ``cls`` (none without it), read off the settings
    (``sagerl.objective`` is pure torch: no engine is imported)."""
    names = {ast.unparse(d.func if isinstance(d, ast.Call) else d).split(".")[-1] for d in cls.decorator_list}
    if METHOD_SETTINGS_DECORATOR not in names:
        return []
    from sagerl.objective.registry import METHOD_SETTINGS

    return [
        FieldDoc(name, s.type, _shown(s.default), s.unit, " ".join(s.help.split()))
        for name, s in METHOD_SETTINGS.items()
    ]


def base_class(path: str) -> str | None:
    """The dotted name of the class a config class extends (``trl.GRPOConfig``), from its module's imports;
    None for a class of its own."""
    module, _, name = path.rpartition(".")
    tree, cls = _class_node(module, name)
    if not cls.bases:
        return None
    base = ast.unparse(cls.bases[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == base:
                    return f"{node.module}.{alias.name}"
    return f"{module}.{base}"


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


SECTION = re.compile(
    r"^(Args|Arguments|Attributes|Raises|Returns|Yields|Examples?|Notes?|Warnings?):\s*$", re.M
)


def docstring_with_table(docstring: str, path: str) -> str:
    """``docstring`` with the class's "Fields" table before its first Google-style section (Raises, ...)."""
    parts = ["**Fields**", "", fields_table(path)]
    base = base_class(path)
    if base is not None:
        parts += ["", f"And every field of `{base}`, each with its meaning unchanged."]
    block = "\n".join(parts) + "\n"
    match = SECTION.search(docstring)
    if match is None:
        return f"{docstring.rstrip()}\n\n{block}"
    return f"{docstring[: match.start()].rstrip()}\n\n{block}\n{docstring[match.start() :]}"
