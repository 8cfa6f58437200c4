#!/usr/bin/env bash
# Benchmark of issue 32 item 2: consolidating a 2 GiB torch DCP checkpoint of
# 2 ranks (scripts/make_dcp_bench.py: half the tensors cut in rows, half in
# columns, two output files) with `tensorfile merge` into a set, against
# copying the same bytes with `cp -r`; interleaved, warm page cache (the
# input read once first; the page cache is not dropped), medians of wall and
# CPU (user + sys) time and their ratios pair by pair, and the peak RSS of
# the merge (/usr/bin/time).
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

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
flag=--no-sync
[ "$mode" = sync ] && flag=
# One timed run: appends "wall cpu peak_kib" to $1.
timed() {
  local into=$1; shift
  /usr/bin/time -f "%e %U %S %M" -o "$dir/t" "$@" >/dev/null
  awk '{printf "%s %.3f %s\n", $1, $2 + $3, $4}' "$dir/t" >>"$into"
}

: >"$dir/merge.runs"; : >"$dir/cp.runs"
for _ in $(seq "$runs"); do
  rm -rf "$dir/out" "$dir/copy"
  timed "$dir/merge.runs" "$bin" merge $flag "$dir/in" "$dir/out"
  if [ "$mode" = sync ]; then
    timed "$dir/cp.runs" sh -c 'cp -r "$1" "$2" && sync -f "$2"' sh "$dir/in" "$dir/copy"
  else
    timed "$dir/cp.runs" cp -r "$dir/in" "$dir/copy"
  fi
done
rm -rf "$dir/out" "$dir/copy"
col() { cut -d' ' -f"$2" "$dir/$1.runs"; }
ratios() { paste -d' ' <(col merge "$1") <(col cp "$1") | awk '{printf "%.3f\n", $1 / $2}'; }
row() { local v; v=$(cat); printf '| %s | %s | %s | %s |\n' "$1" "$(median <<<"$v")" "$(sort -g <<<"$v" | head -1)" "$(sort -g <<<"$v" | tail -1)"; }
bytes=$(du -cb "$dir"/in/* | tail -1 | cut -f1)
echo "cores: $(nproc); load before: $(cut -d' ' -f1-3 /proc/loadavg); runs: $runs; mode: $mode; input: $bytes bytes in $dir (warm cache)"
printf '| %s | median | min | max |\n|---|---:|---:|---:|\n' "figure"
col merge 1 | row "merge, wall s"
col cp 1 | row "cp, wall s"
ratios 1 | row "ratio merge/cp, wall, pair by pair"
col merge 2 | row "merge, CPU s"
col cp 2 | row "cp, CPU s"
ratios 2 | row "ratio merge/cp, CPU, pair by pair"
col merge 3 | row "merge, peak RSS KiB"
