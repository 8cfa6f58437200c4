//! Duplicate detection among the unknown fields of one tensor entry, without
//! keeping their names.
//!
//! Each unknown field is recorded as one `u64`: the top 32 bits of the hash
//! of its unescaped name, above the header position of its opening quote.
//! When the entry closes, the records are grouped by hash and only those
//! whose 32-bit hash another record shares are handed back, for the parser
//! to compare their names exactly (at 7.5 million distinct names, about
//! 6,500 pairs share a hash by chance).
//!
//! Grouping is linear and cache-friendly: up to [`DIRECT`] records go into
//! one small open-addressing table; more are first partitioned by the
//! hash's top bits into buckets of a few thousand, each then tabled while it
//! sits in cache. A hash table over all the names at once would miss the
//! cache on nearly every insertion. A bucket whose probes run long (crafted
//! collisions) is sorted instead, so no input makes the work quadratic.
//!
//! Memory: 8 bytes a field, twice that while partitioning, and a table of
//! 4 bytes a slot for one bucket at a time.

/// Up to this many records are tabled without partitioning.
const DIRECT: usize = 4096;

/// Buckets are tabled only up to this size; larger ones (possible only when
/// hashes are skewed on purpose) are sorted, which needs no table.
const MAX_TABLED: usize = 1 << 16;

/// An empty table slot.
const EMPTY: u32 = u32::MAX;

/// The 32-bit hash part of a record.
#[inline]
fn hash_of(record: u64) -> u32 {
    (record >> 32) as u32
}

/// The unknown fields of the entry being parsed.
#[derive(Default)]
pub(super) struct UnknownKeys {
    /// One per field, in header order.
    records: Vec<u64>,
    /// The records partitioned by their hash's top bits.
    partitioned: Vec<u64>,
    /// Open-addressing table: indices into the bucket being grouped.
    table: Vec<u32>,
    /// What [`UnknownKeys::collisions`] returns.
    collided: Vec<u64>,
}

impl UnknownKeys {
    /// Forgets the previous entry's fields (keeping the memory).
    pub(super) fn clear(&mut self) {
        self.records.clear();
    }

    /// Records a field: the hash of its unescaped name and the header
    /// position of its key.
    #[inline]
    pub(super) fn push(&mut self, hash: u64, pos: u32) {
        self.records
            .push((hash & 0xffff_ffff_0000_0000) | u64::from(pos));
    }

    /// The records that share their 32-bit hash with another, each once,
    /// sorted by hash and then by position: runs of equal hashes are the
    /// groups whose names the caller compares. Empty when every hash is
    /// distinct, which proves every name distinct.
    pub(super) fn collisions(&mut self) -> &[u64] {
        self.collided.clear();
        let n = self.records.len();
        if n < 2 {
            return &self.collided;
        }
        if n <= DIRECT {
            group(&mut self.records, &mut self.table, &mut self.collided);
        } else {
            // Buckets of 2,048 to 4,096 records when hashes are uniform (up
            // to 1,024 buckets: more would spread the partitioning writes
            // over too many pages).
            let bits = (n / 2048).next_power_of_two().trailing_zeros().clamp(1, 10);
            let shift = 64 - bits;
            let buckets = 1usize << bits;
            let mut starts = vec![0usize; buckets + 1];
            for &r in &self.records {
                starts[(r >> shift) as usize + 1] += 1;
            }
            for b in 0..buckets {
                starts[b + 1] += starts[b];
            }
            let mut next = starts.clone();
            self.partitioned.clear();
            self.partitioned.resize(n, 0);
            for &r in &self.records {
                let slot = &mut next[(r >> shift) as usize];
                self.partitioned[*slot] = r;
                *slot += 1;
            }
            for b in 0..buckets {
                let bucket = &mut self.partitioned[starts[b]..starts[b + 1]];
                group(bucket, &mut self.table, &mut self.collided);
            }
        }
        self.collided.sort_unstable();
        self.collided.dedup();
        &self.collided
    }
}

/// Appends to `collided` every record of `bucket` whose hash another one
/// shares (some more than once). May reorder `bucket`.
fn group(bucket: &mut [u64], table: &mut Vec<u32>, collided: &mut Vec<u64>) {
    if bucket.len() <= MAX_TABLED && tabled(bucket, table, collided) {
        return;
    }
    bucket.sort_unstable();
    for run in bucket.chunk_by(|a, b| hash_of(*a) == hash_of(*b)) {
        if run.len() > 1 {
            collided.extend_from_slice(run);
        }
    }
}

/// [`group`] with a table, linear probing on the hash's low bits (the
/// bucket's records share its top bits). Gives up, leaving `collided` as it
/// was, if the probes run past a budget linear in the bucket's size.
fn tabled(bucket: &[u64], table: &mut Vec<u32>, collided: &mut Vec<u64>) -> bool {
    let slots = (bucket.len() * 2).next_power_of_two().max(8);
    let mask = slots - 1;
    table.clear();
    table.resize(slots, EMPTY);
    let before = collided.len();
    let mut budget = 8 * bucket.len() + 64;
    for (i, &record) in bucket.iter().enumerate() {
        let hash = hash_of(record);
        let mut slot = hash as usize & mask;
        loop {
            let held = table[slot];
            if held == EMPTY {
                // Fits: the bucket holds at most MAX_TABLED records.
                table[slot] = i as u32;
                break;
            }
            let other = bucket[held as usize];
            if hash_of(other) == hash {
                collided.push(other);
                collided.push(record);
                break;
            }
            slot = (slot + 1) & mask;
            budget = budget.saturating_sub(1);
            if budget == 0 {
                collided.truncate(before);
                return false;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The groups the plain way: records whose hash another record shares.
    fn naive(records: &[u64]) -> Vec<u64> {
        let mut count = std::collections::HashMap::new();
        for &r in records {
            *count.entry(hash_of(r)).or_insert(0usize) += 1;
        }
        let mut out: Vec<u64> = records
            .iter()
            .copied()
            .filter(|r| count[&hash_of(*r)] > 1)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// xorshift64*, deterministic.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn collisions_are_exactly_the_shared_hashes() {
        let mut rng = Rng(0x0dd5_eed5);
        let mut keys = UnknownKeys::default();
        // Sizes on both sides of the direct table and of partitioning; hash
        // pools small enough that many hashes repeat, or skewed so that
        // every record falls in one bucket (long probes, then sorting).
        for (n, pool, skew) in [
            (0usize, 1u64, false),
            (1, 1, false),
            (2, 1, false),
            (2, 1 << 40, false),
            (100, 50, false),
            (4096, 3000, false),
            (4097, 1 << 40, false),
            (20_000, 15_000, false),
            (70_000, 1 << 40, true),
            (9_000, 5_000, true),
        ] {
            keys.clear();
            for pos in 0..n as u32 {
                let mut hash = (rng.next() % pool).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                if skew {
                    // The same top byte (one bucket) and the same low 9
                    // bits of the 32-bit hash (few, long probe chains).
                    hash = (hash & 0x00ff_fe00_0000_0000) | 0xab00_0000_0000_0000;
                }
                keys.push(hash, pos);
            }
            let expected = naive(&keys.records.clone());
            assert_eq!(keys.collisions(), &expected[..], "n {n}, pool {pool}");
        }
    }
}
