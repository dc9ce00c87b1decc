"""Tests of the unsafe allow-list check (scripts/lib/swift-unsafe.py, which
scripts/check-unsafe.sh runs in CI): what counts as unsafe code and what
does not (comments, string text, names that contain the word), and that a
file outside the list fails the check with its name, as does a listed file
with no unsafe code left. The last test runs the check on this repository.
"""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNER = os.path.join(ROOT, "scripts", "lib", "swift-unsafe.py")

spec = importlib.util.spec_from_file_location("swift_unsafe", SCANNER)
swift_unsafe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(swift_unsafe)


def lines(source):
    return [number for number, _ in swift_unsafe.findings(source)]


class FindingsTests(unittest.TestCase):
    def test_the_keyword_and_the_attributes_count(self):
        self.assertEqual(lines("let p = unsafe f()"), [1])
        self.assertEqual(lines("nonisolated(unsafe) var x = 1"), [1])
        self.assertEqual(lines("unowned(unsafe) let y: C"), [1])
        self.assertEqual(lines("@unsafe func f() {}"), [1])
        self.assertEqual(lines("@safe final class A {}"), [1])
        self.assertEqual(lines("@exclusivity(unchecked) var z = 0"), [1])

    def test_comments_strings_and_names_do_not(self):
        self.assertEqual(lines("// unsafe: why"), [])
        self.assertEqual(lines("/* unsafe /* nested */ unsafe */ let x = 1"), [])
        self.assertEqual(lines('let policy = "style-src \'unsafe-inline\'"'), [])
        self.assertEqual(lines('let code = "template.unsafe-tag"'), [])
        self.assertEqual(lines('let s = "a\\"unsafe"'), [])
        self.assertEqual(lines('let s = """\n  unsafe\n  """\nlet t = 1'), [])
        self.assertEqual(lines("x.withUnsafeBytes { _ in }; let p: UnsafePointer<UInt8>"), [])
        self.assertEqual(lines("Span(_unsafeStart: p, count: 1)"), [])
        self.assertEqual(lines("func refuseUnsafeTags() {}"), [])

    def test_an_interpolation_is_code(self):
        self.assertEqual(lines('let s = "\\(unsafe f())"'), [1])
        self.assertEqual(lines('let s = #"unsafe \\(x) \\#(unsafe y)"#'), [1])
        self.assertEqual(lines('let s = """\n  \\(unsafe x)\n  """'), [2])


class CheckTests(unittest.TestCase):
    def run_check(self, files, allowlist):
        with tempfile.TemporaryDirectory() as root:
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
                with open(os.path.join(root, path), "w") as handle:
                    handle.write(text)
            with open(os.path.join(root, "allow.txt"), "w") as handle:
                handle.write(allowlist)
            result = subprocess.run(
                [sys.executable, SCANNER, root, os.path.join(root, "allow.txt"), "Sources", "Benchmarks"],
                capture_output=True,
                text=True,
            )
            return result.returncode, result.stdout + result.stderr

    def test_a_listed_file_passes(self):
        code, output = self.run_check(
            {"Sources/A/Kernel.swift": "let p = unsafe f()\n", "Sources/A/Pure.swift": "// unsafe in comments only\n"},
            "Sources/A/Kernel.swift  # faces the kernel\n",
        )
        self.assertEqual(code, 0, output)

    def test_a_file_outside_the_list_fails_with_its_name_and_line(self):
        code, output = self.run_check(
            {"Sources/A/Kernel.swift": "let p = unsafe f()\n", "Benchmarks/B/main.swift": "let a = 1\nnonisolated(unsafe) var x = 0\n"},
            "Sources/A/Kernel.swift  # faces the kernel\n",
        )
        self.assertEqual(code, 1)
        self.assertIn("Benchmarks/B/main.swift:2", output)
        self.assertNotIn("Sources/A/Kernel.swift:", output)

    def test_a_listed_file_without_unsafe_code_fails(self):
        code, output = self.run_check(
            {"Sources/A/Kernel.swift": "let p = f() // unsafe once\n"},
            "# comment\nSources/A/Kernel.swift  # faces the kernel\n",
        )
        self.assertEqual(code, 1)
        self.assertIn("allow.txt:2: Sources/A/Kernel.swift is listed but has no unsafe code", output)

    def test_this_repository_passes(self):
        result = subprocess.run([os.path.join(ROOT, "scripts", "check-unsafe.sh")], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
