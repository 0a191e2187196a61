#!/bin/bash
# Debian's man pages as plain text, one directory per language, for bench/vocab_coverage.py --held-dir:
#   bash bench/man_text.sh OUT   ->  OUT/<lang>/<page>.txt (OUT/en: sections 5, 7 and 8)
# Each page rendered by man -l at 80 columns, overstrikes removed (col -bx); a page that fails renders empty.
set -euo pipefail
out=${1:?usage: bash bench/man_text.sh OUT}
render() {  # render SRC-FILE DEST-DIR
    mkdir -p "$2"
    MANWIDTH=80 LANG=C.UTF-8 timeout 20 man -l "$1" 2>/dev/null | col -bx > "$2/$(basename "$1" .gz).txt" || true
}
for src in /usr/share/man/*/; do
    lang=$(basename "$src")
    case "$lang" in man*) continue ;; esac
    find "$src" -type f -name '*.gz' | sort | while read -r f; do render "$f" "$out/$lang"; done
done
find /usr/share/man/man5 /usr/share/man/man7 /usr/share/man/man8 -type f -name '*.gz' | sort |
    while read -r f; do render "$f" "$out/en"; done
