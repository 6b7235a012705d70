"""YAML input, read one way everywhere: run and sweep configs, mapping files, --noise snippets.

Users hand aimcemu YAML they wrote or were sent, so it is parsed as untrusted input: safe_load
only (no Python objects), and bounded so that no document can exhaust memory or the stack:

    size       at most YAML_MAX_BYTES (1 MiB) of UTF-8; configs are a few KB
    depth      at most YAML_MAX_DEPTH (64) levels of nesting, also after aliases are expanded
    aliases    at most YAML_MAX_ALIASES (100); a config needs none
    expanded   at most YAML_MAX_NODES (100 000) values once every alias is expanded (an alias
               bomb is refused before it is built), and no alias cycles
    keys       no key given twice in one mapping (the last one would silently win)
    integers   at most YAML_MAX_INT_BITS (4096) bits; larger ones Python cannot print in a message

Numbers in exponent form without a dot or exponent sign (5e-1, 1.0e5) are floats, as in YAML 1.2.

Every violation, a syntax error and bytes that are not UTF-8 raise aimcemu.FormatError naming
the file (or the command-line option) and the field '<yaml>' (or the key), with the line.
"""
from __future__ import annotations

import re
from typing import Any

from .validate import decode, fail, input_file, text

YAML_MAX_BYTES = 1 << 20
YAML_MAX_DEPTH = 64
YAML_MAX_ALIASES = 100
YAML_MAX_NODES = 100_000
YAML_MAX_INT_BITS = 4096  # about 1233 decimal digits; any int Python can still print


def load_yaml(path: Any, field: str = "config", source: str = "<arguments>", what: str = "YAML file") -> Any:
    """A YAML file, bounded (see the module docstring): a regular file of at most
    YAML_MAX_BYTES, valid UTF-8, parsed with limits on depth, aliases and expanded size, and
    no key given twice in one mapping.  Errors name the file."""
    path = input_file(path, field, source, what)
    with open(path, "rb") as f:
        raw = f.read(YAML_MAX_BYTES + 1)
    if len(raw) > YAML_MAX_BYTES:
        raise fail(path, "<file>", f"larger than {YAML_MAX_BYTES // 1024} KiB; a config is a few KB")
    return parse_yaml(decode(raw, path), path)


def parse_yaml(content: str, source: str) -> Any:
    """YAML text with the same limits as load_yaml; `source` names it in errors."""
    import yaml

    content = text(content, "<yaml>", source)
    if len(content.encode("utf-8")) > YAML_MAX_BYTES:
        raise fail(source, "<yaml>", f"larger than {YAML_MAX_BYTES // 1024} KiB")
    loader = None
    try:
        loader = _bounded_loader()(content, source)  # the reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, source)
        _check_duplicate_keys(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise fail(source, "<yaml>", _one_line(exc)) from None
    finally:
        if loader is not None:
            loader.dispose()


def _one_line(exc) -> str:
    """A PyYAML error on one line, with its line and column: PyYAML's own message spans several
    lines and names the text '<unicode string>' instead of the file or flag it came from."""
    import yaml

    if isinstance(exc, yaml.reader.ReaderError):
        return f"unacceptable character #x{exc.character:04x} at character {exc.position + 1}: {exc.reason}" \
            if isinstance(exc.character, int) else f"cannot read character {exc.position + 1}: {exc.reason}"
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
    where = _mark(exc.problem_mark or exc.context_mark)
    if exc.context and exc.problem:
        start = f" that starts at {_mark(exc.context_mark)}" if exc.context_mark is not None else ""
        where += f"; {' '.join(exc.context.split())}{start}"
    return f"{problem} ({where})" if where else problem


def _mark(mark) -> str:
    return "" if mark is None else f"line {mark.line + 1}, column {mark.column + 1}"


_LOADER = None


def _bounded_loader():
    """yaml.SafeLoader with depth, alias and duplicate-key checks (built once, on first use)."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        def __init__(self, stream, source: str):
            super().__init__(stream)
            self.source, self.depth, self.aliases = source, 0, 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > YAML_MAX_ALIASES:
                    mark = self.peek_event().start_mark
                    raise fail(self.source, "<yaml>", f"more than {YAML_MAX_ALIASES} aliases (line {mark.line + 1}); "
                                                      "a config needs none")
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > YAML_MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise fail(self.source, "<yaml>", f"nested deeper than {YAML_MAX_DEPTH} levels (line {mark.line + 1})")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_int(self, node):
            # Python refuses to read or print an int of more than 4300 decimal digits (ValueError,
            # in the reader and in any message that shows the value): no option takes one anyway.
            # The length is checked first: PyYAML builds a base-60 integer (1:59:59:...) in time
            # quadratic in its length (40 s of CPU for 1 MiB).  No spelling of an int of at most
            # YAML_MAX_INT_BITS bits needs more characters than a sign, "0b" and one digit per bit
            # (underscores aside); only leading zeros could, and no option needs thousands.
            value = None
            if len(node.value.replace("_", "")) <= YAML_MAX_INT_BITS + 3:
                try:
                    value = super().construct_yaml_int(node)
                except ValueError:
                    pass
            if value is None or value.bit_length() > YAML_MAX_INT_BITS:
                raise fail(self.source, "<yaml>", f"an integer of {len(node.value)} characters "
                                                  f"(line {node.start_mark.line + 1}); no option takes one that large")
            return value

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
    # YAML 1.1, which PyYAML implements, reads a number in exponent form without a dot (5e-1, 1E3)
    # or without a sign in its exponent (1.0e5) as a string; YAML 1.2 and every other language a
    # researcher writes them in read a float.  A string there would be refused as a noise scale
    # or taken as a layer name, so such scalars resolve to floats here.
    BoundedLoader.add_implicit_resolver("tag:yaml.org,2002:float", _EXPONENT_FLOAT, list("-+.0123456789"))
    _LOADER = BoundedLoader
    return _LOADER


_EXPONENT_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$")


def _check_expanded_size(root, source: str) -> None:
    """Refuses a document that, with every alias expanded, holds more than YAML_MAX_NODES
    values or nests deeper than YAML_MAX_DEPTH, or whose aliases form a cycle (all things that
    later code, which walks the expanded structure, cannot survive).  Linear in the distinct
    nodes: a node reached through several aliases is measured once."""
    import yaml

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    in_progress: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            children = _children(node, yaml)
            in_progress.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            line = node.start_mark.line + 1
            if size[key] > YAML_MAX_NODES:
                raise fail(source, "<yaml>", f"more than {YAML_MAX_NODES} values once aliases are expanded "
                                             f"(line {line}); a config needs far fewer")
            if depth[key] > YAML_MAX_DEPTH:
                raise fail(source, "<yaml>", f"nested deeper than {YAML_MAX_DEPTH} levels once aliases are "
                                             f"expanded (line {line})")
            continue
        if key in size:
            continue
        if key in in_progress:
            raise fail(source, "<yaml>", f"an alias refers to a value that contains it (line {node.start_mark.line + 1})")
        in_progress.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node, yaml))


def _check_duplicate_keys(root, source: str) -> None:
    """Refuses a key given twice in one mapping (the last one would silently win), naming it by
    its whole path ('layers.head', not 'head').  Each distinct node is visited once (aliases share
    nodes; _check_expanded_size has ruled out cycles), under the first path that reaches it."""
    import yaml

    visited: set[int] = set()
    stack = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in visited:
            continue
        visited.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    stack.append((value_node, path))
                    continue
                name = f"{path}.{key_node.value}" if path else str(key_node.value)
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise fail(source, name, f"given twice in one mapping (lines {seen[key] + 1} and "
                                             f"{key_node.start_mark.line + 1})")
                seen[key] = key_node.start_mark.line
                stack.append((value_node, name))


def _children(node, yaml) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []
