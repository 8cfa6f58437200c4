#!/usr/bin/env bash
# Benchmark: convert a generated PyTorch checkpoint (>= 1 GiB) to safetensors,
# against copying the file once. Warm page cache, syncing off, interleaved
# runs, medians. Peak anonymous memory (RssAnon) of the conversion is
# sampled from /proc: file-backed pages of the memory map are page cache,
# not the converter's own memory.
#
#   scripts/bench-pytorch-convert.sh [DIR] [MIB] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/tensorfile-bench}
mib=${2:-1100}
runs=${3:-5}
mkdir -p "$dir"
cargo build --release -q -p tensorfile-cli --bin tensorfile
cargo build --release -q -p tensorfile-pytorch --example make_checkpoint
bin=target/release/tensorfile
in="$dir/model.pt"
[ -f "$in" ] || target/release/examples/make_checkpoint "$in" "$mib"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# Warm the cache and check the output once.
cat "$in" >/dev/null
"$bin" convert --no-sync "$in" "$dir/out.safetensors" >/dev/null
"$bin" validate "$dir/out.safetensors" >/dev/null

: >"$dir/copy.times"; : >"$dir/convert.times"
for _ in $(seq "$runs"); do
  rm -f "$dir/copy.pt"
  t0=$(now); cp "$in" "$dir/copy.pt"; t1=$(now)
  echo "$t1 - $t0" | bc -l >>"$dir/copy.times"
  rm -f "$dir/out.safetensors"
  t0=$(now); "$bin" convert --no-sync "$in" "$dir/out.safetensors" >/dev/null; t1=$(now)
  echo "$t1 - $t0" | bc -l >>"$dir/convert.times"
done

# Memory in a separate run: the sampling loop would slow a timed one.
rm -f "$dir/out.safetensors"
"$bin" convert --no-sync "$in" "$dir/out.safetensors" >/dev/null &
pid=$!; rss=0
while kill -0 "$pid" 2>/dev/null; do
  kb=$(awk '/^RssAnon/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
  [ "${kb:-0}" -gt "$rss" ] && rss=$kb
  sleep 0.005
done
wait "$pid"

copy=$(median <"$dir/copy.times"); conv=$(median <"$dir/convert.times")
size=$(stat -c %s "$in")
printf 'input: %s bytes\n' "$size"
printf 'copy (cp):  median %.3f s  (%s)\n' "$copy" "$(tr '\n' ' ' <"$dir/copy.times")"
printf 'convert:    median %.3f s  (%s)\n' "$conv" "$(tr '\n' ' ' <"$dir/convert.times")"
printf 'ratio convert/copy: %.2f\n' "$(echo "$conv / $copy" | bc -l)"
printf 'convert peak RssAnon: %d KiB (largest re-ordered tensor: 16384 KiB)\n' "$rss"
rm -f "$dir/copy.pt" "$dir/out.safetensors"
