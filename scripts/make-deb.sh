#!/usr/bin/env bash
# make deb: score's Debian packages into build/deb/, checked by lintian, and
# a local apt repository of them in build/deb/repo/ (docs/admin/packages.md).
#
#   scripts/make-deb.sh                   packages of the version in
#                                         packaging/debian/changelog
#   DEB_VERSION=0.1.0+2 scripts/make-deb.sh
#                                         the same tree as another version (a
#                                         changelog entry is added to the copy)
#
# The tree is copied (tracked and untracked files that git does not ignore)
# to build/deb/work/score/, packaging/debian/ becomes its debian/,
# and dpkg-buildpackage -b builds the binary packages there.  The run fails
# if lintian reports an error or a warning (build/deb/lintian.txt).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${DEB_OUT:-$ROOT/build/deb}
# The work tree and cargo's target directory do not depend on OUT: a build
# into another directory or of another version then reuses what the last one
# compiled (cargo keys its incremental state by the workspace's path).  A
# lock keeps two runs from sharing them at once.
WORK=$ROOT/build/deb-work
say() { echo "make-deb: $*" >&2; }
die() { say "error: $*"; exit 1; }

for tool in dpkg-buildpackage dh lintian help2man dpkg-scanpackages git; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)"
done
cd "$ROOT"
git rev-parse --git-dir >/dev/null 2>&1 || die "$ROOT is not a git checkout: make deb copies the files git knows"

changelog_version=$(dpkg-parsechangelog -l packaging/debian/changelog -S Version)
version=${DEB_VERSION:-$changelog_version}
[[ $version =~ ^[0-9][A-Za-z0-9.+~]*$ ]] ||
  die "DEB_VERSION '$version' is not a native Debian version (digits first, then letters, digits, . + ~)"
src=$WORK/score
mkdir -p "$WORK"
exec 9>"$WORK/lock"
flock -w 3600 9 || die "another make deb holds $WORK/lock"

say "copying the tree to $src"
rm -rf "$src"
mkdir -p "$src"
# -co: tracked and untracked files; --exclude-standard: not what git ignores
# (build/ among them).  Files deleted in the working tree are skipped.
git ls-files -z -co --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  tar --null -T - -cf - | tar -xf - -C "$src"
cp -a packaging/debian "$src/debian"
# One source of truth for the units: packaging/systemd/.
for unit in scored-master scored-agent; do
  cp packaging/systemd/$unit.service "$src/debian/scored.$unit.service"
done
if [ "$version" != "$changelog_version" ]; then
  say "adding a changelog entry for $version"
  {
    echo "score ($version) unstable; urgency=medium"
    echo
    echo "  * Rebuilt as $version by make deb (DEB_VERSION)."
    echo
    # A second after the source's own entry: lintian wants a newer date.
    epoch=$(dpkg-parsechangelog -l packaging/debian/changelog -S Timestamp)
    echo " -- score developers <score-dev@lists.example.org>  $(date -R -u -d "@$((epoch + 1))")"
    echo
    cat packaging/debian/changelog
  } > "$src/debian/changelog"
fi

# The Rust programs build in a target directory of their own; the first
# time, it starts as a copy of the main build's, whose compiled crates cargo
# then reuses (only the workspace's own crates build again).
cargo_dir=$WORK/cargo
if [ ! -d "$cargo_dir" ] && [ -d "$ROOT/build/cargo/release" ]; then
  say "seeding $cargo_dir from build/cargo (compiled crates)"
  mkdir -p "$cargo_dir"
  # Under cargo's own lock of that directory, so that a cargo run there
  # (make test compiles its tests meanwhile) leaves no half-written crate
  # in the copy.
  flock -w 3600 "$ROOT/build/cargo/release/.cargo-lock" cp -a "$ROOT/build/cargo/release" "$cargo_dir/"
fi
say "building the packages (dpkg-buildpackage -b; the Rust programs build in $cargo_dir)"
mkdir -p "$OUT"
(
  cd "$src"
  CARGO_TARGET_DIR=$cargo_dir dpkg-buildpackage -b -us -uc --no-sign >"$WORK/build.log" 2>&1
) || { tail -40 "$WORK/build.log" >&2; die "dpkg-buildpackage failed; the whole log is $WORK/build.log"; }

rm -f "$OUT"/*.deb "$OUT"/*.changes "$OUT"/*.buildinfo
mv "$WORK"/*_"$version"_*.deb "$WORK"/*_"$version"_*.changes "$WORK"/*_"$version"_*.buildinfo "$OUT"/
rm -f "$WORK"/*.deb "$WORK"/*.changes "$WORK"/*.buildinfo
changes=$(ls "$OUT"/score_"$version"_*.changes)

say "lintian $changes"
# lintian leaves its scratch directories (mldbm-elf-*) in TMPDIR: ours.
rm -rf "$WORK/lintian-tmp"
mkdir -p "$WORK/lintian-tmp"
TMPDIR="$WORK/lintian-tmp" lintian --info --display-info --pedantic --fail-on none "$changes" \
  >"$OUT/lintian.txt" 2>&1 || true
rm -rf "$WORK/lintian-tmp"
if grep -E '^[EW]: ' "$OUT/lintian.txt" >&2; then
  die "lintian reports the errors or warnings above ($OUT/lintian.txt)"
fi

say "local apt repository $OUT/repo"
rm -rf "$OUT/repo"
mkdir -p "$OUT/repo"
cp "$OUT"/*.deb "$OUT/repo/"
(cd "$OUT/repo" && dpkg-scanpackages --multiversion . >Packages 2>/dev/null && gzip -9kn Packages)

say "built $(ls "$OUT"/*.deb | wc -l) packages of score $version in $OUT:"
ls -1 "$OUT"/*.deb >&2
