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
//! Grouping is linear and cache-friendly. The first [`DIRECT`] records go
//! into one vector; past that, every record goes into one of [`BUCKETS`]
//! vectors chosen by its hash's top bits, as it comes (each push touches one
//! of 256 vector ends, all in cache). At the close each vector is grouped
//! with an open-addressing table small enough for the second-level cache
//! (at 7.5 million fields, 29,000 records and a table of 256 KiB). A hash table over all the names at once would miss the
//! cache on nearly every insertion. A bucket whose probes run long (crafted
//! collisions) is sorted instead, so no input makes the work quadratic.
//!
//! Memory: 8 bytes a field (up to twice that in vector capacity), and a
//! table of 4 bytes a slot for one bucket at a time.

/// Up to this many records stay in one vector and are tabled at once.
const DIRECT: usize = 4096;

/// How many buckets records are spread over past [`DIRECT`] (a power of
/// two). Measured at 7.5 million fields: 256 beat 1,024 (whose scattered
/// pushes miss the first-level cache) and beat partitioning all records in
/// one pass at the close (which needs a second copy of them).
const BUCKETS: usize = 256;

/// The shift that takes a record to its bucket: its top bits.
const BUCKET_SHIFT: u32 = 64 - BUCKETS.trailing_zeros();

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
    /// The records, in header order, while there are at most [`DIRECT`].
    records: Vec<u64>,
    /// Past [`DIRECT`]: every record, by its hash's top bits (each vector
    /// in header order); empty vectors otherwise.
    buckets: Vec<Vec<u64>>,
    /// Whether the records are in `buckets`.
    spread: bool,
    /// Open-addressing table: indices into the bucket being grouped.
    table: Vec<u32>,
    /// What [`UnknownKeys::collisions`] returns.
    collided: Vec<u64>,
}

impl UnknownKeys {
    /// Forgets the previous entry's fields (keeping the memory).
    pub(super) fn clear(&mut self) {
        self.records.clear();
        if std::mem::take(&mut self.spread) {
            for bucket in &mut self.buckets {
                bucket.clear();
            }
        }
    }

    /// Records a field: the hash of its unescaped name and the header
    /// position of its key.
    #[inline]
    pub(super) fn push(&mut self, hash: u64, pos: u32) {
        let record = (hash & 0xffff_ffff_0000_0000) | u64::from(pos);
        if self.spread {
            self.buckets[(record >> BUCKET_SHIFT) as usize].push(record);
        } else {
            self.records.push(record);
            if self.records.len() > DIRECT {
                self.spread();
            }
        }
    }

    /// Moves the records into their buckets, where the next ones will go.
    #[cold]
    fn spread(&mut self) {
        self.buckets.resize_with(BUCKETS, Vec::new);
        for &record in &self.records {
            self.buckets[(record >> BUCKET_SHIFT) as usize].push(record);
        }
        self.records.clear();
        self.spread = true;
    }

    /// The records that share their 32-bit hash with another, each once,
    /// sorted by hash and then by position: runs of equal hashes are the
    /// groups whose names the caller compares. Empty when every hash is
    /// distinct, which proves every name distinct.
    pub(super) fn collisions(&mut self) -> &[u64] {
        self.collided.clear();
        if self.spread {
            for bucket in &mut self.buckets {
                group(bucket, &mut self.table, &mut self.collided);
            }
        } else {
            group(&mut self.records, &mut self.table, &mut self.collided);
        }
        self.collided.sort_unstable();
        self.collided.dedup();
        &self.collided
    }
}

/// Appends to `collided` every record of `bucket` whose hash another one
/// shares (some more than once). May reorder `bucket`.
fn group(bucket: &mut [u64], table: &mut Vec<u32>, collided: &mut Vec<u64>) {
    if bucket.len() < 2 {
        return;
    }
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

/// [`group`] with a table, linear probing on the hash's low bits (a
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

    #[test]
    fn collisions_are_exactly_the_shared_hashes() {
        let mut rng = tensorfile_testkit::Rng::new(0x0dd5_eed5);
        let mut keys = UnknownKeys::default();
        // Sizes on both sides of the direct table and of partitioning; hash
        // pools small enough that many hashes repeat, or skewed so that
        // every record falls in one bucket (long probes, then sorting).
        for (n, pool, skew) in [
            (0usize, 1u64, false),
            (4100, 3000, false),
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
            let mut pushed = Vec::new();
            for pos in 0..n as u32 {
                let mut hash = (rng.next_u64() % pool).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                if skew {
                    // The same top 10 bits (one bucket, over MAX_TABLED
                    // at 70,000) and the same low 9 bits of the 32-bit
                    // hash (few, long probe chains).
                    hash = (hash & 0x003f_fe00_0000_0000) | 0xab00_0000_0000_0000;
                }
                keys.push(hash, pos);
                pushed.push((hash & 0xffff_ffff_0000_0000) | u64::from(pos));
            }
            let expected = naive(&pushed);
            assert_eq!(keys.collisions(), &expected[..], "n {n}, pool {pool}");
        }
    }
}
