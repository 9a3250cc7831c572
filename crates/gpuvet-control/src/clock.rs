//! Clock offsets between an agent and the coordinator, NTP-style, so every node's
//! events land on the coordinator's timeline.
//!
//! The coordinator sends a ping stamped `t0` (its clock); the agent stamps `t1` when
//! the ping arrives and `t2` when it answers (its clock); the coordinator stamps `t3`
//! when the answer arrives. Then `offset = ((t1 − t0) + (t2 − t3)) / 2` and
//! `round trip = (t3 − t0) − (t2 − t1)`. The offset is off by at most half the round
//! trip, so of several samples the one with the shortest round trip wins.
//!
//! The handshake takes a few samples; after it the coordinator takes one more every
//! few heartbeats ([`ClockTracker`]), and the best of the most recent ones wins. So an
//! offset taken while the machine was busy is replaced by a better one, and over a
//! long run the offset follows the clocks' drift (10 ppm is 36 ms an hour) instead of
//! keeping the handshake's for good.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

pub use gpuvet_model::time::{ns_to_ms, unix_now_ms, unix_now_ns};

/// One ping exchange: `t0` and `t3` on the coordinator's clock, `t1` and `t2` on the
/// agent's, all Unix nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingSample {
    pub t0_ns: i64,
    pub t1_ns: i64,
    pub t2_ns: i64,
    pub t3_ns: i64,
}

impl PingSample {
    /// Agent clock minus coordinator clock, by this sample.
    pub fn offset_ns(&self) -> i64 {
        let sum = (i128::from(self.t1_ns) - i128::from(self.t0_ns))
            + (i128::from(self.t2_ns) - i128::from(self.t3_ns));
        saturate(sum / 2)
    }

    /// Time on the wire, both ways, without the agent's own processing time. Never
    /// negative: clock steps in the middle of a sample cannot make it so.
    pub fn round_trip_ns(&self) -> i64 {
        let total = i128::from(self.t3_ns) - i128::from(self.t0_ns);
        let inside_agent = i128::from(self.t2_ns) - i128::from(self.t1_ns);
        saturate((total - inside_agent).max(0))
    }
}

fn saturate(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// How an agent's clock relates to the coordinator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// Agent clock minus coordinator clock, in nanoseconds.
    pub offset_ns: i64,
    /// Round trip of the sample the offset comes from; the offset is good to half of it.
    pub round_trip_ns: i64,
    /// How many samples were taken.
    pub samples: u32,
}

impl ClockOffset {
    /// The same clock: for the coordinator's own events.
    pub const ZERO: ClockOffset = ClockOffset {
        offset_ns: 0,
        round_trip_ns: 0,
        samples: 0,
    };

    /// An agent's Unix nanoseconds on the coordinator's clock.
    pub fn to_coordinator_ns(&self, agent_ns: i64) -> i64 {
        agent_ns.saturating_sub(self.offset_ns)
    }

    /// An agent's Unix milliseconds on the coordinator's clock.
    pub fn to_coordinator_ms(&self, agent_ms: u64) -> u64 {
        let agent_ns = i64::try_from(agent_ms)
            .unwrap_or(i64::MAX / 1_000_000)
            .saturating_mul(1_000_000);
        ns_to_ms(self.to_coordinator_ns(agent_ns))
    }

    /// The coordinator's Unix nanoseconds on the agent's clock.
    pub fn to_agent_ns(&self, coordinator_ns: i64) -> i64 {
        coordinator_ns.saturating_add(self.offset_ns)
    }

    /// How far off the offset may be, in nanoseconds.
    pub fn uncertainty_ns(&self) -> i64 {
        self.round_trip_ns / 2
    }
}

/// The offset from the sample with the shortest round trip, or `None` without samples.
pub fn estimate_offset(samples: &[PingSample]) -> Option<ClockOffset> {
    let best = samples.iter().min_by_key(|sample| sample.round_trip_ns())?;
    Some(ClockOffset {
        offset_ns: best.offset_ns(),
        round_trip_ns: best.round_trip_ns(),
        samples: u32::try_from(samples.len()).unwrap_or(u32::MAX),
    })
}

/// The samples an offset is chosen from: the most recent ones, so a sample from long
/// ago, however short its round trip, gives way once the clocks may have drifted.
pub const CLOCK_WINDOW: usize = 8;

/// A member's clock samples over the whole run, and the offset they give now.
#[derive(Debug, Clone)]
pub struct ClockTracker {
    recent: VecDeque<PingSample>,
    taken: u32,
    offset: ClockOffset,
}

impl ClockTracker {
    /// From the handshake's samples; `None` without any.
    pub fn new(samples: &[PingSample]) -> Option<ClockTracker> {
        if samples.is_empty() {
            return None;
        }
        let start = samples.len().saturating_sub(CLOCK_WINDOW);
        let mut tracker = ClockTracker {
            recent: samples[start..].iter().copied().collect(),
            taken: u32::try_from(samples.len()).unwrap_or(u32::MAX),
            offset: ClockOffset::ZERO,
        };
        tracker.update();
        Some(tracker)
    }

    /// Adds a sample, dropping the oldest beyond [`CLOCK_WINDOW`].
    pub fn add(&mut self, sample: PingSample) {
        if self.recent.len() == CLOCK_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(sample);
        self.taken = self.taken.saturating_add(1);
        self.update();
    }

    /// The offset by the recent samples; `samples` counts every sample taken.
    pub fn offset(&self) -> ClockOffset {
        self.offset
    }

    fn update(&mut self) {
        if let Some(best) = estimate_offset(self.recent.make_contiguous()) {
            self.offset = ClockOffset {
                samples: self.taken,
                ..best
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// A sample where the agent's clock runs `offset` ahead, the way there takes `out`,
    /// the agent takes `work`, and the way back takes `back`.
    fn sample(start: i64, offset: i64, out: i64, work: i64, back: i64) -> PingSample {
        let t0 = start;
        let t1 = t0 + out + offset;
        let t2 = t1 + work;
        let t3 = t0 + out + work + back;
        PingSample {
            t0_ns: t0,
            t1_ns: t1,
            t2_ns: t2,
            t3_ns: t3,
        }
    }

    #[test]
    fn symmetric_paths_give_the_exact_offset_and_round_trip() {
        let s = sample(1_000 * MS, 250 * MS, 3 * MS, 40 * MS, 3 * MS);
        assert_eq!(s.offset_ns(), 250 * MS);
        assert_eq!(s.round_trip_ns(), 6 * MS);
        let behind = sample(1_000 * MS, -7 * MS, MS, 0, MS);
        assert_eq!(behind.offset_ns(), -7 * MS);
    }

    #[test]
    fn the_shortest_round_trip_wins() {
        let samples = [
            // Asymmetric and slow: 30 ms out, 2 ms back, so the offset is off by 14 ms.
            sample(0, 100 * MS, 30 * MS, MS, 2 * MS),
            sample(50 * MS, 100 * MS, MS, MS, MS),
            sample(90 * MS, 100 * MS, 5 * MS, MS, 9 * MS),
        ];
        let best = estimate_offset(&samples).unwrap();
        assert_eq!(
            best,
            ClockOffset {
                offset_ns: 100 * MS,
                round_trip_ns: 2 * MS,
                samples: 3
            }
        );
        assert_eq!(best.uncertainty_ns(), MS);
        assert_eq!(estimate_offset(&[]), None);
    }

    #[test]
    fn a_later_sample_with_a_shorter_round_trip_replaces_the_handshakes_offset() {
        // The handshake ran while the machine was busy: 20 ms round trips, and the
        // way out slower than the way back.
        let busy: Vec<PingSample> = (0..4)
            .map(|i| sample(i * 100 * MS, 50 * MS, 15 * MS, MS, 5 * MS))
            .collect();
        let mut tracker = ClockTracker::new(&busy).unwrap();
        assert_eq!(tracker.offset().offset_ns, 55 * MS);
        assert_eq!(tracker.offset().samples, 4);
        tracker.add(sample(5_000 * MS, 50 * MS, MS, MS, MS));
        assert_eq!(
            tracker.offset(),
            ClockOffset {
                offset_ns: 50 * MS,
                round_trip_ns: 2 * MS,
                samples: 5
            }
        );
        // A worse sample does not displace it.
        tracker.add(sample(10_000 * MS, 50 * MS, 30 * MS, MS, MS));
        assert_eq!(tracker.offset().offset_ns, 50 * MS);
        assert_eq!(tracker.offset().samples, 6);
    }

    #[test]
    fn the_offset_follows_drift_once_old_samples_leave_the_window() {
        // A very good first sample, then the agent's clock drifts 1 ms ahead per
        // sample, measured with a slightly longer round trip each time.
        let mut tracker = ClockTracker::new(&[sample(0, 0, 100, 0, 100)]).unwrap();
        for i in 1..=CLOCK_WINDOW as i64 {
            tracker.add(sample(i * 1_000 * MS, i * MS, MS, 0, MS));
        }
        // The first sample has left the window: the best recent one is an early
        // drifted one (all have the same round trip, the first of them wins).
        assert_eq!(tracker.offset().offset_ns, MS);
        assert_eq!(tracker.offset().samples, CLOCK_WINDOW as u32 + 1);
        for i in 1..=CLOCK_WINDOW as i64 {
            tracker.add(sample((100 + i) * 1_000 * MS, (100 + i) * MS, MS, 0, MS));
        }
        assert_eq!(tracker.offset().offset_ns, 101 * MS);
        assert!(ClockTracker::new(&[]).is_none());
    }

    #[test]
    fn a_handshake_with_more_samples_than_the_window_keeps_the_latest() {
        let samples: Vec<PingSample> = (0..12)
            .map(|i| sample(i * MS, 7 * MS, if i == 0 { 0 } else { MS }, 0, MS))
            .collect();
        let tracker = ClockTracker::new(&samples).unwrap();
        assert_eq!(tracker.offset().samples, 12);
        assert_eq!(tracker.recent.len(), CLOCK_WINDOW);
        // Sample 0 (the shortest round trip) is not in the window any more.
        assert_eq!(tracker.offset().round_trip_ns, 2 * MS);
    }

    #[test]
    fn agent_times_convert_to_the_coordinator_timeline_and_back() {
        let offset = ClockOffset {
            offset_ns: 2_500 * MS,
            round_trip_ns: MS,
            samples: 8,
        };
        assert_eq!(offset.to_coordinator_ns(10_000 * MS), 7_500 * MS);
        assert_eq!(offset.to_agent_ns(7_500 * MS), 10_000 * MS);
        assert_eq!(offset.to_coordinator_ms(10_000), 7_500);
        assert_eq!(ClockOffset::ZERO.to_coordinator_ms(42), 42);
    }

    #[test]
    fn hostile_timestamps_neither_overflow_nor_go_negative() {
        let s = PingSample {
            t0_ns: i64::MIN,
            t1_ns: i64::MAX,
            t2_ns: i64::MIN,
            t3_ns: i64::MAX,
        };
        assert!(s.round_trip_ns() >= 0);
        let _ = s.offset_ns();
        let stepped_back = PingSample {
            t0_ns: 100,
            t1_ns: 0,
            t2_ns: 1_000,
            t3_ns: 105,
        };
        assert_eq!(stepped_back.round_trip_ns(), 0);
        let far = ClockOffset {
            offset_ns: i64::MIN,
            round_trip_ns: 0,
            samples: 1,
        };
        let _ = far.to_coordinator_ms(u64::MAX);
    }
}
