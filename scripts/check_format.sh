#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format (with the repository's .clang-format) would
# write; lists the files and how to fix them. Checks only: nothing is rewritten.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
command -v clang-format >/dev/null || { echo "clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.hpp' '*.cu' | grep -v '^tests/fixtures/')
[ "${#files[@]}" -gt 0 ] || { echo "no C++ files found under $ROOT" >&2; exit 1; }
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
echo "$(clang-format --version): ${#files[@]} files checked, ${#bad[@]} differ"
if ((${#bad[@]})); then
  printf '  %s\n' "${bad[@]}" >&2
  echo "fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
