#!/usr/bin/env bash
# Installs linerate as a system tool under PREFIX (default /usr/local):
#   PREFIX/bin/linerate                                  the release binary
#   PREFIX/lib/linerate/liblinerate_pcap.so              what `linerate exec` preloads (it looks in
#                                                        ../lib/linerate from its own binary)
#   PREFIX/share/man/man1/linerate.1, linerate-count.1, ... one page per subcommand (`man linerate-count`)
#   PREFIX/share/bash-completion/completions/linerate    bash (bash-completion loads it on demand)
#   PREFIX/share/zsh/site-functions/_linerate            zsh ($fpath)
#   PREFIX/share/fish/vendor_completions.d/linerate.fish fish
#
# Usage: scripts/install.sh [--no-build] [--from DIR] [--uninstall] [PREFIX]
#   --no-build   install what DIR holds, without running cargo (e.g. as root through sudo after
#                `cargo build --release -p linerate-cli -p linerate-pcap` as yourself)
#   --from DIR   where the built binary and library are (default: the workspace's target/release)
#   --uninstall  remove what an install under PREFIX put there: the files listed, with their
#                checksums, in PREFIX/lib/linerate/installed-files; a file changed since (or
#                never installed by this script) is kept, and said so
# $DESTDIR, if set, is prepended to every destination (staging for a package), as with make.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=1
uninstall=0
from=
prefix=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --from)
      [ $# -ge 2 ] || { echo "install.sh: --from needs a directory" >&2; exit 2; }
      from=$2
      shift ;;
    --from=*) from=${1#--from=} ;;
    --uninstall) uninstall=1 ;;
    -h | --help) sed -n '2,/^[^#]/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    -*) echo "install.sh: unknown option $1 (see scripts/install.sh --help)" >&2; exit 2 ;;
    *)
      [ -z "$prefix" ] || { echo "install.sh: one PREFIX only (got $prefix and $1)" >&2; exit 2; }
      prefix=$1 ;;
  esac
  shift
done
prefix=${prefix:-/usr/local}
case "$prefix" in
  /*) ;;
  *) echo "install.sh: PREFIX must be an absolute path (got $prefix)" >&2; exit 2 ;;
esac
dest=${DESTDIR:-}$prefix
bin=$dest/bin
lib=$dest/lib/linerate
man1=$dest/share/man/man1
bashc=$dest/share/bash-completion/completions
zshc=$dest/share/zsh/site-functions
fishc=$dest/share/fish/vendor_completions.d

manifest=$lib/installed-files

# Removes the files an earlier install listed in $manifest (paths relative to $dest, with
# their sha256), each only while it is still the file installed: nothing else is touched.
remove_installed() {
  local sum path kept=0
  while IFS= read -r line; do
    sum=${line%%  *}
    path=${line#*  }
    case "$path" in '' | /* | *..*) continue ;; esac
    [ -e "$dest/$path" ] || continue
    if [ "$(sha256sum <"$dest/$path" | cut -d' ' -f1)" = "$sum" ]; then
      rm -f "$dest/$path" && echo "removed $dest/$path"
    else
      echo "install.sh: kept $dest/$path: changed since install.sh put it there" >&2
      kept=1
    fi
  done <"$manifest"
  rm -f "$manifest"
  return $kept
}

if [ "$uninstall" = 1 ]; then
  if [ ! -f "$manifest" ]; then
    echo "install.sh: nothing to uninstall under $dest: no $manifest (install.sh never installed there); nothing removed" >&2
    exit 1
  fi
  remove_installed || true
  rmdir "$lib" 2>/dev/null || true
  exit 0
fi

# A PREFIX that cannot be written is said before a long build.
top=$dest
while [ ! -e "$top" ]; do top=$(dirname "$top"); done
if [ ! -w "$top" ]; then
  echo "install.sh: cannot write under $dest ($top is not writable: run as root, or choose another PREFIX)" >&2
  exit 1
fi

from=${from:-$root/target/release}
if [ "$build" = 1 ]; then
  if command -v cargo >/dev/null; then
    (cd "$root" && cargo build --release -p linerate-cli -p linerate-pcap)
  else
    echo "install.sh: cargo is not on the PATH (root's PATH under sudo?): installing what $from holds" >&2
  fi
fi
for f in linerate liblinerate_pcap.so; do
  if [ ! -f "$from/$f" ]; then
    echo "install.sh: $from/$f missing: build it first (cargo build --release -p linerate-cli -p linerate-pcap)" >&2
    exit 1
  fi
done

# The pages and scripts come from the binary being installed, so that they match its flags.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$from/linerate" man --dir "$tmp/man" >/dev/null
for sh in bash zsh fish; do
  "$from/linerate" completions "$sh" >"$tmp/$sh"
done

install -d "$bin" "$lib" "$man1" "$bashc" "$zshc" "$fishc"
# Pages of subcommands that no longer exist would otherwise stay behind: the last install's
# files go first (only those it listed, and only if unchanged).
if [ -f "$manifest" ]; then remove_installed >/dev/null 2>&1 || true; fi
install -m 0644 "$tmp"/man/*.1 "$man1/"
install -m 0644 "$tmp/bash" "$bashc/linerate"
install -m 0644 "$tmp/zsh" "$zshc/_linerate"
install -m 0644 "$tmp/fish" "$fishc/linerate.fish"
install -m 0755 "$from/linerate" "$bin/linerate"
install -m 0644 "$from/liblinerate_pcap.so" "$lib/liblinerate_pcap.so"
# What --uninstall may remove: these files, while they are unchanged.
(
  cd "$dest"
  sha256sum bin/linerate lib/linerate/liblinerate_pcap.so share/bash-completion/completions/linerate \
    share/zsh/site-functions/_linerate share/fish/vendor_completions.d/linerate.fish \
    $(cd "$tmp/man" && printf 'share/man/man1/%s\n' *.1)
) >"$manifest"

echo "installed $("$bin/linerate" --version) under ${DESTDIR:-}$prefix:"
echo "  $bin/linerate"
echo "  $lib/liblinerate_pcap.so (linerate exec finds it there)"
echo "  $man1/linerate.1 and $(($(ls "$tmp"/man/*.1 | wc -l) - 1)) subcommand pages (man linerate-count)"
echo "  completions: $bashc/linerate, $zshc/_linerate, $fishc/linerate.fish"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "note: $prefix/bin is not on your PATH: add it to run \`linerate\` by name" ;;
esac
