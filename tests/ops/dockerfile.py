"""Just enough of a Dockerfile and .dockerignore reader for the tests to run the image's steps
outside Docker: the tests take ENV, ENTRYPOINT, CMD, HEALTHCHECK, RUN and the build context from
the real files, so what they check cannot drift from what the image does."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@dataclass
class Instruction:
    keyword: str  # upper-cased
    args: str  # the rest, continuations joined
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


def instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: comments dropped, backslash continuations joined."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        keyword, _, args = " ".join(p for p in pending if p).partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
        pending = []
    return out


def stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, build stages in order), ARGs substituted into FROM."""
    args: dict[str, str] = {}
    found: list[Stage] = []
    for ins in instructions(text):
        if ins.keyword == "ARG" and not found:
            name, _, default = ins.args.partition("=")
            args[name.strip()] = default.strip()
        elif ins.keyword == "FROM":
            words = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], ""), ins.args).split()
            words = [w for w in words if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            found.append(Stage(words[0], name))
        elif found:
            found[-1].instructions.append(ins)
    return args, found


def exec_form(args: str) -> list[str]:
    """An exec-form (JSON array) argument; raises ValueError for the shell form."""
    value = json.loads(args)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"not an exec-form array: {args}")
    return value


def env(stage: Stage) -> dict[str, str]:
    """The stage's ENV, in order (``ENV a=1 b=2`` and the legacy ``ENV a 1`` both)."""
    out: dict[str, str] = {}
    for ins in stage.all("ENV"):
        words = shlex.split(ins.args)
        if words and "=" not in words[0]:
            out[words[0]] = " ".join(words[1:])
            continue
        for word in words:
            key, _, value = word.partition("=")
            out[key] = value
    return out


def run_flags(args: str) -> tuple[list[str], str]:
    """(``--mount=...`` style flags, the command) of a RUN instruction."""
    flags = []
    while args.startswith("--"):
        flag, _, args = args.partition(" ")
        flags.append(flag)
        args = args.lstrip()
    return flags, args


def healthcheck(stage: Stage) -> tuple[dict[str, str], list[str]]:
    """(options such as ``interval``, the exec-form command) of the stage's HEALTHCHECK."""
    ins = stage.last("HEALTHCHECK")
    if ins is None:
        raise ValueError("no HEALTHCHECK")
    options: dict[str, str] = {}
    rest = ins.args
    while rest.startswith("--"):
        option, _, rest = rest.partition(" ")
        key, _, value = option[2:].partition("=")
        options[key] = value
        rest = rest.lstrip()
    keyword, _, command = rest.partition(" ")
    if keyword.upper() != "CMD":
        raise ValueError(f"HEALTHCHECK {keyword}: expected CMD")
    return options, exec_form(command.strip())


# -- .dockerignore -----------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's pattern syntax: ``*`` and ``?`` stay within one path element, ``**`` crosses them."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            body = pattern[i + 1:end]
            out.append("[" + ("^" + body[1:] if body.startswith(("!", "^")) else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str], str]]:
    """(is an exception ``!``, pattern, its text) per line of a .dockerignore, in order."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        pattern = pattern.strip("/")
        rules.append((negate, _pattern_regex(pattern), pattern))
    return rules


def included(path: str, rules: list[tuple[bool, re.Pattern[str], str]]) -> bool:
    """Whether Docker sends ``path`` (relative, ``/``-separated): the last rule matching the path
    or one of its parent directories decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    keep = True
    for negate, regex, _ in rules:
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            keep = negate
    return keep


def copy_context(source: Path, target: Path) -> list[str]:
    """Copy the build context Docker would send from ``source`` to ``target``; the paths copied.

    A directory is entered only if it is included or an exception names something inside it,
    so .venv and .git are never walked.
    """
    rules = ignore_rules((source / ".dockerignore").read_text())
    exceptions = [text for negate, _, text in rules if negate]
    copied = []
    for directory, dirs, files in os.walk(source):
        base = Path(directory).relative_to(source).as_posix()
        base = "" if base == "." else base + "/"
        dirs[:] = sorted(d for d in dirs if included(base + d, rules)
                         or any(e.startswith(base + d + "/") for e in exceptions))
        for name in [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            dirs.remove(name)  # Docker copies a symlink as a symlink (triolog/broker -> ../broker)
            files.append(name)
        for name in sorted(files):
            relative = base + name
            if not included(relative, rules):
                continue
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(directory) / name, destination, follow_symlinks=False)
            copied.append(relative)
    return copied
