#!/usr/bin/env bash
# Gathers into DIR what a build of volt needs that an offline GPU node may
# lack, so that tests/gpu/check.sh can build, test and benchmark volt there
# with no network:
#
#   DIR/include/     Eigen, doctest, nlohmann-json, CLI11, xxHash and zlib's
#                    headers, copied from this machine's Debian packages
#   DIR/data/mnist/  MNIST's four files, gzipped; DIR/data/brown.txt if found
#   DIR/kernels/     a warm kernel cache for compute capability CC: every kernel
#                    source that the CUDA tests compiled on this machine
#                    (BUILD/cudasim-kernels), compiled by NVRTC for sm_CC
#   DIR/kernel-sources/  those sources, so the node can compile what is missing
#   DIR/MANIFEST.txt and DIR/SHA256SUMS: versions, sizes and checksums
#
#   tests/gpu/pack.sh DIR [--cc 90] [--build build] [--data-dir PATH]
#                         [--synthetic-data] [--kernel-limit N]
#
# --synthetic-data writes a small random MNIST when the real one is not on
# this machine; --kernel-limit packs only the first N kernel sources (both for
# the dry run of ./test.sh).  The pack must stay under 40 MiB; it fails
# otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "pack.sh: $*" >&2; exit 1; }

dir="" cc=90 build=build data_dir=${VOLT_DATA_DIR:-$HOME/.cache/volt/mnist} synthetic=0 limit=-1
while [ $# -gt 0 ]; do
  case "$1" in
    --cc) cc=${2:?--cc needs a value}; shift ;;
    --build) build=${2:?--build needs a value}; shift ;;
    --data-dir) data_dir=${2:?--data-dir needs a value}; shift ;;
    --synthetic-data) synthetic=1 ;;
    --kernel-limit) limit=${2:?--kernel-limit needs a value}; shift ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (try --help)" ;;
    *) [ -z "$dir" ] || die "more than one folder given: $dir, $1"; dir=$1 ;;
  esac
  shift
done
[ -n "$dir" ] || die "usage: tests/gpu/pack.sh DIR [options] (--help)"
[[ "$cc" =~ ^[0-9]+$ ]] || die "--cc takes a compute capability as a number (90 for sm_90), got '$cc'"
rm -rf "$dir"
mkdir -p "$dir/include" "$dir/data/mnist"
dir=$(cd "$dir" && pwd)

# ---- headers: each from where this machine's package keeps it
copy() {  # copy SOURCE [DEST under include/]
  [ -e "$1" ] || die "$1 is missing: install the package that holds it (./setup.sh installs them all)"
  cp -R "$1" "$dir/include/${2:-}"
}
mkdir -p "$dir/include/eigen3"
copy /usr/include/eigen3/Eigen eigen3/
copy /usr/include/doctest
copy /usr/include/nlohmann
copy /usr/include/CLI
copy /usr/include/xxhash.h
[ -e /usr/include/xxh3.h ] && copy /usr/include/xxh3.h
copy /usr/include/zlib.h
if [ -e /usr/include/zconf.h ]; then copy /usr/include/zconf.h; else copy "/usr/include/$(gcc -dumpmachine)/zconf.h"; fi

# ---- data
mnist=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
data_note="MNIST from $data_dir"
have=1
for f in "${mnist[@]}"; do [ -f "$data_dir/$f" ] || [ -f "$data_dir/$f.gz" ] || have=0; done
if ((have)); then
  for f in "${mnist[@]}"; do
    if [ -f "$data_dir/$f.gz" ]; then cp "$data_dir/$f.gz" "$dir/data/mnist/"
    else gzip -9 -c "$data_dir/$f" > "$dir/data/mnist/$f.gz"; fi
  done
elif ((synthetic)); then
  data_note="synthetic MNIST (random pixels and labels, 512 + 128 images): for dry runs only"
  python3 - "$dir/data/mnist" <<'EOF'
import gzip, random, struct, sys
random.seed(0)
for prefix, n in (("train", 512), ("t10k", 128)):
    with gzip.open(f"{sys.argv[1]}/{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">iiii", 0x803, n, 28, 28) + bytes(random.randrange(256) for _ in range(n * 784)))
    with gzip.open(f"{sys.argv[1]}/{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">ii", 0x801, n) + bytes(random.randrange(10) for _ in range(n)))
EOF
else
  die "MNIST is not in $data_dir (data/fetch_mnist.sh fetches it; --synthetic-data makes a random one for dry runs)"
fi
brown_note="absent"
if ((synthetic)) && [ "$data_note" != "MNIST from $data_dir" ]; then
  # A dry run's corpus: 64 KiB of random words, so the GPT example runs too.
  python3 -c 'import random; random.seed(0); w=["the","of","and","a","to","in","is","was","he","for"]
print("\n".join(" ".join(random.choice(w) for _ in range(12)) for _ in range(1200)))' > "$dir/data/brown.txt"
  brown_note="synthetic (random words): for dry runs only"
else
  for b in "$HOME/.cache/volt/brown/brown.txt" data/brown.txt; do
    if [ -f "$b" ]; then cp "$b" "$dir/data/brown.txt"; brown_note="from $b"; break; fi
  done
fi

# ---- kernels: the CUDA tests' sources (a cudasim run keeps them beside its
# images), compiled by the real NVRTC for sm_CC.
kernel_note="none (run the CUDA tests on tests/cudasim first: ./test.sh)"
sources=$build/cudasim-kernels
if ls "$sources"/cuda_*.cu >/dev/null 2>&1; then
  mkdir -p "$dir/kernel-sources"
  if [ "$limit" -ge 0 ]; then
    # The first $limit names, without a pipe into head (which would end sort
    # with SIGPIPE, fatal under pipefail, once the list outgrows a pipe).
    mapfile -t names < <(cd "$sources" && ls cuda_*.cu | LC_ALL=C sort)
    for name in "${names[@]:0:$limit}"; do cp "$sources/$name" "$dir/kernel-sources/"; done
  else
    cp "$sources"/cuda_*.cu "$dir/kernel-sources/"
  fi
  n=$(ls "$dir/kernel-sources" | wc -l)
  if [ -x "$build/tests/precompile_kernels" ]; then
    # Without LD_PRELOAD: the real NVRTC, which needs no GPU.
    env -u LD_PRELOAD "$build/tests/precompile_kernels" "$dir/kernel-sources" "$dir/kernels" "$cc" "$(nproc)"
    kernel_note="$(ls "$dir/kernels" | grep -c -v '\.cu$') of $n kernels compiled for sm_$cc"
  else
    kernel_note="$n kernel sources, none compiled ($build/tests/precompile_kernels is not built)"
  fi
fi

# ---- manifest
version() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo unknown; }
{
  echo "volt GPU pack, made $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "Eigen         $(version libeigen3-dev)"
  echo "doctest       $(version doctest-dev)"
  echo "nlohmann-json $(version nlohmann-json3-dev)"
  echo "CLI11         $(version libcli11-dev)"
  echo "xxHash        $(version libxxhash-dev)"
  echo "zlib          $(version zlib1g-dev)"
  echo "data          $data_note"
  echo "brown.txt     $brown_note"
  echo "kernels       $kernel_note"
  [ -d "$dir/kernels" ] && echo "NVRTC         $(ls /usr/local/cuda/lib64/libnvrtc.so.* 2>/dev/null | head -1 | sed 's/.*libnvrtc.so.//')"
} > "$dir/MANIFEST.txt"
(cd "$dir" && find . -type f ! -name SHA256SUMS ! -name MANIFEST.txt | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)
bytes=$(du -sb "$dir" | cut -f1)
echo "size          $((bytes / 1024)) KiB in $(find "$dir" -type f | wc -l) files" >> "$dir/MANIFEST.txt"
cat "$dir/MANIFEST.txt"
[ "$bytes" -le $((40 * 1024 * 1024)) ] || die "the pack is $((bytes / 1048576)) MiB, over its 40 MiB"
