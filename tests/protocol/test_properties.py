"""The one .properties parser (broker config files and the client's --command-config): Java's
syntax, checked against a table, against java.util.Properties itself, and round-tripped through
its formatter."""

from __future__ import annotations

import subprocess
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from triolog.protocol.properties import format_properties, parse_properties


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a=1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("a\t1", {"a": "1"}),
        ("a\f1", {"a": "1"}),
        ("  a  =  1  ", {"a": "1  "}),  # Java keeps a value's trailing whitespace
        ("a = b = c", {"a": "b = c"}),
        ("a:=1", {"a": "=1"}),
        ("a =:1", {"a": ":1"}),
        ("a  =  =1", {"a": "=1"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("=1", {"": "1"}),
        (":1", {"": "1"}),
        ("# comment\n! also a comment\n   # indented comment\na=1", {"a": "1"}),
        ("a=1 # not a comment", {"a": "1 # not a comment"}),
        ("\n\n   \na=1\n\n", {"a": "1"}),
        ("a=1\r\nb=2\rc=3\n", {"a": "1", "b": "2", "c": "3"}),
        ("a=1\na=2", {"a": "2"}),
        ("a=x,\\\n    y,\\\n\ty", {"a": "x,y,y"}),
        ("a=1\\\n", {"a": "1"}),
        ("a=1\\", {"a": "1"}),
        ("a=1\\\\\nb=2", {"a": "1\\", "b": "2"}),
        ("a=1\\\\\\\n2", {"a": "1\\2"}),
        ("# comment \\\na=1", {"a": "1"}),
        ("a=1\\\n# continued, not a comment", {"a": "1# continued, not a comment"}),
        ("a=1\\\n\nb=2", {"a": "1", "b": "2"}),
        ("a=1\\\r\n  2", {"a": "12"}),
        ("ke\\\n  y=v", {"key": "v"}),
        ("key\\ with\\ spaces = v", {"key with spaces": "v"}),
        ("k\\=e\\:y=v", {"k=e:y": "v"}),
        ("k\\\\=v", {"k\\": "v"}),
        ("k\\te\\u0079=v", {"k\tey": "v"}),
        ("a=tab\\there\\nline\\r\\f", {"a": "tab\there\nline\r\f"}),
        ("a=\\u0041\\u00e9\\u20AC", {"a": "Aé€"}),
        ("\\u0061\\u003d=1", {"a=": "1"}),
        ("a=\\q\\#", {"a": "q#"}),
        ("a=trailing\\ ", {"a": "trailing "}),
        ("a=\\ leading", {"a": " leading"}),
        ("a=é€ unicode", {"a": "é€ unicode"}),
        ("a=1\x0b", {"a": "1\x0b"}),
        ("a=1\u2028b=2", {"a": "1\u2028b=2"}),
        ("a=1\x85", {"a": "1\x85"}),
        ("\fa=1", {"a": "1"}),
        ("C:\\\\certs\\\\ca.pem", {"C": "\\certs\\ca.pem"}),
        ("", {}),
    ],
)
def test_parse_properties_follows_java_syntax(text, expected):
    assert parse_properties(text) == expected


@pytest.mark.parametrize("text", ["a=\\u12", "a=\\u12zz", "a=\\uXYZW", "\\u00=1"])
def test_parse_properties_rejects_a_malformed_unicode_escape(text):
    with pytest.raises(ValueError, match=r"line 1: malformed \\uXXXX escape"):
        parse_properties(text)


def test_parse_properties_names_the_line_of_a_bad_escape():
    with pytest.raises(ValueError, match="line 4"):
        parse_properties("# c\na=1\\\n 2\nb=\\u1")


_ANY_TEXT = st.text(st.characters(blacklist_categories=("Cs",)))


@given(st.dictionaries(_ANY_TEXT, _ANY_TEXT))
def test_format_properties_round_trips_through_parse(props):
    assert parse_properties(format_properties(props)) == props


def test_format_properties_writes_readable_lines_escaping_only_what_it_must():
    assert format_properties({"log.dirs": "/data", "a b": " x=y ", "#k": "t\tn\nu\x01é"}) == (
        "log.dirs=/data\na\\ b=\\ x\\=y\\ \n\\#k=t\\tn\\nu\\u0001é\n")


# -- against java.util.Properties itself --------------------------------------------------------

_JAVA = textwrap.dedent("""
    import java.io.*;
    import java.nio.charset.StandardCharsets;
    import java.nio.file.*;
    import java.util.*;

    public class LoadProperties {
        static String hex(String s) {
            StringBuilder out = new StringBuilder();
            for (char c : s.toCharArray()) out.append(String.format("%04x", (int) c));
            return out.toString();
        }

        public static void main(String[] args) throws IOException {
            for (String name : args) {
                StringBuilder line = new StringBuilder(name);
                Properties props = new Properties();
                try (Reader reader = Files.newBufferedReader(Paths.get(name), StandardCharsets.UTF_8)) {
                    props.load(reader);
                    for (String key : props.stringPropertyNames())
                        line.append('\\t').append(hex(key)).append(':').append(hex(props.getProperty(key)));
                } catch (IllegalArgumentException e) {
                    line.append("\\tERROR");
                }
                System.out.println(line);
            }
        }
    }
""")


def _unhex(text: str) -> str:
    """Java's UTF-16 units back into a string: a surrogate pair is one character, as in Java."""
    units = bytes.fromhex(text)
    return units.decode("utf-16-be", "surrogatepass")


def _java_load(tmp_path, texts: list[str]) -> list[dict[str, str] | None]:
    """What java.util.Properties.load (from a UTF-8 Reader) makes of each text: None if it refuses it."""
    source = tmp_path / "LoadProperties.java"
    source.write_text(_JAVA)
    names = []
    for i, text in enumerate(texts):
        path = tmp_path / f"{i}.properties"
        path.write_bytes(text.encode("utf-8"))
        names.append(str(path))
    out = subprocess.run(["java", str(source), *names], capture_output=True, text=True, check=True, timeout=120)
    results = []
    for line in out.stdout.splitlines():
        _, *entries = line.split("\t")
        if entries == ["ERROR"]:
            results.append(None)
        else:
            results.append(dict(tuple(map(_unhex, entry.split(":"))) for entry in entries))
    assert len(results) == len(texts)
    return results


#: Texts made of what the syntax is about (separators, whitespace, escapes, comments, line ends).
_TRICKY = st.lists(st.sampled_from(["=", ":", " ", "\t", "\f", "\\", "#", "!", "\n", "\r", "\r\n", "u", "0",
                                    "4", "1", "a", "b", "t", "n", "é", "\x0b", "\u2028", "\\u0041", "\\u003d",
                                    "\\uD83D", "\\uDE00"]),
                   max_size=30).map("".join)


def _ours(text: str) -> dict[str, str] | None:
    try:
        return parse_properties(text)
    except ValueError:
        return None


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.data_too_large])
@given(texts=st.lists(_TRICKY, min_size=150, max_size=150))
def test_parse_properties_reads_what_java_reads(tmp_path, texts):
    """One JVM reads a batch of texts: ours must read each as java.util.Properties.load does."""
    java = _java_load(tmp_path, texts)
    mismatches = [(text, _ours(text), theirs) for text, theirs in zip(texts, java) if _ours(text) != theirs]
    assert mismatches == []


def test_parse_properties_joins_an_escaped_surrogate_pair_into_one_character():
    """Properties.store writes a character beyond the BMP as two \\uXXXX escapes (meta.properties
    is written so): read back, they are that one character again."""
    assert parse_properties("k\\uD83D\\uDE00=v\\uD83D\\uDE00\\u00e9\n") == {"k\U0001F600": "v\U0001F600\u00e9"}
    assert parse_properties("k=\\uD83D") == {"k": "\ud83d"}  # a lone surrogate stays, as in Java
