"""Reading the YAML files a user writes (experiments, task specs, suites): one loader.

    doc = read_yaml("experiments/demo.yaml")     # never raises for the file's content
    doc.data, doc.line("optimizer", "lr"), doc.problems
    doc = load_yaml(path)                        # UserError when doc.problems

Why not `yaml.safe_load`: it keeps the last of two equal keys without a word
(`steps: 100` ... `steps: 3` trains 3 steps), and it forgets where each key
was, so a bad value could not be reported as `file:line: message`. Here the
document is composed once, every key and list item gets its line, a key given
twice is a problem naming both lines, and the data is then constructed from
the same nodes (the values are exactly safe_load's).
"""
import dataclasses

import yaml

from mtl_framework.errors import UserError
from mtl_framework.numbers import yaml_number  # noqa: F401 (config reads it from here)

# The longest YAML file read (the largest built-in spec is ~10 KB): /dev/zero named as
# a file would otherwise be read until memory runs out.
MAX_CHARACTERS = 16 * 1024 * 1024
# libyaml is ~10x faster and keeps the same line marks.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclasses.dataclass
class YamlDocument:
    path: str
    data: object = None  # what safe_load returns; None for an empty or unreadable file
    lines: dict = dataclasses.field(default_factory=dict)  # key path tuple -> 1-based line
    problems: list = dataclasses.field(default_factory=list)  # [(line, message)]

    def line(self, *where):
        """Line of a key path such as ("optimizer", "lr") or ("tasks", 2); a path that
        has no line of its own (a missing key) gets its nearest enclosing one."""
        while where and where not in self.lines:
            where = where[:-1]
        return self.lines.get(where, 1)

    def where(self, *path):
        """`file:line` of a key path, the start of an error message."""
        return f"{self.path}:{self.line(*path)}"


def parse_yaml(text, path):
    """A YamlDocument from `text`; syntax errors and duplicate keys go to `problems`."""
    doc = YamlDocument(str(path))
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _index(node, (), doc, set())
            problem = _alias_problem(node)
            if problem:
                doc.problems.append(problem)
            else:
                doc.data = loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else 1
        problem = str(error.problem or error.context)
        if error.context and error.problem:
            started = error.context_mark.line + 1 if error.context_mark else line
            where = f" (on line {started})" if started != line else ""
            problem = f"{error.problem} {error.context}{where}"
        doc.problems.append((line, f"YAML syntax error: {problem}"))
        doc.data = None
    except yaml.reader.ReaderError as error:  # a character YAML does not allow (NUL, ...)
        line = text.count("\n", 0, error.position) + 1
        code = ord(error.character) if isinstance(error.character, str) else error.character
        doc.problems.append((line, f"YAML error: {error.reason} (character #x{code:04x}): "
                                   "not a text file?"))
        doc.data = None
    except yaml.YAMLError as error:
        doc.problems.append((1, f"YAML error: {' '.join(str(error).split())}"))
        doc.data = None
    except RecursionError:
        doc.problems.append((1, "YAML nested too deep to read (thousands of levels): "
                                "flatten it"))
        doc.data = None
    finally:
        loader.dispose()
    return doc


def read_yaml(path):
    """parse_yaml of a file; a missing or non-UTF-8 file raises UserError (nothing to index)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CHARACTERS + 1)  # /dev/zero or a huge file: not read whole
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a folder, not a YAML file") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{path}:1: not UTF-8 text ({error.reason}); save it as UTF-8") from None
    except (OSError, ValueError) as error:  # permission, a name too long, a NUL in the name
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise UserError(f"{path!r}: cannot be read ({reason})") from None
    if len(text) > MAX_CHARACTERS:
        raise UserError(f"{path}: more than {MAX_CHARACTERS:,} characters: not an experiment, "
                        "spec or suite file")
    return parse_yaml(text, path)


def load_yaml(path):
    """read_yaml, raising UserError (one `file:line: message` line per problem) if any."""
    doc = read_yaml(path)
    if doc.problems:
        raise UserError("\n".join(f"{doc.path}:{line}: {message}" for line, message in doc.problems))
    return doc


# The most values a document may expand to through its aliases (`*name` repeats the node
# it names): real experiments and specs hold a few thousand; nested aliases (`[*a, *a,
# ...]` of `[*b, *b, ...]`) can reach billions from a kilobyte and hang whatever walks them.
MAX_VALUES = 1_000_000


class _Cycle(Exception):
    """A node reached again inside itself; args[0] is that node."""


def _alias_problem(root):
    """(line, message) for a node that contains itself (a recursive alias) or a document
    whose aliases expand past MAX_VALUES; None otherwise. Each node is visited once."""
    sizes, on_path = {}, set()

    def size(node):
        key = id(node)
        if key in on_path:
            raise _Cycle(node)
        if key not in sizes:
            on_path.add(key)
            children = node.value if isinstance(node, yaml.SequenceNode) else \
                [child for pair in node.value for child in pair] \
                if isinstance(node, yaml.MappingNode) else []
            sizes[key] = 1 + sum(size(child) for child in children)
            on_path.discard(key)
        return sizes[key]

    try:
        total = size(root)
    except _Cycle as cycle:
        return (cycle.args[0].start_mark.line + 1, "YAML alias refers to a node that contains "
                "it (a recursive alias): write the value out instead")
    if total > MAX_VALUES:
        return (1, f"YAML aliases expand this document to {total:,} values (more than "
                   f"{MAX_VALUES:,}: an alias bomb?): write the values out instead")
    return None


def _index(node, where, doc, seen):
    """Lines of every key path; a node reached again through an alias is not walked
    again (its keys keep the lines of where it was written)."""
    doc.lines.setdefault(where, node.start_mark.line + 1)
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_seen = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
            line = key_node.start_mark.line + 1
            if key in first_seen and key != "<<":  # `<<` merges may repeat
                doc.problems.append((line, f"key {key!r} given twice (also on line "
                                           f"{first_seen[key]}); keep one"))
            first_seen.setdefault(key, line)
            doc.lines.setdefault(where + (key,), line)
            _index(value_node, where + (key,), doc, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index(item, where + (index,), doc, seen)
