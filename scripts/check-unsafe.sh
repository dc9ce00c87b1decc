#!/usr/bin/env bash
# Fails, naming the file and line, when a Swift file under Sources/,
# Fuzz/Targets or Benchmarks contains unsafe code and is not in
# scripts/unsafe-allowlist.txt; and when a listed file has none left (so the
# list stays as short as the code allows). scripts/test.sh runs it in CI.
#
# What counts, in code (comments and the text of string literals are not
# code; an interpolation inside a string is): the `unsafe` keyword
# (`unsafe expr`, `nonisolated(unsafe)`, `unowned(unsafe)`, `@unsafe`),
# `@safe`, and `@exclusivity(unchecked)`. Names that merely contain the
# word (`withUnsafeBytes`, `UnsafePointer`) are not counted: strict memory
# safety (Package.swift) already makes every use of them be marked
# `unsafe`, which is what is counted. `@unchecked Sendable` is not counted:
# it is a claim about data races, not memory safety. The scanner is
# scripts/lib/swift-unsafe.py; scripts/tests/test_check_unsafe.py tests it.
#   scripts/check-unsafe.sh
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/lib/swift-unsafe.py . scripts/unsafe-allowlist.txt Sources Fuzz/Targets Benchmarks
