//! The collectives as plans, and the measurement around them.
//!
//! - all-reduce: a pipelined ring, reduce-scatter then all-gather, as NCCL's ring
//!   algorithm (each rank sends and receives 2(n−1)/n × S bytes);
//! - all-gather: a pipelined ring (each rank sends and receives (n−1)/n × S);
//! - all-to-all: pairwise exchange; in step s rank r sends its block for rank r+s
//!   while it receives rank r−s's block for itself.
//!
//! Inputs are small integers chosen so that every expected output is exact in f32
//! whatever the order of the additions, and every rank checks its whole output after
//! the last iteration.
//!
//! A run enters the collective with a header exchange on the ring (which collective,
//! how many elements, which sequence number), so ranks that disagree fail at once
//! instead of exchanging mismatched bytes, followed by a ring barrier, so no data moves
//! (and no stall timer runs) until every rank is there. After the warm-up each rank proposes an
//! iteration count from its warm-up time, and the ring agrees on the smallest, so every
//! rank runs the same number of iterations.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpuvet_model::stats::median;

use super::CollectiveSpec;
use super::engine::{
    self, Combine, Limits, PeerTraffic, Plan, Receive, SEGMENT_ELEMENTS, Send, Session, Source,
};
use super::link::{Links, Stop};
use crate::{BackendError, CancelToken, Sample, all_gather_busbw, all_reduce_busbw};

const ELEMENT_BYTES: usize = size_of::<f32>();
/// Opens every collective's header, so a stream that is out of step is recognised.
pub(super) const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"GVCOLL01");
/// Share of the time left before the deadline that the timed iterations may use.
const DEADLINE_SHARE: f64 = 0.8;
/// Each busbw sample spans at least this long: one iteration of a large collective,
/// many of a small one, so a scheduler hiccup of a millisecond is not read as noise.
const SAMPLE_WINDOW_SECONDS: f64 = 0.02;

// The collectives' own names, shared prefix and all.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    AllReduce,
    AllGather,
    AllToAll,
}

impl Kind {
    pub(super) fn code(self) -> u64 {
        match self {
            Kind::AllReduce => 1,
            Kind::AllGather => 2,
            Kind::AllToAll => 3,
        }
    }

    fn from_code(code: u64) -> Option<Kind> {
        [Kind::AllReduce, Kind::AllGather, Kind::AllToAll]
            .into_iter()
            .find(|kind| kind.code() == code)
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            Kind::AllReduce => "all-reduce",
            Kind::AllGather => "all-gather",
            Kind::AllToAll => "all-to-all",
        }
    }

    fn algorithm(self) -> &'static str {
        match self {
            Kind::AllReduce => "pipelined ring reduce-scatter + all-gather over tcp",
            Kind::AllGather => "pipelined ring over tcp",
            Kind::AllToAll => "pairwise exchange over tcp",
        }
    }

    fn busbw(self, algbw: f64, ranks: usize) -> f64 {
        match self {
            Kind::AllReduce => all_reduce_busbw(algbw, ranks),
            Kind::AllGather | Kind::AllToAll => all_gather_busbw(algbw, ranks),
        }
    }
}

/// A collective laid out for one rank: its plan, its input and what it must end with.
#[derive(Debug)]
struct Layout {
    kind: Kind,
    rank: usize,
    ranks: usize,
    plan: Plan,
    input: Vec<f32>,
    /// Elements per rank's share: the whole buffer for all-reduce, one block otherwise.
    block: usize,
    /// S as nccl-tests defines it, in bytes.
    bytes: u64,
}

impl Layout {
    fn new(
        kind: Kind,
        rank: usize,
        ranks: usize,
        requested_bytes: u64,
    ) -> Result<Layout, BackendError> {
        let elements = usize::try_from(requested_bytes)
            .unwrap_or(usize::MAX)
            .div_ceil(ELEMENT_BYTES)
            .max(1);
        // S = per-rank count × n for all-gather and all-to-all; round up so no rank's
        // share is empty.
        let (block, total) = match kind {
            Kind::AllReduce => (elements, elements),
            Kind::AllGather | Kind::AllToAll => {
                let block = elements.div_ceil(ranks);
                (block, block.checked_mul(ranks).ok_or_else(too_big)?)
            }
        };
        let (plan, input_len) = match kind {
            Kind::AllReduce => (ring_all_reduce(rank, ranks, total), total),
            Kind::AllGather => (ring_all_gather(rank, ranks, block), block),
            Kind::AllToAll => (pairwise_all_to_all(rank, ranks, block), total),
        };
        let mut layout = Layout {
            kind,
            rank,
            ranks,
            plan,
            input: Vec::new(),
            block,
            bytes: (total * ELEMENT_BYTES) as u64,
        };
        let mut input = Vec::new();
        input.try_reserve_exact(input_len).map_err(|_| too_big())?;
        input.extend((0..input_len).map(|index| layout.input_value(index)));
        layout.input = input;
        Ok(layout)
    }

    fn input_value(&self, index: usize) -> f32 {
        match self.kind {
            Kind::AllReduce => reduce_input(self.rank, index),
            Kind::AllGather => gather_input(self.rank, index),
            Kind::AllToAll => exchange_input(self.rank, index / self.block, index % self.block),
        }
    }

    fn expected(&self, index: usize) -> f32 {
        match self.kind {
            Kind::AllReduce => reduced(self.ranks, index),
            Kind::AllGather => gather_input(index / self.block, index % self.block),
            Kind::AllToAll => exchange_input(index / self.block, self.rank, index % self.block),
        }
    }

    /// The first element of this rank's output that is not what it should be.
    fn first_wrong(&self, output: &[Box<[f32]>]) -> Option<String> {
        self.plan
            .segments
            .iter()
            .zip(output)
            .find_map(|(range, values)| {
                range
                    .clone()
                    .zip(values.iter())
                    .find_map(|(index, &value)| {
                        let expected = self.expected(index);
                        (value != expected).then(|| self.describe_wrong(index, value, expected))
                    })
            })
    }

    fn describe_wrong(&self, index: usize, value: f32, expected: f32) -> String {
        let (rank, ranks) = (self.rank, self.ranks);
        let (source, offset) = (index / self.block, index % self.block);
        match self.kind {
            Kind::AllReduce => format!(
                "rank {rank} holds {value} at element {index} but the sum over {ranks} ranks is {expected}"
            ),
            Kind::AllGather => format!(
                "rank {rank} holds {value} at element {offset} of rank {source}'s block but rank {source} sent {expected}"
            ),
            Kind::AllToAll => format!(
                "rank {rank} holds {value} at element {offset} of the block from rank {source} but rank {source} sent {expected}"
            ),
        }
    }
}

fn too_big() -> BackendError {
    BackendError::Failed("the collective buffer does not fit in memory".to_owned())
}

/// Rank r's all-reduce input i: small integers, so sums are exact in any order.
fn reduce_input(rank: usize, index: usize) -> f32 {
    (rank + 1 + index % 7) as f32
}

fn reduced(ranks: usize, index: usize) -> f32 {
    (ranks * (ranks + 1) / 2 + ranks * (index % 7)) as f32
}

/// Rank r's all-gather input j: tells the source rank apart, exact below 2^24.
fn gather_input(rank: usize, index: usize) -> f32 {
    ((rank % (1 << 20)) * 8 + index % 8) as f32
}

/// What rank `from` sends rank `to` at element j of their block: names both ends.
fn exchange_input(from: usize, to: usize, index: usize) -> f32 {
    (((from % 2048) * 2048 + to % 2048) * 4 + index % 4) as f32
}

fn ring_neighbours(rank: usize, ranks: usize) -> (usize, usize) {
    ((rank + ranks - 1) % ranks, (rank + 1) % ranks)
}

/// Ring all-reduce of `elements` in place of NCCL's: in reduce-scatter step s, rank r
/// sends chunk r−s and adds the incoming chunk r−s−1 to its input; after n−1 steps it
/// holds the full sum of chunk r+1, which the all-gather steps pass around the ring.
fn ring_all_reduce(rank: usize, ranks: usize, elements: usize) -> Plan {
    let (left, right) = ring_neighbours(rank, ranks);
    let mut plan = Plan::default();
    let chunks: Vec<Vec<usize>> = crate::chunk_ranges(elements, ranks)
        .into_iter()
        .map(|range| plan.add_segments(range))
        .collect();
    let segments = plan.segments.clone();
    plan.sends = chunks[rank]
        .iter()
        .map(|&id| Send {
            to: right,
            source: Source::Input(segments[id].clone()),
        })
        .collect();
    for step in 0..ranks - 1 {
        let chunk = (rank + ranks - step - 1) % ranks;
        plan.receives
            .extend(chunks[chunk].iter().map(|&id| Receive {
                from: left,
                into: id,
                combine: Combine::AddInput(segments[id].clone()),
                // The last reduce-scatter step's result opens the all-gather.
                forward_to: Some(right),
            }));
    }
    for step in 0..ranks - 1 {
        let chunk = (rank + ranks - step) % ranks;
        plan.receives
            .extend(chunks[chunk].iter().map(|&id| Receive {
                from: left,
                into: id,
                combine: Combine::Overwrite,
                forward_to: (step + 2 < ranks).then_some(right),
            }));
    }
    plan
}

/// Ring all-gather of `block` elements per rank: rank r sends its own block, then
/// forwards each block it receives until every block has gone n−1 hops.
fn ring_all_gather(rank: usize, ranks: usize, block: usize) -> Plan {
    let (left, right) = ring_neighbours(rank, ranks);
    let mut plan = Plan::default();
    let blocks: Vec<Vec<usize>> = (0..ranks)
        .map(|owner| plan.add_segments(owner * block..(owner + 1) * block))
        .collect();
    let own_offset = rank * block;
    for &id in &blocks[rank] {
        let range = &plan.segments[id];
        let in_input = range.start - own_offset..range.end - own_offset;
        plan.local_copies.push((in_input.clone(), id));
        plan.sends.push(Send {
            to: right,
            source: Source::Input(in_input),
        });
    }
    for step in 0..ranks - 1 {
        let owner = (rank + ranks - step - 1) % ranks;
        plan.receives
            .extend(blocks[owner].iter().map(|&id| Receive {
                from: left,
                into: id,
                combine: Combine::Overwrite,
                forward_to: (step + 2 < ranks).then_some(right),
            }));
    }
    plan
}

/// Pairwise all-to-all of `block` elements per pair: step s sends to rank r+s and
/// receives from rank r−s, so every rank sends and receives at once in every step.
fn pairwise_all_to_all(rank: usize, ranks: usize, block: usize) -> Plan {
    let mut plan = Plan::default();
    let blocks: Vec<Vec<usize>> = (0..ranks)
        .map(|source| plan.add_segments(source * block..(source + 1) * block))
        .collect();
    for &id in &blocks[rank] {
        plan.local_copies.push((plan.segments[id].clone(), id));
    }
    for step in 1..ranks {
        let to = (rank + step) % ranks;
        // Block `to` of the input is laid out like block `to` of the output.
        plan.sends.extend(blocks[to].iter().map(|&id| Send {
            to,
            source: Source::Input(plan.segments[id].clone()),
        }));
        let from = (rank + ranks - step) % ranks;
        plan.receives.extend(blocks[from].iter().map(|&id| Receive {
            from,
            into: id,
            combine: Combine::Overwrite,
            forward_to: None,
        }));
    }
    plan
}

/// What one run of a collective measured on this rank.
#[derive(Debug, Clone)]
pub(super) struct Run {
    pub(super) kind: Kind,
    pub(super) rank: usize,
    pub(super) ranks: usize,
    /// S as nccl-tests defines it, in bytes.
    pub(super) bytes: u64,
    pub(super) seconds: Vec<f64>,
    pub(super) wrong_result: Option<String>,
    /// Per-peer traffic of the timed iterations, indexed by rank.
    pub(super) traffic: Vec<PeerTraffic>,
}

/// Runs `kind` on this rank's links: header exchange, warm-up, agreement on the
/// iteration count, timed iterations, then the check of the output.
pub(super) fn run(
    links: &Links,
    rank: usize,
    kind: Kind,
    sequence: u64,
    spec: &CollectiveSpec,
    deadline: Instant,
    cancel: &CancelToken,
) -> Result<Run, BackendError> {
    cancel.check()?;
    let ranks = links.world();
    let bytes = spec
        .bytes
        .unwrap_or_else(|| CollectiveSpec::default_bytes(ranks));
    let layout = Layout::new(kind, rank, ranks, bytes)?;
    let limits = Limits {
        deadline,
        cancel,
        stall_timeout: spec.stall_timeout,
        context: kind.label(),
    };
    let header = [HEADER_MAGIC, kind.code(), layout.bytes, sequence];
    let ((seconds, traffic), output) = engine::with_session(
        links,
        rank,
        &layout.input,
        &layout.plan,
        limits,
        |session| {
            enter(session, header, rank, ranks, links)?;
            // The first iteration pays for page faults and TCP's slow start; the
            // others tell how long one takes. The last queues nothing early: control
            // words follow it.
            let warm_ups = spec.warmup_iterations.max(1);
            let mut warm_up_times = Vec::with_capacity(warm_ups);
            for iteration in 0..warm_ups {
                warm_up_times.push(session.iterate(iteration + 1 < warm_ups)?.as_secs_f64());
            }
            let typical = median(&warm_up_times[usize::from(warm_ups > 1)..]).unwrap_or(0.0);
            let remaining = deadline.saturating_duration_since(Instant::now());
            let proposal = iteration_count(spec, Duration::from_secs_f64(typical), remaining);
            let agreed = agree_on_min(session, proposal, rank, ranks)?;
            session.reset_traffic();
            let mut seconds = Vec::with_capacity(agreed as usize);
            for iteration in 0..agreed {
                let another_follows = iteration + 1 < agreed;
                seconds.push(session.iterate(another_follows)?.as_secs_f64().max(1e-9));
            }
            Ok((seconds, session.traffic().to_vec()))
        },
    )?;
    Ok(Run {
        kind,
        rank,
        ranks,
        bytes: layout.bytes,
        seconds,
        wrong_result: layout.first_wrong(&output),
        traffic,
    })
}

/// algbw (GB/s) of each window of back-to-back iterations of `bytes` (see
/// [`windows`]), and the busbw `busbw` makes of each.
pub(crate) fn windowed_rates(
    seconds: &[f64],
    bytes: u64,
    busbw: impl Fn(f64) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let algbw: Vec<f64> = windows(seconds, SAMPLE_WINDOW_SECONDS)
        .into_iter()
        .map(|(iterations, seconds)| iterations as f64 * bytes as f64 / seconds / 1e9)
        .collect();
    let samples = algbw.iter().map(|&algbw| busbw(algbw)).collect();
    (algbw, samples)
}

/// Groups consecutive iterations into windows of at least `window` seconds, as
/// (iterations, seconds); a short remainder joins the last window.
fn windows(seconds: &[f64], window: f64) -> Vec<(usize, f64)> {
    let mut windows: Vec<(usize, f64)> = Vec::new();
    let mut current = (0, 0.0);
    for &iteration in seconds {
        current = (current.0 + 1, current.1 + iteration);
        if current.1 >= window {
            windows.push(current);
            current = (0, 0.0);
        }
    }
    if current.0 > 0 {
        match windows.last_mut() {
            Some(last) => *last = (last.0 + current.0, last.1 + current.1),
            None => windows.push(current),
        }
    }
    windows
}

/// Tells the next rank what this rank runs, checks what the previous rank runs, then
/// waits until every rank has entered: data only flows once all are present, so a
/// late rank is waited for up to the deadline, never mistaken for a stalled link.
fn enter(
    session: &mut Session<'_>,
    header: [u64; 4],
    rank: usize,
    ranks: usize,
    links: &Links,
) -> Result<(), Stop> {
    let (left, right) = ring_neighbours(rank, ranks);
    let theirs = session.exchange_words(header, right, left)?;
    if theirs == header {
        // A ring barrier: after k more passes, every rank knows that the k ranks
        // before it have entered.
        for _ in 1..ranks - 1 {
            session.exchange_words([HEADER_MAGIC], right, left)?;
        }
        return Ok(());
    }
    let name = links.name(left);
    let ours = describe_header(&header);
    let message = if theirs[0] == HEADER_MAGIC {
        format!(
            "{name} entered {} while rank {rank} entered {ours}",
            describe_header(&theirs)
        )
    } else {
        format!(
            "{name} is out of step: it sent no collective header when rank {rank} entered {ours}"
        )
    };
    Err(Stop::Failed(BackendError::Failed(message)))
}

fn describe_header(header: &[u64; 4]) -> String {
    let kind = Kind::from_code(header[1]).map_or("an unknown collective", Kind::label);
    format!("{kind} #{} of {} bytes", header[3], header[2])
}

/// Timed iterations wanted after a warm-up that took `warm_up`: enough for the minimum
/// time, within the count limits, and within most of the time left.
fn iteration_count(spec: &CollectiveSpec, warm_up: Duration, remaining: Duration) -> u64 {
    let warm_up = warm_up.as_secs_f64().max(1e-6);
    let for_time = (spec.min_seconds / warm_up).ceil();
    let wanted = for_time.clamp(
        spec.min_iterations as f64,
        spec.max_iterations.max(1) as f64,
    );
    let affordable = (remaining.as_secs_f64() * DEADLINE_SHARE / warm_up).floor();
    wanted.min(affordable).max(1.0) as u64
}

/// The smallest proposal of all ranks: passed around the ring n−1 times.
fn agree_on_min(
    session: &mut Session<'_>,
    proposal: u64,
    rank: usize,
    ranks: usize,
) -> Result<u64, Stop> {
    let (left, right) = ring_neighbours(rank, ranks);
    let mut agreed = proposal;
    for _ in 0..ranks - 1 {
        let [theirs] = session.exchange_words([agreed], right, left)?;
        agreed = agreed.min(theirs);
    }
    Ok(agreed)
}

impl Run {
    /// The run as the checks report it: busbw as nccl-tests defines it, one sample per
    /// window of back-to-back iterations (see [`windows`]).
    pub(super) fn to_sample(&self) -> Sample {
        let (algbw, samples) = windowed_rates(&self.seconds, self.bytes, |algbw| {
            self.kind.busbw(algbw, self.ranks)
        });
        let mut extra = BTreeMap::from([
            ("algbw".to_owned(), median(&algbw).unwrap_or(0.0)),
            (
                "time_us".to_owned(),
                median(&self.seconds).unwrap_or(0.0) * 1e6,
            ),
        ]);
        // Where each link's time went: a slow sender shows as a long receive wait on
        // the rank after it, a slow receiver as a long send wait on the rank before.
        for (peer, traffic) in self.traffic.iter().enumerate() {
            if traffic.received.bytes > 0 {
                extra.insert(
                    format!("recv_wait_s.rank{peer}"),
                    traffic.received.blocked.as_secs_f64(),
                );
            }
            if traffic.sent.bytes > 0 {
                extra.insert(
                    format!("send_wait_s.rank{peer}"),
                    traffic.sent.blocked.as_secs_f64(),
                );
            }
        }
        Sample {
            value: median(&samples).unwrap_or(0.0),
            wrong_result: self.wrong_result.clone(),
            extra,
            params: BTreeMap::from([
                ("bytes".to_owned(), self.bytes.to_string()),
                ("ranks".to_owned(), self.ranks.to_string()),
                ("rank".to_owned(), self.rank.to_string()),
                ("iterations".to_owned(), self.seconds.len().to_string()),
                (
                    "sample_window_ms".to_owned(),
                    (SAMPLE_WINDOW_SECONDS * 1e3).to_string(),
                ),
                ("algorithm".to_owned(), self.kind.algorithm().to_owned()),
                (
                    "segment_bytes".to_owned(),
                    (SEGMENT_ELEMENTS * ELEMENT_BYTES).to_string(),
                ),
                ("dtype".to_owned(), "fp32".to_owned()),
            ]),
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays a plan's byte streams between ranks in memory, in lockstep, to check the
    /// schedules without sockets: every receive must find a send of the same length on
    /// the other side, in the same order, and the outputs must come out right.
    fn simulate(kind: Kind, ranks: usize, bytes: u64) -> Vec<Option<String>> {
        let layouts: Vec<Layout> = (0..ranks)
            .map(|rank| Layout::new(kind, rank, ranks, bytes).unwrap())
            .collect();
        let mut outputs: Vec<Vec<Box<[f32]>>> = layouts
            .iter()
            .map(|layout| {
                layout
                    .plan
                    .segments
                    .iter()
                    .map(|range| vec![f32::NAN; range.len()].into_boxed_slice())
                    .collect()
            })
            .collect();
        // Channels between ordered pairs, as FIFO queues of segments in flight.
        let mut wires: BTreeMap<(usize, usize), std::collections::VecDeque<Vec<f32>>> =
            BTreeMap::new();
        let mut next_receive = vec![0usize; ranks];
        for (rank, layout) in layouts.iter().enumerate() {
            for (range, id) in &layout.plan.local_copies {
                outputs[rank][*id].copy_from_slice(&layout.input[range.clone()]);
            }
            for send in &layout.plan.sends {
                let Source::Input(range) = &send.source else {
                    panic!("first sends come from the input")
                };
                wires
                    .entry((rank, send.to))
                    .or_default()
                    .push_back(layout.input[range.clone()].to_vec());
            }
        }
        loop {
            let mut progressed = false;
            for rank in 0..ranks {
                let layout = &layouts[rank];
                while let Some(receive) = layout.plan.receives.get(next_receive[rank]) {
                    let Some(values) = wires
                        .get_mut(&(receive.from, rank))
                        .and_then(|wire| wire.pop_front())
                    else {
                        break;
                    };
                    let segment = &mut outputs[rank][receive.into];
                    assert_eq!(values.len(), segment.len(), "segment sizes agree");
                    match &receive.combine {
                        Combine::Overwrite => segment.copy_from_slice(&values),
                        Combine::AddInput(range) => {
                            for ((sum, mine), theirs) in segment
                                .iter_mut()
                                .zip(&layout.input[range.clone()])
                                .zip(&values)
                            {
                                *sum = mine + theirs;
                            }
                        }
                    }
                    if let Some(to) = receive.forward_to {
                        let forwarded = segment.to_vec();
                        wires.entry((rank, to)).or_default().push_back(forwarded);
                    }
                    next_receive[rank] += 1;
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        for (rank, layout) in layouts.iter().enumerate() {
            assert_eq!(
                next_receive[rank],
                layout.plan.receives.len(),
                "rank {rank} got everything"
            );
        }
        assert!(
            wires.values().all(|wire| wire.is_empty()),
            "nothing left unread"
        );
        layouts
            .iter()
            .zip(&outputs)
            .map(|(layout, output)| layout.first_wrong(output))
            .collect()
    }

    #[test]
    fn every_schedule_delivers_the_right_output() {
        for kind in [Kind::AllReduce, Kind::AllGather, Kind::AllToAll] {
            for ranks in 2..=5 {
                // Tiny, uneven, and several segments per chunk.
                for bytes in [
                    4,
                    12,
                    4 * 1001,
                    (SEGMENT_ELEMENTS * ELEMENT_BYTES * 3 + 44) as u64,
                ] {
                    let wrong = simulate(kind, ranks, bytes);
                    assert!(
                        wrong.iter().all(Option::is_none),
                        "{kind:?} {ranks} ranks {bytes} bytes: {wrong:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn sizes_follow_nccl_tests() {
        let reduce = Layout::new(Kind::AllReduce, 0, 3, 4 * 1001).unwrap();
        assert_eq!((reduce.bytes, reduce.input.len()), (4 * 1001, 1001));
        // 1001 elements over 3 ranks: 334 per rank, S = 334 × 3 × 4.
        let gather = Layout::new(Kind::AllGather, 1, 3, 4 * 1001).unwrap();
        assert_eq!(
            (gather.bytes, gather.input.len(), gather.block),
            (4 * 1002, 334, 334)
        );
        let exchange = Layout::new(Kind::AllToAll, 2, 3, 4 * 1001).unwrap();
        assert_eq!((exchange.bytes, exchange.input.len()), (4 * 1002, 1002));
        // Nothing asked for still moves one element.
        assert_eq!(Layout::new(Kind::AllReduce, 0, 2, 0).unwrap().bytes, 4);
    }

    #[test]
    fn expected_values_are_exact_and_tell_sources_apart() {
        for ranks in [2, 7, 4096] {
            for index in 0..20 {
                let sum: f32 = (0..ranks).map(|rank| reduce_input(rank, index)).sum();
                assert_eq!(sum, reduced(ranks, index));
            }
        }
        assert_ne!(gather_input(1, 0), gather_input(2, 0));
        assert_ne!(exchange_input(1, 2, 0), exchange_input(2, 1, 0));
        assert!(exchange_input(2047, 2047, 3) < (1 << 24) as f32);
    }

    #[test]
    fn a_wrong_element_is_named_with_its_source() {
        let layout = Layout::new(Kind::AllGather, 0, 2, 16).unwrap();
        let mut output: Vec<Box<[f32]>> = layout
            .plan
            .segments
            .iter()
            .map(|range| range.clone().map(|index| layout.expected(index)).collect())
            .collect();
        assert_eq!(layout.first_wrong(&output), None);
        output[1][1] = -1.0;
        assert_eq!(
            layout.first_wrong(&output).as_deref(),
            Some("rank 0 holds -1 at element 1 of rank 1's block but rank 1 sent 9")
        );
    }

    #[test]
    fn iteration_count_respects_time_limits_and_deadline() {
        let spec = CollectiveSpec {
            min_iterations: 5,
            max_iterations: 100,
            min_seconds: 0.5,
            ..CollectiveSpec::default()
        };
        let ms = Duration::from_millis;
        assert_eq!(iteration_count(&spec, ms(50), ms(60_000)), 10);
        assert_eq!(iteration_count(&spec, ms(500), ms(60_000)), 5);
        assert_eq!(iteration_count(&spec, ms(1), ms(60_000)), 100);
        // Only 1 s left: 0.8 s of 500 ms iterations is one iteration.
        assert_eq!(iteration_count(&spec, ms(500), ms(1_000)), 1);
        assert_eq!(iteration_count(&spec, ms(500), ms(0)), 1);
    }

    #[test]
    fn windows_group_short_iterations_and_keep_long_ones() {
        assert_eq!(windows(&[], 0.02), vec![]);
        assert_eq!(windows(&[0.1, 0.2], 0.02), vec![(1, 0.1), (1, 0.2)]);
        // 0.008 s iterations: three make a window; the leftover joins the last one.
        let grouped = windows(&[0.008; 7], 0.02);
        assert_eq!(grouped.len(), 2);
        assert_eq!((grouped[0].0, grouped[1].0), (3, 4));
        assert_eq!(windows(&[0.001, 0.001], 0.02), vec![(2, 0.002)]);
    }
}
