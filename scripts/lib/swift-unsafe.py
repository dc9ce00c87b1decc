"""Finds the unsafe constructs of Swift files, and checks them against an
allow-list (scripts/check-unsafe.sh runs it; scripts/tests/test_check_unsafe.py
tests it).

What counts, in code (comments and the text of string literals are not
code; an interpolation inside a string is):
- the `unsafe` keyword: `unsafe expr`, `nonisolated(unsafe)`,
  `unowned(unsafe)`, the attribute `@unsafe`;
- `@safe`, which declares a type that holds unsafe parts safe to use;
- `@exclusivity(unchecked)`, which turns off the exclusivity checks.
Names that only contain the word (`withUnsafeBytes`, `UnsafePointer`,
`_unsafeStart:`) are not the keyword: using them is an unsafe construct
that the compiler's strict memory safety makes the file mark `unsafe`.
`@unchecked Sendable` is not counted: it is a claim about data races
(a lock guards the state), not memory safety, and strict memory safety does
not ask for it to be marked.

Usage: swift-unsafe.py ROOT ALLOWLIST DIR...   (exit 1 with the files named)
"""
import os
import re
import sys

PATTERN = re.compile(r"(?<![\w$])(?:unsafe(?![\w$])|@safe(?![\w$])|@exclusivity\s*\(\s*unchecked\s*\))")


def code_only(text):
    """The text with comments and the contents of string literals blanked
    (newlines kept, so line numbers stay), interpolations kept as code."""
    out = []
    i = 0
    n = len(text)
    # Each entry: ("code", paren_depth) for an interpolation, or
    # ("string", terminator, hashes) for a literal.
    stack = [("code", 0)]

    def blank(chunk):
        out.append(re.sub(r"[^\n]", " ", chunk))

    while i < n:
        top = stack[-1]
        if top[0] == "code":
            if text.startswith("//", i):
                end = text.find("\n", i)
                end = n if end < 0 else end
                blank(text[i:end])
                i = end
                continue
            if text.startswith("/*", i):
                depth = 0
                j = i
                while j < n:
                    if text.startswith("/*", j):
                        depth += 1
                        j += 2
                    elif text.startswith("*/", j):
                        depth -= 1
                        j += 2
                        if depth == 0:
                            break
                    else:
                        j += 1
                blank(text[i:j])
                i = j
                continue
            m = re.compile(r'(#*)("""|")').match(text, i)
            if m:
                hashes = len(m.group(1))
                quote = m.group(2)
                out.append(m.group(0))
                i = m.end()
                stack.append(("string", quote, hashes))
                continue
            ch = text[i]
            if ch == "(":
                stack[-1] = ("code", top[1] + 1)
            elif ch == ")":
                if top[1] == 0 and len(stack) > 1:
                    # The end of an interpolation: back into its string.
                    stack.pop()
                    out.append(ch)
                    i += 1
                    continue
                stack[-1] = ("code", max(0, top[1] - 1))
            out.append(ch)
            i += 1
        else:
            _, quote, hashes = top
            closing = quote + "#" * hashes
            escape = "\\" + "#" * hashes
            if text.startswith(closing, i):
                stack.pop()
                out.append(closing)
                i += len(closing)
                continue
            if text.startswith(escape + "(", i):
                out.append(" " * len(escape) + "(")
                i += len(escape) + 1
                stack.append(("code", 0))
                continue
            if text.startswith(escape, i) and i + len(escape) < n:
                blank(text[i : i + len(escape) + 1])
                i += len(escape) + 1
                continue
            if text[i] == "\n" and quote == '"':
                # An unterminated single-line literal: stop treating the rest as a string.
                stack.pop()
            blank(text[i]) if text[i] != "\n" else out.append("\n")
            i += 1
    return "".join(out)


def findings(text):
    """(line number, line) of each unsafe construct in the file's code."""
    code = code_only(text)
    lines = text.split("\n")
    found = []
    for number, line in enumerate(code.split("\n"), start=1):
        if PATTERN.search(line):
            found.append((number, lines[number - 1].strip()))
    return found


def read_allowlist(path):
    allowed = {}
    with open(path, encoding="utf-8") as handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.split("#", 1)[0].strip()
            if line:
                allowed[line] = number
    return allowed


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 64
    root, allowlist_path, directories = argv[1], argv[2], argv[3:]
    allowed = read_allowlist(allowlist_path)
    failures = []
    seen_unsafe = set()
    for directory in directories:
        top = os.path.join(root, directory)
        for folder, subfolders, names in os.walk(top):
            subfolders.sort()
            for name in sorted(names):
                if not name.endswith(".swift"):
                    continue
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as handle:
                    found = findings(handle.read())
                if not found:
                    continue
                seen_unsafe.add(relative)
                if relative not in allowed:
                    number, line = found[0]
                    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
                    failures.append(f"{relative}:{number}: unsafe code outside the allow-list{more}: {line}")
    for path, number in sorted(allowed.items(), key=lambda item: item[1]):
        if path not in seen_unsafe:
            failures.append(
                f"{os.path.relpath(allowlist_path, root)}:{number}: {path} is listed but has no unsafe code"
                " (or no longer exists): take it off the list"
            )
    for failure in failures:
        print("check-unsafe: " + failure, file=sys.stderr)
    if failures:
        print(
            "check-unsafe: unsafe code belongs in the files of scripts/unsafe-allowlist.txt (the ones that face the"
            " kernel or the mapped store); move the code into HallpassSystem, or add the file with the reason it needs it",
            file=sys.stderr,
        )
        return 1
    print(f"check-unsafe: unsafe code only in the {len(seen_unsafe)} allowed files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
