#!/usr/bin/env bash
# Fetch a corpus of real PDFs (written by other people) for ragline's parse tests and
# benchmarks, from Debian documentation packages, into tests/corpus/cache/ (gitignored).
#
#   tests/corpus/fetch.sh            # idempotent: does nothing once the corpus is complete
#   FORCE=1 tests/corpus/fetch.sh    # start over
#   PYTHON=/path/to/python ...       # interpreter with pymupdf (default: python3)
#
# Result:
#   cache/pdfs/<package>__<name>.pdf   ~200 distinct real PDFs (~17,000 pages, ~130 MB)
#   cache/broken/*.pdf                 truncated, zero-byte, encrypted, not-a-pdf, garbage
#   cache/big/big-2000.pdf             2,000 pages made by concatenating corpus PDFs
#
# Needs: apt-get (Debian bookworm lists; runs `apt-get update` when they are missing),
# dpkg-deb, and a Python with pymupdf. Downloads ~90 MB.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="$here/cache"
python="${PYTHON:-python3}"

# Text-heavy (TeX package manuals, R and Octave references) and image-heavy (expeyes
# manuals with photos and screenshots, beamer examples, gutenprint, gm-assistant).
packages=(
  texlive-latex-recommended-doc
  texlive-fonts-recommended-doc
  gnuplot-doc
  r-doc-pdf
  octave-doc
  asymptote-doc
  expeyes-doc-en
  gm-assistant-doc
  gutenprint-doc
  auto-multiple-choice-doc-pdf
)

if [[ "${FORCE:-0}" == 1 ]]; then
  rm -rf "$cache"
fi
if [[ -f "$cache/.complete" ]]; then
  echo "corpus already fetched: $cache"
  exit 0
fi

"$python" -c 'import pymupdf' 2>/dev/null || {
  echo "error: $python cannot import pymupdf; set PYTHON to the project's interpreter" >&2
  exit 1
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache/pdfs" "$work/debs" "$work/root"

# apt-cache knows nothing until the package lists were fetched once on this machine.
if ! apt-cache show "${packages[0]}" >/dev/null 2>&1; then
  apt-get update -qq
fi

# apt-get download writes into the current directory. Its stderr is kept quiet: as root it
# warns that the _apt sandbox user cannot write there, which is harmless.
if ! (cd "$work/debs" && apt-get download -q "${packages[@]}") 2>"$work/apt.err"; then
  cat "$work/apt.err" >&2
  exit 1
fi

for deb in "$work"/debs/*.deb; do
  pkg="$(basename "$deb")"
  pkg="${pkg%%_*}"
  dpkg-deb -x "$deb" "$work/root/$pkg"
done

# Copy each PDF once (several packages install the same file under two paths).
"$python" "$here/make_variants.py" collect "$work/root" "$cache/pdfs"
"$python" "$here/make_variants.py" broken "$cache/pdfs" "$cache/broken"
"$python" "$here/make_variants.py" big "$cache/pdfs" "$cache/big/big-2000.pdf" 2000

touch "$cache/.complete"
echo "corpus ready: $cache"
