#!/usr/bin/env bash
# Builds oneTBB with ThreadSanitizer into $1 (default build-deps/onetbb-tsan) for the TSan build.
#
# Debian's libtbb is not TSan-instrumented: TSan cannot see the synchronisation inside it and
# reports every parallel_for hand-off as a race, so without this the oneTBB code (cpu_adam, the
# optimizer swapper, host kernels) could not be race-checked. The source is Debian's own
# (bookworm's onetbb 2021.8.0, the version the normal build links), fetched from the Debian
# mirror and checked against the checksum in its .dsc. Only libtbb is built (no tests, no
# tbbmalloc): about a minute on two cores. Does nothing if that prefix is already built.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(realpath -m "${1:-build-deps/onetbb-tsan}")
version=2021.8.0
sha256=7e9111b8bb59c8800bf6d0b06afe7b0891937443d2dae1ee1101c8e2ede6a7ef
url="http://deb.debian.org/debian/pool/main/o/onetbb/onetbb_${version}.orig.tar.xz"

# The stamp names the compiler too: a TSan runtime must match the one the project links.
stamp="$prefix/.strata-tsan-onetbb-$version-$(c++ -dumpfullversion)"
if [ -f "$stamp" ] && [ -f "$prefix/lib/cmake/TBB/TBBConfig.cmake" ]; then
  exit 0
fi
if [ -d "$prefix" ] && [ -n "$(ls -A "$prefix")" ] && ! ls "$prefix"/.strata-tsan-onetbb-* \
    >/dev/null 2>&1; then
  echo "build_tsan_tbb: $prefix exists and was not made by this script; refusing to replace it" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build_tsan_tbb: fetching oneTBB $version from the Debian mirror"
curl -fsSL --retry 3 --connect-timeout 20 --max-time 600 -o "$work/onetbb.tar.xz" "$url" ||
  { echo "build_tsan_tbb: cannot download $url" >&2; exit 1; }
echo "$sha256  $work/onetbb.tar.xz" | sha256sum -c --quiet - ||
  { echo "build_tsan_tbb: checksum mismatch for $url (expected sha256 $sha256)" >&2; exit 1; }
tar -xf "$work/onetbb.tar.xz" -C "$work"
cmake -S "$work/oneTBB-$version" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTBB_SANITIZE=thread -DTBB_TEST=OFF -DTBBMALLOC_BUILD=OFF -DTBB_STRICT=OFF \
  -DTBB_DISABLE_HWLOC_AUTOMATIC_SEARCH=ON -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_LIBDIR=lib >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j "$(nproc)" >"$work/build.log" 2>&1 ||
  { tail -50 "$work/build.log"; exit 1; }
rm -rf "$prefix"
cmake --install "$work/build" >/dev/null
touch "$stamp"
echo "build_tsan_tbb: TSan-instrumented oneTBB $version in $prefix"
