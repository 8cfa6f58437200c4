#!/usr/bin/env bash
# Benchmark of issue 32 item 2: consolidating a 2 GiB torch DCP checkpoint of
# 2 ranks (scripts/make_dcp_bench.py: half the tensors cut in rows, half in
# columns, two output files) with `tensorfile merge` into a set, against
# copying the same bytes with `cp -r`; interleaved, warm page cache (the
# input read once first; the page cache is not dropped), medians, and the
# peak RSS of the merge (/usr/bin/time -v).
#
#   scripts/bench-dcp.sh [DIR] [RUNS] [sync|nosync]
#
# DIR (default /tmp/tensorfile-bench-dcp; 6 GiB free needed) is removed at the
# end. RUNS defaults to 7. nosync (default): `merge --no-sync` against
# `cp -r`; sync: `merge` (which syncs) against `cp -r` then `sync -f` of the copy.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/tensorfile-bench-dcp}
runs=${2:-7}
mode=${3:-nosync}
nice -n 10 cargo build --release -q -p tensorfile-cli --bin tensorfile
bin=$PWD/target/release/tensorfile
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
[ -d "$dir/in" ] || python3 scripts/make_dcp_bench.py "$dir/in" 2
cat "$dir"/in/* >/dev/null

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
since() { echo "$(now) - $1" | bc -l; }
flag=--no-sync
[ "$mode" = sync ] && flag=

: >"$dir/merge.times"; : >"$dir/cp.times"; : >"$dir/ratios"
for i in $(seq "$runs"); do
  rm -rf "$dir/out" "$dir/copy"
  t0=$(now); "$bin" merge $flag "$dir/in" "$dir/out" >/dev/null; m=$(since "$t0")
  t0=$(now); cp -r "$dir/in" "$dir/copy"; [ "$mode" = sync ] && sync -f "$dir/copy"; c=$(since "$t0")
  echo "$m" >>"$dir/merge.times"; echo "$c" >>"$dir/cp.times"
  echo "scale=3; $m / $c" | bc -l >>"$dir/ratios"
done
rm -rf "$dir/out"
/usr/bin/time -v "$bin" merge $flag "$dir/in" "$dir/out" 2>"$dir/time.txt" >/dev/null
rss=$(awk -F: '/Maximum resident/ {print $2}' "$dir/time.txt" | tr -d ' ')
bytes=$(du -cb "$dir"/in/* | tail -1 | cut -f1)
echo "cores: $(nproc); load before: $(cut -d' ' -f1-3 /proc/loadavg); runs: $runs; mode: $mode; input: $bytes bytes"
printf '| %s | median | min | max |\n|---|---:|---:|---:|\n' "$dir (warm cache)"
for f in merge cp; do
  printf '| %s | %.3f s | %.3f s | %.3f s |\n' "$f" "$(median <"$dir/$f.times")" "$(sort -g "$dir/$f.times" | head -1)" "$(sort -g "$dir/$f.times" | tail -1)"
done
printf '| ratio merge/cp, pair by pair | %s | %s | %s |\n' "$(median <"$dir/ratios")" "$(sort -g "$dir/ratios" | head -1)" "$(sort -g "$dir/ratios" | tail -1)"
echo "peak RSS of merge: $rss KiB"
