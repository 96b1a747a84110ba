"""Kafka's ``ssl.principal.mapping.rules``: from a client certificate's subject to a user name.

A comma-separated list of rules tried in order; the first that applies names the user:

- ``DEFAULT``: the subject itself (RFC 2253: ``CN=alice,OU=eng,O=acme``);
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower or
  upper case the result): applies when the regular expression matches the whole subject, and
  the user is the subject with the pattern's matches replaced (``$1`` names a group; a group
  number beyond the pattern's is Kafka's: cut to the groups there are, else literal); ``\\/``
  is a slash inside a pattern or replacement, ``\\,`` a comma.

When no rule applies the client is refused, as Kafka refuses it. Pure: parsing and applying.
"""

from __future__ import annotations

import re

__all__ = ["DEFAULT_RULES", "NoMatchingRule", "PrincipalMappingRules"]

DEFAULT_RULES = "DEFAULT"

_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(Exception):
    """No rule applies to the subject: the client cannot be named, so it is refused."""


class _Rule:
    __slots__ = ("pattern", "replacement", "case", "text")

    def __init__(self, text: str, pattern: str | None = None, replacement: str = "", case: str = ""):
        self.text = text
        try:
            self.pattern = None if pattern is None else re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"invalid rule {text!r}: its pattern is not a regular expression: {exc}") from None
        self.replacement = replacement
        self.case = case

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        if self.pattern.fullmatch(subject) is None:
            return None
        # Java's String.replaceAll, which Kafka uses: every match replaced, not only the whole.
        name = self.pattern.sub(lambda match: _expand(self.replacement, match), subject)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _expand(replacement: str, match: re.Match) -> str:
    """Java's replacement syntax: ``$N`` a group (Kafka cuts a number too large digit by digit,
    ``$12`` with one group being group 1 then "2"; with none it stays literal), ``\\x`` is x."""
    groups = match.re.groups
    out = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
            continue
        number = _BACK_REFERENCE.match(replacement, i) if char == "$" else None
        if number is None or groups == 0 or number.group(1).startswith("0"):
            out.append(char)
            i += 1
            continue
        digits = number.group(1)
        while int(digits) > groups and len(digits) > 1:
            digits = digits[:-1]
        if int(digits) > groups:
            out.append(char)
            i += 1
            continue
        out.append(match.group(int(digits)) or "")
        i += 1 + len(digits)
    return "".join(out)


class PrincipalMappingRules:
    """Parsed once from the config value; ``name(subject)`` per verified client certificate."""

    def __init__(self, text: str = DEFAULT_RULES):
        self.text = text
        self.rules: list[_Rule] = []
        for rule in [m.group(1) for m in _SPLITTER.finditer(text.strip())]:
            match = _PARSER.match(rule)
            if match is None or match.end() != len(rule):
                unmatched = rule if match is None else rule[match.end() :]
                raise ValueError(
                    f"invalid rule {rule!r}: {unmatched!r} is not part of a rule "
                    "(DEFAULT, or RULE:pattern/replacement/ with an optional L or U)"
                )
            if match.group(1):
                self.rules.append(_Rule(rule))
            elif match.group(2) is not None:
                self.rules.append(_Rule(rule, match.group(2), match.group(3), match.group(4)))
            # an empty rule (",,") is skipped, as in Kafka

    def name(self, subject: str) -> str:
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return name
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {subject!r}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrincipalMappingRules) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"PrincipalMappingRules({self.text!r})"
