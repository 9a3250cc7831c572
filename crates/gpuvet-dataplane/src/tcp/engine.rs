//! The full-duplex engine every collective runs on.
//!
//! A collective is described as a [`Plan`]: the output split into segments, the sends
//! that need no input from peers, and the ordered list of segments to receive, each
//! either copied or added to a slice of this rank's input and, for ring algorithms,
//! forwarded to the next rank as soon as it is complete. Both ends of every connection
//! derive the same plan, so the byte stream needs no framing.
//!
//! A sender thread owns the writing: it takes segments off a FIFO and writes them while
//! the caller's thread reads and reduces the next ones. Sending and receiving thus
//! overlap at segment granularity, which is what keeps a link busy in both directions
//! (a pipelined ring, as NCCL and Gloo run it). Segments are moved to the sender and
//! back rather than shared, so no byte is copied in user space beyond the reduction
//! and a rank's own share.
//!
//! Iterations run back to back like one long transfer: the next iteration's first
//! sends are queued as soon as the current one has queued all of its own, and only the
//! last iteration waits for its sends to be written.
//!
//! Control words (entering a collective, agreeing on the iteration count) go directly
//! over the ring links while the sender is idle.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use super::link::{self, Links, POLL, Stop, Traffic, Watch, f32_bytes, f32_bytes_mut};
use crate::{BackendError, CancelToken};

/// Pipelining grain: small enough that a ring step's forwarding starts early, large
/// enough that each write and read moves plenty of bytes per system call.
pub(super) const SEGMENT_ELEMENTS: usize = (512 << 10) / size_of::<f32>();

/// Received bytes are added to the input in pieces this small (512 KiB, half of L2 on
/// common server cores), each right after it arrives, so the addition reads them from
/// cache.
const REDUCE_PIECE_ELEMENTS: usize = (512 << 10) / size_of::<f32>();

pub(super) type SegmentId = usize;

/// A run's output, one boxed slice per segment of the plan.
pub(super) type Output = Vec<Box<[f32]>>;

/// Where a send takes its bytes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Source {
    /// A slice of this rank's input.
    Input(Range<usize>),
    /// An output segment, complete by the time it is sent.
    Output(SegmentId),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Send {
    pub(super) to: usize,
    pub(super) source: Source,
}

/// What to do with a received segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Combine {
    Overwrite,
    /// Output = this input slice + the received values.
    AddInput(Range<usize>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Receive {
    pub(super) from: usize,
    pub(super) into: SegmentId,
    pub(super) combine: Combine,
    /// Sent on to this rank once received, behind everything queued before it.
    pub(super) forward_to: Option<usize>,
}

/// One iteration of a collective, as seen by one rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Plan {
    /// The output range each segment holds.
    pub(super) segments: Vec<Range<usize>>,
    /// Input slices copied into output segments at the start (a rank's own share).
    pub(super) local_copies: Vec<(Range<usize>, SegmentId)>,
    pub(super) sends: Vec<Send>,
    pub(super) receives: Vec<Receive>,
}

impl Plan {
    /// Cuts `range` of the output into segments, returning their ids in order.
    pub(super) fn add_segments(&mut self, range: Range<usize>) -> Vec<SegmentId> {
        let mut ids = Vec::new();
        let mut start = range.start;
        while start < range.end {
            let end = (start + SEGMENT_ELEMENTS).min(range.end);
            ids.push(self.segments.len());
            self.segments.push(start..end);
            start = end;
        }
        ids
    }
}

/// What the sender thread hands back for every item, in order.
#[derive(Debug)]
struct Sent {
    segment: Option<(SegmentId, Box<[f32]>)>,
    to: usize,
    traffic: Traffic,
}

#[derive(Debug)]
struct Outgoing {
    to: usize,
    payload: Payload,
}

#[derive(Debug)]
enum Payload {
    Input(Range<usize>),
    Segment(SegmentId, Box<[f32]>),
}

/// Per-peer totals since the last [`Session::reset_traffic`].
#[derive(Debug, Clone, Default)]
pub(super) struct PeerTraffic {
    pub(super) sent: Traffic,
    pub(super) received: Traffic,
}

/// A collective in progress: the plan, the output, and the sender thread's queue.
#[derive(Debug)]
pub(super) struct Session<'a> {
    links: &'a Links,
    input: &'a [f32],
    plan: &'a Plan,
    rank: usize,
    /// Output segments; `None` while lent to the sender.
    slots: Vec<Option<Box<[f32]>>>,
    scratch: Vec<f32>,
    to_sender: Option<mpsc::Sender<Outgoing>>,
    from_sender: mpsc::Receiver<Sent>,
    /// Destination of each item the sender has not finished, oldest first.
    in_flight: VecDeque<usize>,
    /// Whether the next iteration's first sends are already queued.
    sends_queued_early: bool,
    first_sends_are_from_input: bool,
    traffic: Vec<PeerTraffic>,
    data_watch: Watch<'a>,
    control_watch: Watch<'a>,
}

/// The limits of one collective run.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits<'a> {
    pub(super) deadline: Instant,
    pub(super) cancel: &'a CancelToken,
    pub(super) stall_timeout: Duration,
    pub(super) context: &'a str,
}

/// Runs `body` with a session whose sender thread lives exactly as long as the body,
/// and returns the body's value with the output segments.
pub(super) fn with_session<T>(
    links: &Links,
    rank: usize,
    input: &[f32],
    plan: &Plan,
    limits: Limits<'_>,
    body: impl FnOnce(&mut Session<'_>) -> Result<T, Stop>,
) -> Result<(T, Output), BackendError> {
    let slots = plan
        .segments
        .iter()
        .map(|range| allocate(range.len()).map(Some))
        .collect::<Result<Vec<_>, _>>()?;
    let scratch_len = plan
        .segments
        .iter()
        .map(Range::len)
        .max()
        .unwrap_or(0)
        .min(REDUCE_PIECE_ELEMENTS);
    let scratch = allocate(scratch_len)?.into_vec();
    let abort = AtomicBool::new(false);
    let data_watch = Watch {
        deadline: limits.deadline,
        cancel: limits.cancel,
        abort: &abort,
        stall_timeout: Some(limits.stall_timeout),
        context: limits.context,
    };
    let control_watch = Watch {
        stall_timeout: None,
        ..data_watch
    };

    thread::scope(|scope| {
        let (to_sender, sender_queue) = mpsc::channel::<Outgoing>();
        let (sender_done, from_sender) = mpsc::channel::<Sent>();
        let sender = thread::Builder::new()
            .name(format!("gpuvet-tcp-send-{rank}"))
            .spawn_scoped(scope, move || {
                let result = send_loop(links, input, &sender_queue, &sender_done, &data_watch);
                if result.is_err() {
                    data_watch.raise_abort();
                }
                result
            })
            .map_err(|error| BackendError::io("could not start the sending thread", error))?;
        let mut session = Session {
            links,
            input,
            plan,
            rank,
            slots,
            scratch,
            to_sender: Some(to_sender),
            from_sender,
            in_flight: VecDeque::new(),
            sends_queued_early: false,
            first_sends_are_from_input: plan
                .sends
                .iter()
                .all(|send| matches!(send.source, Source::Input(_))),
            traffic: vec![PeerTraffic::default(); links.world()],
            data_watch,
            control_watch,
        };
        let body_result = body(&mut session);
        if body_result.is_err() {
            data_watch.raise_abort();
        }
        // Closing the queue lets an idle sender return.
        session.to_sender = None;
        let sender_result = sender.join().unwrap_or_else(|_| {
            Err(Stop::Failed(BackendError::Failed(
                "the sending thread panicked".to_owned(),
            )))
        });
        match (body_result, sender_result) {
            (Ok(value), Ok(())) => {
                let output = session.slots.into_iter().flatten().collect();
                Ok((value, output))
            }
            // The half that failed for a reason of its own names the cause; the other
            // one only saw the abort.
            (Err(Stop::Failed(error)), _) | (_, Err(Stop::Failed(error))) => Err(error),
            (Err(Stop::Aborted), _) | (_, Err(Stop::Aborted)) => Err(BackendError::Failed(
                format!("the {} stopped without a cause", limits.context),
            )),
        }
    })
}

fn allocate(len: usize) -> Result<Box<[f32]>, BackendError> {
    let mut values = Vec::new();
    values.try_reserve_exact(len).map_err(|_| {
        BackendError::Failed(format!(
            "could not allocate {:.0} MiB for a collective buffer",
            (len * size_of::<f32>()) as f64 / f64::from(1u32 << 20)
        ))
    })?;
    values.resize(len, 0.0);
    Ok(values.into_boxed_slice())
}

fn send_loop(
    links: &Links,
    input: &[f32],
    queue: &mpsc::Receiver<Outgoing>,
    done: &mpsc::Sender<Sent>,
    watch: &Watch<'_>,
) -> Result<(), Stop> {
    loop {
        let item = match queue.recv_timeout(POLL) {
            Ok(item) => item,
            Err(RecvTimeoutError::Timeout) => {
                watch.check()?;
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let link = links.to(item.to)?;
        let mut traffic = Traffic::default();
        let segment = match item.payload {
            Payload::Input(range) => {
                link::send_all(link, f32_bytes(&input[range]), watch, &mut traffic)?;
                None
            }
            Payload::Segment(id, values) => {
                link::send_all(link, f32_bytes(&values), watch, &mut traffic)?;
                Some((id, values))
            }
        };
        // The session may already have stopped listening; nothing is lost then.
        let _ = done.send(Sent {
            segment,
            to: item.to,
            traffic,
        });
    }
}

impl Session<'_> {
    /// One iteration of the plan; returns its wall time.
    ///
    /// With `another_follows`, the next iteration's first sends are queued as soon as
    /// every send of this one is queued, so the sender goes on writing while this
    /// iteration's last segments are still arriving: back-to-back iterations then keep
    /// the link as busy as one long transfer, with no drain at each boundary.
    pub(super) fn iterate(&mut self, another_follows: bool) -> Result<Duration, Stop> {
        self.data_watch.check()?;
        let (plan, input) = (self.plan, self.input);
        let started = Instant::now();
        for (range, id) in &plan.local_copies {
            self.home(*id)?.copy_from_slice(&input[range.clone()]);
        }
        if !self.sends_queued_early {
            self.queue_first_sends(false)?;
        }
        self.sends_queued_early = false;
        // Only sends from the input can go early: no segment is lent out for them.
        let queue_next_after = (another_follows && self.first_sends_are_from_input).then(|| {
            plan.receives
                .iter()
                .rposition(|receive| receive.forward_to.is_some())
                .map_or(0, |last_forward| last_forward + 1)
        });
        if queue_next_after == Some(0) {
            self.queue_first_sends(true)?;
        }
        for (index, receive) in plan.receives.iter().enumerate() {
            self.receive(receive)?;
            if let Some(to) = receive.forward_to {
                let forward = Send {
                    to,
                    source: Source::Output(receive.into),
                };
                self.enqueue(&forward)?;
            }
            if queue_next_after == Some(index + 1) {
                self.queue_first_sends(true)?;
            }
        }
        // The last iteration ends when its sends are written too. Earlier ones do not
        // wait for them: the sender carries on into the next iteration's queue, and
        // the caller's thread is not woken just to learn that.
        if !another_follows {
            while !self.in_flight.is_empty() {
                self.wait_for_sender()?;
            }
        }
        Ok(started.elapsed())
    }

    fn queue_first_sends(&mut self, for_next: bool) -> Result<(), Stop> {
        for send in &self.plan.sends {
            self.enqueue(send)?;
        }
        self.sends_queued_early = for_next;
        Ok(())
    }

    fn receive(&mut self, receive: &Receive) -> Result<(), Stop> {
        let link = self.links.from(receive.from)?;
        let watch = self.data_watch;
        let mut traffic = Traffic::default();
        self.home(receive.into)?;
        let Some(segment) = self.slots[receive.into].as_deref_mut() else {
            unreachable!("`home` returned, so the segment is here");
        };
        match &receive.combine {
            Combine::Overwrite => {
                link::receive_exact(link, f32_bytes_mut(segment), &watch, &mut traffic)?;
            }
            Combine::AddInput(range) => {
                // Reduce piece by piece, each right after it arrives, while the
                // received bytes are still in the core's cache.
                let own = &self.input[range.clone()];
                for (sums, mine) in segment
                    .chunks_mut(REDUCE_PIECE_ELEMENTS)
                    .zip(own.chunks(REDUCE_PIECE_ELEMENTS))
                {
                    let incoming = &mut self.scratch[..sums.len()];
                    link::receive_exact(link, f32_bytes_mut(incoming), &watch, &mut traffic)?;
                    for ((sum, &mine), &theirs) in sums.iter_mut().zip(mine).zip(incoming.iter()) {
                        *sum = mine + theirs;
                    }
                }
            }
        }
        add(&mut self.traffic[receive.from].received, traffic);
        Ok(())
    }

    /// Hands a send to the sender thread.
    fn enqueue(&mut self, send: &Send) -> Result<(), Stop> {
        let payload = match &send.source {
            Source::Input(range) => Payload::Input(range.clone()),
            Source::Output(id) => {
                self.home(*id)?;
                let Some(values) = self.slots[*id].take() else {
                    unreachable!("`home` returned, so the segment is here");
                };
                Payload::Segment(*id, values)
            }
        };
        let queue = self.to_sender.as_ref().ok_or(Stop::Aborted)?;
        queue
            .send(Outgoing {
                to: send.to,
                payload,
            })
            .map_err(|_| Stop::Aborted)?;
        self.in_flight.push_back(send.to);
        Ok(())
    }

    /// The segment, waiting for the sender to hand it back if it is still lent out.
    fn home(&mut self, id: SegmentId) -> Result<&mut [f32], Stop> {
        while self.slots[id].is_none() {
            self.wait_for_sender()?;
        }
        Ok(self.slots[id].as_deref_mut().unwrap_or_default())
    }

    fn wait_for_sender(&mut self) -> Result<(), Stop> {
        loop {
            match self.from_sender.recv_timeout(POLL) {
                Ok(sent) => {
                    self.in_flight.pop_front();
                    add(&mut self.traffic[sent.to].sent, sent.traffic);
                    if let Some((id, values)) = sent.segment {
                        self.slots[id] = Some(values);
                    }
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.data_watch.check()?;
                    // The sender enforces the deadline on its own socket calls; this
                    // is only a backstop should it ever fail to.
                    if Instant::now() >= self.data_watch.deadline + 4 * POLL {
                        let peer = self.in_flight.front().copied().unwrap_or(self.rank);
                        return Err(Stop::Failed(BackendError::Failed(format!(
                            "sending to {} did not finish before the deadline of the {}",
                            self.links.name(peer),
                            self.data_watch.context
                        ))));
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return Err(Stop::Aborted),
            }
        }
    }

    /// Sends `words` to rank `to` and reads as many words from rank `from`, waiting up
    /// to the deadline (not the stall timeout: a peer may enter a collective late).
    /// Only valid while the sender is idle, i.e. between iterations.
    pub(super) fn exchange_words<const N: usize>(
        &mut self,
        words: [u64; N],
        to: usize,
        from: usize,
    ) -> Result<[u64; N], Stop> {
        debug_assert!(self.in_flight.is_empty());
        let mut bytes = Vec::with_capacity(N * 8);
        for word in words {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
        let watch = self.control_watch;
        let mut traffic = Traffic::default();
        link::send_all(self.links.to(to)?, &bytes, &watch, &mut traffic)?;
        link::receive_exact(self.links.from(from)?, &mut bytes, &watch, &mut traffic)?;
        let mut received = [0u64; N];
        for (word, chunk) in received.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(chunk);
            *word = u64::from_le_bytes(le);
        }
        Ok(received)
    }

    pub(super) fn reset_traffic(&mut self) {
        self.traffic
            .iter_mut()
            .for_each(|peer| *peer = PeerTraffic::default());
    }

    pub(super) fn traffic(&self) -> &[PeerTraffic] {
        &self.traffic
    }
}

fn add(total: &mut Traffic, more: Traffic) {
    total.bytes += more.bytes;
    total.blocked += more.blocked;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_cover_a_range_in_order() {
        let mut plan = Plan::default();
        let first = plan.add_segments(0..SEGMENT_ELEMENTS + 3);
        let empty = plan.add_segments(7..7);
        let second = plan.add_segments(SEGMENT_ELEMENTS + 3..SEGMENT_ELEMENTS + 5);
        assert_eq!(first, vec![0, 1]);
        assert!(empty.is_empty());
        assert_eq!(second, vec![2]);
        assert_eq!(
            plan.segments,
            vec![
                0..SEGMENT_ELEMENTS,
                SEGMENT_ELEMENTS..SEGMENT_ELEMENTS + 3,
                SEGMENT_ELEMENTS + 3..SEGMENT_ELEMENTS + 5
            ]
        );
    }
}
