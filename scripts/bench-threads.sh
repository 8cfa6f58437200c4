#!/usr/bin/env bash
# The parallel groups (casts, load, quantize, PyTorch convert) on one
# thread and on two (TENSORFILE_THREADS=1 / 2, the same binaries), for
# issue 14's "--threads 1 against --threads 2". Each tool times its own
# cases interleaved and prints medians; the two thread counts alternate
# round by round here, so both see the same machine.
#
#   scripts/bench-threads.sh [DIR] [ROUNDS]
#
# DIR (default /tmp/tensorfile-bench-threads) holds the generated files,
# removed at the end; ROUNDS (default 3) alternations of 1 and 2 threads,
# each tool running its own 3 interleaved runs per round.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/tensorfile-bench-threads}
rounds=${2:-3}
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cargo build --release -q -p tensorfile --example bench_casts --example bench_quant
cargo build --release -q -p tensorfile-bench --bin tensorfile-bench
cargo build --release -q -p tensorfile-cli --bin tensorfile
cargo build --release -q -p tensorfile-pytorch --example make_checkpoint
bin=$PWD/target/release/tensorfile
ex=$PWD/target/release/examples
[ -f "$dir/model.pt" ] || "$ex/make_checkpoint" "$dir/model.pt" 1100 >/dev/null

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# One line per measured case: "case<TAB>seconds", for thread count $1.
casts() {
  TENSORFILE_THREADS=$1 "$ex/bench_casts" 1024 3 |
    awk '/->/ { t=$4; sub("ms","",t); printf "cast %s %s %s\t%.4f\n", $1, $2, $3, t/1000 }'
}
quant() {
  # Rows like "int4-g32-sym quantize of F32: 22.4 ms; reading it: 10.3 ms; ...":
  # the tool's median of its own runs, then its baseline's.
  TENSORFILE_THREADS=$1 "$ex/bench_quant" 1024 3 "$dir" |
    awk -F': ' '/ ms;/ { split($2, t, " "); printf "quant %s\t%.4f\n", $1, t[1] / 1000 }'
}
load() {
  # The markdown row of `SafeTensors::load`: its median is the third cell.
  TENSORFILE_THREADS=$1 "$PWD/target/release/tensorfile-bench" --rounds 3 --dir "$dir" load |
    awk -F'|' '/tensorfile `SafeTensors::load`/ {
      split($4, v, " "); s = v[1]; u = v[2]
      if (u == "ms") s /= 1000; else if (u == "µs") s /= 1e6
      printf "load 1 GiB, SafeTensors::load\t%.4f\n", s }'
}
pytorch() {
  cat "$dir/model.pt" >/dev/null
  local t0 t1
  t0=$(now)
  TENSORFILE_THREADS=$1 "$bin" convert --no-sync "$dir/model.pt" "$dir/out.safetensors" >/dev/null
  t1=$(now)
  printf 'pytorch convert 1.1 GiB\t%s\n' "$(echo "$t1 - $t0" | bc -l)"
}

: >"$dir/all.times"
for _ in $(seq "$rounds"); do
  for t in 1 2; do
    { casts "$t"; quant "$t"; load "$t"; pytorch "$t"; } | sed "s/^/$t\t/" >>"$dir/all.times"
  done
done

echo "cores: $(nproc); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); rounds: $rounds"
printf '| case | 1 thread: median | min – max | 2 threads: median | min – max | 1 / 2 |\n|---|---:|---:|---:|---:|---:|\n'
cut -f2 "$dir/all.times" | awk '!seen[$0]++' | while IFS= read -r c; do
  one=$(awk -F'\t' -v c="$c" '$1 == 1 && $2 == c { print $3 }' "$dir/all.times")
  two=$(awk -F'\t' -v c="$c" '$1 == 2 && $2 == c { print $3 }' "$dir/all.times")
  m1=$(echo "$one" | median); m2=$(echo "$two" | median)
  r1=$(echo "$one" | sort -g | sed -n '1p;$p' | paste -sd' ' | awk '{printf "%.3f – %.3f", $1, $2}')
  r2=$(echo "$two" | sort -g | sed -n '1p;$p' | paste -sd' ' | awk '{printf "%.3f – %.3f", $1, $2}')
  printf '| %s | %.3f s | %s | %.3f s | %s | %.2f |\n' "$c" "$m1" "$r1" "$m2" "$r2" "$(echo "$m1 / $m2" | bc -l)"
done
