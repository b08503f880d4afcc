//! A histogram for what happens on every worker at once (steps, commits): each thread adds to
//! a shard of its own, on its own cache lines, and a scrape adds the shards up. A histogram
//! with one set of counters, written by every worker, would bounce those lines between cores on
//! every step.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// Shards: at least as many as the workers of a large machine, so that two threads rarely
/// share one.
const SHARDS: usize = 32;

/// One thread's counts, alone on its cache lines.
#[repr(align(128))]
struct Shard {
    /// Per bucket (the last one: above every bound).
    counts: Box<[AtomicU64]>,
    /// The sum of the values, in the histogram's units.
    sum: AtomicU64,
}

/// Values counted into buckets with upper bounds `bounds` (in the histogram's units, read as
/// `unit` each: nanoseconds read as seconds, say).
pub(crate) struct ShardedHistogram {
    bounds: Box<[u64]>,
    unit: f64,
    shards: Box<[Shard]>,
}

impl std::fmt::Debug for ShardedHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedHistogram")
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// This thread's shard.
    static SHARD: usize = {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
    };
}

impl ShardedHistogram {
    /// Buckets bounded by `bounds` (ascending), each value read as `unit` of the exposition's
    /// unit.
    pub(crate) fn new(bounds: &[u64], unit: f64) -> ShardedHistogram {
        let shards = (0..SHARDS)
            .map(|_| Shard {
                counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
                sum: AtomicU64::new(0),
            })
            .collect();
        ShardedHistogram {
            bounds: bounds.into(),
            unit,
            shards,
        }
    }

    /// Durations from 1 µs to about 16 s, in nanoseconds, read as seconds.
    pub(crate) fn seconds() -> ShardedHistogram {
        let bounds: Vec<u64> = (0..13).map(|i| 1_000u64 << (2 * i as u64)).collect();
        ShardedHistogram::new(&bounds, 1e-9)
    }

    /// Counts from 1 to 16,384, in powers of two.
    pub(crate) fn counts() -> ShardedHistogram {
        let bounds: Vec<u64> = (0..15).map(|i| 1u64 << i).collect();
        ShardedHistogram::new(&bounds, 1.0)
    }

    /// Counts `value`. Relaxed: the counts are read only by scrapes, which need no order
    /// between them.
    pub(crate) fn observe(&self, value: u64) {
        let shard = &self.shards[SHARD.with(|s| *s)];
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        shard.counts[bucket].fetch_add(1, Ordering::Relaxed);
        shard.sum.fetch_add(value, Ordering::Relaxed);
    }

    /// Counts a duration.
    pub(crate) fn observe_duration(&self, duration: std::time::Duration) {
        self.observe(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The sum (in the exposition's unit), the count, and the cumulative count of each bucket.
    pub(crate) fn totals(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let mut counts = vec![0u64; self.bounds.len() + 1];
        let mut sum = 0u64;
        for shard in self.shards.iter() {
            for (total, count) in counts.iter_mut().zip(shard.counts.iter()) {
                *total += count.load(Ordering::Relaxed);
            }
            sum = sum.wrapping_add(shard.sum.load(Ordering::Relaxed));
        }
        let mut cumulative = 0;
        let mut buckets = Vec::with_capacity(counts.len());
        for (i, count) in counts.iter().enumerate() {
            cumulative += count;
            let bound = self
                .bounds
                .get(i)
                .map_or(f64::INFINITY, |&b| b as f64 * self.unit);
            buckets.push((bound, cumulative));
        }
        (sum as f64 * self.unit, cumulative, buckets)
    }
}

impl EncodeMetric for ShardedHistogram {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.totals();
        // The encoder adds the buckets up itself, and writes the last as `+Inf` when its bound
        // is `f64::MAX`: it takes each bucket's own count.
        let mut below = 0;
        let each: Vec<(f64, u64)> = buckets
            .iter()
            .map(|&(bound, cumulative)| {
                let own = cumulative - below;
                below = cumulative;
                (if bound.is_finite() { bound } else { f64::MAX }, own)
            })
            .collect();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &each, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_land_in_the_first_bucket_that_holds_them() {
        let histogram = ShardedHistogram::new(&[10, 100], 1.0);
        for value in [0, 10, 11, 100, 101, 5_000] {
            histogram.observe(value);
        }
        let (sum, count, buckets) = histogram.totals();
        assert_eq!(sum, 5_222.0);
        assert_eq!(count, 6);
        assert_eq!(buckets, vec![(10.0, 2), (100.0, 4), (f64::INFINITY, 6)]);
    }

    /// The exposition's buckets count what is at or under each bound, and the last is `+Inf`,
    /// holding every value.
    #[test]
    fn the_exposition_counts_each_value_once_per_bucket_it_is_under() {
        let histogram = ShardedHistogram::new(&[10, 100], 1.0);
        for value in [0, 10, 11, 100, 101, 5_000] {
            histogram.observe(value);
        }
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("h", "values", histogram);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let buckets: Vec<&str> = text.lines().filter(|l| l.starts_with("h_bucket")).collect();
        assert_eq!(
            buckets,
            [
                "h_bucket{le=\"10.0\"} 2",
                "h_bucket{le=\"100.0\"} 4",
                "h_bucket{le=\"+Inf\"} 6"
            ],
            "{text}"
        );
        assert!(text.contains("h_count 6"), "{text}");
    }

    #[test]
    fn shards_add_up_across_threads() {
        let histogram = std::sync::Arc::new(ShardedHistogram::seconds());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let histogram = std::sync::Arc::clone(&histogram);
                std::thread::spawn(move || {
                    for _ in 0..1_000 {
                        histogram.observe_duration(std::time::Duration::from_micros(3));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let (sum, count, buckets) = histogram.totals();
        assert_eq!(count, 8_000);
        assert!((sum - 0.024).abs() < 1e-9, "{sum}");
        // 3 µs: above 1 µs, within 4 µs.
        assert_eq!(buckets[0].1, 0);
        assert_eq!(buckets[1].1, 8_000);
    }
}
