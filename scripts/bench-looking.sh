#!/usr/bin/env bash
# Benchmarks of issue 22, each side by side with its baseline in one run,
# interleaved, warm page cache, medians:
#   - hash of a 2 GiB file against sha256sum, both on one core (taskset -c 0);
#     the default hash (whole file and data section: two sha256 per byte) on
#     every core too;
#   - hash of the three files (4 GiB) on every core against sha256sum of them;
#   - stats of 1 GiB of F32 against reading the data once (cat > /dev/null);
#   - diff of two 1 GiB F32 files against reading both once.
#
#   scripts/bench-looking.sh [DIR] [RUNS]
#
# DIR defaults to /dev/shm (tmpfs: the files are in memory, as a warm page
# cache; 4 GiB of them), removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/dev/shm/tensorfile-bench-looking}
runs=${2:-5}
mkdir -p "$dir"
cargo build --release -q -p tensorfile-cli --bin tensorfile
cargo build --release -q -p tensorfile --example make_f32_file
bin=$PWD/target/release/tensorfile
gen=target/release/examples/make_f32_file
[ -f "$dir/a.safetensors" ] || "$gen" "$dir/a.safetensors" 1024
[ -f "$dir/b.safetensors" ] || "$gen" "$dir/b.safetensors" 1024 perturbed
[ -f "$dir/big.safetensors" ] || "$gen" "$dir/big.safetensors" 2048
trap 'rm -rf "$dir"' EXIT

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
time_of() { local t0 t1; t0=$(now); "$@" >/dev/null; t1=$(now); echo "$t1 - $t0" | bc -l; }

# Warm the cache; check the digests agree.
cat "$dir"/*.safetensors >/dev/null
want=$(sha256sum "$dir/big.safetensors" | cut -d' ' -f1)
got=$("$bin" hash --file-only "$dir/big.safetensors" | cut -d' ' -f1)
[ "$want" = "$got" ] || { echo "digests differ: $want $got" >&2; exit 1; }

cases=(sha1 hash1 hashall sums4 hash4 read1 stats read2 diff)
for c in "${cases[@]}"; do : >"$dir/$c.times"; done
for _ in $(seq "$runs"); do
  time_of taskset -c 0 sha256sum "$dir/big.safetensors" >>"$dir/sha1.times"
  time_of taskset -c 0 "$bin" hash --file-only "$dir/big.safetensors" >>"$dir/hash1.times"
  time_of "$bin" hash "$dir/big.safetensors" >>"$dir/hashall.times"
  time_of sha256sum "$dir"/{a,b,big}.safetensors >>"$dir/sums4.times"
  time_of "$bin" hash --file-only "$dir"/{a,b,big}.safetensors >>"$dir/hash4.times"
  time_of cat "$dir/a.safetensors" >>"$dir/read1.times"
  time_of "$bin" stats --json "$dir/a.safetensors" >>"$dir/stats.times"
  time_of cat "$dir/a.safetensors" "$dir/b.safetensors" >>"$dir/read2.times"
  time_of "$bin" diff --json "$dir/a.safetensors" "$dir/b.safetensors" >>"$dir/diff.times" || true
done
m() { median <"$dir/$1.times"; }
ratio() { echo "scale=3; $1 / $2" | bc -l; }
gib() { echo "scale=2; $1 / $2" | bc -l; }
echo "cores: $(nproc); load before: $(cut -d' ' -f1-3 /proc/loadavg); runs: $runs"
printf '| case | baseline | median | tensorfile | median | ratio (time) |\n|---|---|---:|---|---:|---:|\n'
printf '| 2 GiB, one core | sha256sum | %.3f s | hash --file-only | %.3f s | %s |\n' "$(m sha1)" "$(m hash1)" "$(ratio "$(m hash1)" "$(m sha1)")"
printf '| 2 GiB, file + data section, all cores | sha256sum, one core | %.3f s | hash | %.3f s | %s |\n' "$(m sha1)" "$(m hashall)" "$(ratio "$(m hashall)" "$(m sha1)")"
printf '| 3 files, 4 GiB, all cores | sha256sum | %.3f s | hash --file-only | %.3f s | %s |\n' "$(m sums4)" "$(m hash4)" "$(ratio "$(m hash4)" "$(m sums4)")"
printf '| stats of 1 GiB F32 | cat > /dev/null | %.3f s | stats --json | %.3f s | %s |\n' "$(m read1)" "$(m stats)" "$(ratio "$(m stats)" "$(m read1)")"
printf '| diff of 2 x 1 GiB F32 | cat A B > /dev/null | %.3f s | diff --json | %.3f s | %s |\n' "$(m read2)" "$(m diff)" "$(ratio "$(m diff)" "$(m read2)")"
echo "hash throughput, one core: sha256sum $(gib 2 "$(m sha1)") GiB/s, tensorfile $(gib 2 "$(m hash1)") GiB/s"
