//! Collectives over NCCL, measured as nccl-tests does: an all-reduce across the GPUs of
//! this node, an all-reduce, all-gather or all-to-all with this node's GPUs as some
//! of the ranks of a collective spanning nodes, or one all-reduce per rail across nodes
//! (GPU i of every node on rail i), every rail at once and each timed on its own.
//!
//! One process drives every GPU of its node (one rank per GPU, created in one NCCL
//! group from a fresh unique id or the one the coordinator handed out, then one grouped
//! call per iteration), as `all_reduce_perf -g <n>` does. The message is fp32 sum, out
//! of place, 4 GiB by default (smaller on GPUs with little memory): large enough for
//! the bus bandwidth plateau the baselines were measured at. Timing uses events on the
//! first GPU's stream between consecutive iterations, enqueued back to back like
//! nccl-tests' timed loop, so there is no host round trip in the measurement.
//!
//! The check of the result is exact: rank r sends the value r+1 everywhere, so every
//! element of an all-reduce's output must be n(n+1)/2, which fp32 holds exactly
//! whatever the reduction order, and chunk r of an all-gather's or all-to-all's output
//! must hold r+1. Outputs start as NaN so an operation that never ran is caught. An
//! all-to-all is grouped sends and receives, since NCCL has no single call for it.
//!
//! A hung peer or link never returns from NCCL on its own. The communicators are
//! therefore non-blocking where NCCL allows (see [`super::nccl`]), and every wait (for
//! the communicators, for a launch, for the streams) polls NCCL's asynchronous error,
//! the cancel token and a time limit; on any of them it aborts the communicators, which
//! ends the kernels, and returns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use super::driver_error;
use super::nccl::{Comms, Limits, Nccl, RawStream, UniqueId, datatype};
use crate::{BackendError, CancelToken, Sample, all_gather_busbw, all_reduce_busbw};

/// Default message size, as nccl-tests' large-message sweeps reach (`-e 8G` sends 8 GB).
pub const DEFAULT_BYTES: u64 = 4 << 30;
/// Across nodes: the same on every node whatever its GPUs' memory (members that
/// disagree on the size would hang NCCL), and small enough that 25 iterations take
/// seconds even on a 25 Gb/s network; inter-node busbw plateaus well below it.
pub const ACROSS_DEFAULT_BYTES: u64 = 1 << 30;
const WARMUP_ITERATIONS: usize = 5;
/// nccl-tests' default `-n 20`.
const MAX_ITERATIONS: usize = 20;
const MIN_ITERATIONS: usize = 5;
/// Longest the timed loop is planned to take.
const TIMED_BUDGET_SECS: f64 = 2.0;
/// Elements read back per probe, and probes per rank.
const PROBE_ELEMENTS: usize = 16 * 1024;
const PROBES: usize = 16;

/// The message size: the configured one, else [`DEFAULT_BYTES`] capped at an eighth of
/// the smallest GPU's memory (send and receive buffers both live on each GPU), rounded
/// down to whole 4-byte elements.
pub fn message_bytes(configured: Option<u64>, smallest_memory: u64) -> u64 {
    let bytes = configured.unwrap_or_else(|| DEFAULT_BYTES.min(smallest_memory / 8).max(1 << 20));
    (bytes / 4).max(1) * 4
}

/// Where this process's GPUs sit in the collective.
#[derive(Debug, Clone)]
pub enum RankLayout {
    /// Every rank is a GPU of this node.
    ThisNode,
    /// This node's GPUs are ranks `first_rank..` of `world`, in device order; every
    /// member runs the same fixed work, since they cannot agree on a measured one.
    Across {
        id: UniqueId,
        world: usize,
        first_rank: usize,
    },
    /// GPU i is rank `node` of `nodes` in rail i's communicator, made from `ids[i]`;
    /// the same fixed work as `Across`.
    Rails {
        ids: Vec<UniqueId>,
        nodes: usize,
        node: usize,
    },
}

impl RankLayout {
    /// Ranks in each communicator, with `local` GPUs on this node.
    pub fn ranks(&self, local: usize) -> usize {
        match self {
            RankLayout::ThisNode => local,
            RankLayout::Across { world, .. } => *world,
            RankLayout::Rails { nodes, .. } => *nodes,
        }
    }

    /// The rank of this node's GPU `device` in its communicator.
    pub fn rank_of(&self, device: usize) -> usize {
        match self {
            RankLayout::ThisNode => device,
            RankLayout::Across { first_rank, .. } => first_rank + device,
            RankLayout::Rails { node, .. } => *node,
        }
    }

    fn spans_nodes(&self) -> bool {
        !matches!(self, RankLayout::ThisNode)
    }

    /// Refuses places NCCL would reject with a bare "invalid argument", for `local`
    /// GPUs on this node.
    pub fn check(&self, local: usize) -> Result<(), BackendError> {
        let fits = match self {
            RankLayout::ThisNode => local >= 1,
            RankLayout::Across {
                world, first_rank, ..
            } => local >= 1 && first_rank + local <= *world && *world >= 2,
            RankLayout::Rails { ids, nodes, node } => {
                ids.len() == local && local >= 1 && node < nodes && *nodes >= 2
            }
        };
        if fits {
            Ok(())
        } else {
            Err(BackendError::Failed(format!(
                "this node's {local} GPUs cannot take the ranks {self:?} gives them (a bug in \
                 gpuvet)"
            )))
        }
    }
}

/// Which collective runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    AllReduce,
    AllGather,
    AllToAll,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::AllReduce => "all-reduce",
            Kind::AllGather => "all-gather",
            Kind::AllToAll => "all-to-all",
        }
    }

    /// Elements in the output, rounded so every rank's chunk is the same size.
    pub fn output_count(self, count: usize, ranks: usize) -> usize {
        match self {
            Kind::AllReduce => count.max(1),
            Kind::AllGather | Kind::AllToAll => (count / ranks.max(1)).max(1) * ranks.max(1),
        }
    }

    /// What output element `element` must hold, with `chunk` elements per rank.
    pub fn expected(self, element: usize, ranks: usize, chunk: usize) -> f32 {
        match self {
            Kind::AllReduce => expected_sum(ranks),
            Kind::AllGather | Kind::AllToAll => (element / chunk.max(1) + 1) as f32,
        }
    }

    fn busbw(self, algbw: f64, ranks: usize) -> f64 {
        match self {
            Kind::AllReduce => all_reduce_busbw(algbw, ranks),
            Kind::AllGather | Kind::AllToAll => all_gather_busbw(algbw, ranks),
        }
    }
}

/// The sum every output element must hold: 1 + 2 + … + n.
pub fn expected_sum(ranks: usize) -> f32 {
    (ranks * (ranks + 1) / 2) as f32
}

/// Offsets of the probes read back: the start, the end, and evenly spaced ones between.
pub fn probe_offsets(count: usize, probe: usize, probes: usize) -> Vec<(usize, usize)> {
    if count <= probe * probes {
        return vec![(0, count)];
    }
    let last = count - probe;
    let mut out: Vec<(usize, usize)> = (0..probes)
        .map(|p| (last * p / (probes - 1).max(1), probe))
        .collect();
    out.dedup();
    out
}

/// The first wrong element, as a message; `expected(e)` is what element `e` must hold.
pub fn first_wrong(
    rank: usize,
    offset: usize,
    values: &[f32],
    expected: impl Fn(usize) -> f32,
) -> Option<String> {
    let (at, got, want) = values
        .iter()
        .enumerate()
        .map(|(at, got)| (at, got, expected(offset + at)))
        .find(|(_, got, want)| *got != want)?;
    Some(format!(
        "rank `{rank}` element `{}` is `{got}` but must be `{want}`",
        offset + at
    ))
}

/// Runs `kind` over `contexts` (one per GPU of this node, in rank order; with rails,
/// one per rail).
pub fn run(
    nccl: &'static Nccl,
    contexts: &[Arc<CudaContext>],
    layout: &RankLayout,
    kind: Kind,
    configured_bytes: Option<u64>,
    cancel: &CancelToken,
) -> Result<Sample, BackendError> {
    if matches!(layout, RankLayout::Rails { .. }) && kind != Kind::AllReduce {
        return Err(BackendError::Failed(format!(
            "rails run all-reduces, not a {} (a bug in gpuvet)",
            kind.label()
        )));
    }
    layout.check(contexts.len())?;
    let size = Sizing::of(contexts, layout, kind, configured_bytes)?;
    grant_pool_access(contexts)?;
    let buffers = Buffers::filled(contexts, layout, &size)?;
    let limits = Limits::default();
    let init_started = Instant::now();
    let mut comms = join(nccl, contexts, layout, size.ranks, &limits, cancel)?;
    let init_secs = init_started.elapsed().as_secs_f64();

    let outcome = (|| -> Result<Sample, BackendError> {
        let run = Measured {
            contexts,
            layout,
            kind,
            size: &size,
            buffers: &buffers,
            pointers: buffers.pointers(),
            limits: &limits,
            cancel,
        };
        let (timings, iterations) = run.timed_loop(&mut comms)?;
        let slowest = slowest_timing(&timings)
            .ok_or_else(|| BackendError::Failed("no stream was timed".to_owned()))?;
        let wrong_result = run.first_wrong_result()?;
        let (extra, params) = run.describe(nccl, &timings, slowest, iterations, init_secs);
        Ok(Sample {
            value: timings[slowest].busbw,
            samples: timings[slowest].samples.clone(),
            wrong_result,
            extra,
            params,
        })
    })();

    // Stuck or failed communicators are aborted so their kernels end before the
    // buffers are freed; healthy ones are destroyed by `Drop`.
    if outcome.is_err() {
        comms.abort();
    }
    drop(comms);
    drop(buffers);
    // Freeing records a failure in the context (cudarc's drops cannot return one), where
    // the next check on that GPU would find it: `bind_to_thread` returns it first. So
    // every context's is taken, not only the first one found. After an abort it is this
    // failure's echo and is dropped; after a clean run the first is reported here.
    let leftover = first_of_all(contexts.iter().map(|ctx| ctx.check_err()));
    match (outcome, leftover) {
        (Ok(_), Some(e)) => Err(driver_error("freeing the collective's buffers", e)),
        (outcome, _) => outcome,
    }
}

/// The first error of `checks`, after running every one of them: each check also
/// clears what it reports, so none may be skipped.
fn first_of_all<E>(checks: impl IntoIterator<Item = Result<(), E>>) -> Option<E> {
    let mut first = None;
    for check in checks {
        if let Err(error) = check {
            first.get_or_insert(error);
        }
    }
    first
}

fn failed(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> BackendError {
    move |e| driver_error(what, e)
}

/// How large the collective is, in fp32 elements.
#[derive(Debug, Clone, Copy)]
struct Sizing {
    /// Ranks in the whole collective (this node's GPUs are some of them).
    ranks: usize,
    /// Elements of each rank's output.
    count: usize,
    /// Bytes of each rank's output.
    bytes: u64,
    /// Elements of one rank's share: `count / ranks`.
    chunk: usize,
    /// Elements of each rank's input.
    send_count: usize,
}

impl Sizing {
    fn of(
        contexts: &[Arc<CudaContext>],
        layout: &RankLayout,
        kind: Kind,
        configured_bytes: Option<u64>,
    ) -> Result<Sizing, BackendError> {
        let ranks = layout.ranks(contexts.len());
        let smallest = contexts
            .iter()
            .map(|c| c.total_mem().map(|m| m as u64))
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed("reading GPU memory"))?
            .into_iter()
            .min()
            .unwrap_or(0);
        let bytes = if layout.spans_nodes() {
            message_bytes(
                Some(configured_bytes.unwrap_or(ACROSS_DEFAULT_BYTES)),
                smallest,
            )
        } else {
            message_bytes(configured_bytes, smallest)
        };
        let count = kind.output_count((bytes / 4) as usize, ranks);
        let chunk = count / ranks.max(1);
        let send_count = match kind {
            Kind::AllGather => chunk,
            Kind::AllReduce | Kind::AllToAll => count,
        };
        Ok(Sizing {
            ranks,
            count,
            bytes: count as u64 * 4,
            chunk,
            send_count,
        })
    }
}

/// Each local GPU's stream and buffers: the send buffer holds rank + 1 everywhere, the
/// receive buffer NaN, so an operation that never ran is caught.
struct Buffers {
    streams: Vec<Arc<CudaStream>>,
    send: Vec<CudaSlice<f32>>,
    recv: Vec<CudaSlice<f32>>,
}

impl Buffers {
    fn filled(
        contexts: &[Arc<CudaContext>],
        layout: &RankLayout,
        size: &Sizing,
    ) -> Result<Buffers, BackendError> {
        let local = contexts.len();
        let mut buffers = Buffers {
            streams: Vec::with_capacity(local),
            send: Vec::with_capacity(local),
            recv: Vec::with_capacity(local),
        };
        for (index, ctx) in contexts.iter().enumerate() {
            let rank = layout.rank_of(index);
            let stream = ctx.new_stream().map_err(failed("creating a stream"))?;
            // SAFETY: both buffers are filled right below, before any read.
            let (s, r) = unsafe {
                (
                    stream.alloc::<f32>(size.send_count),
                    stream.alloc::<f32>(size.count),
                )
            };
            let (s, r) = (
                s.map_err(failed("allocating the send buffer"))?,
                r.map_err(failed("allocating the receive buffer"))?,
            );
            let fill = (rank as f32 + 1.0).to_bits();
            // SAFETY: the buffers hold `send_count` and `count` u32-sized elements on
            // this stream's context.
            unsafe {
                ctx.bind_to_thread()
                    .map_err(failed("binding the context"))?;
                cudarc::driver::sys::cuMemsetD32Async(
                    s.device_ptr(&stream).0,
                    fill,
                    size.send_count,
                    stream.cu_stream(),
                )
                .result()
                .map_err(failed("filling the send buffer"))?;
                cudarc::driver::sys::cuMemsetD32Async(
                    r.device_ptr(&stream).0,
                    u32::MAX,
                    size.count,
                    stream.cu_stream(),
                )
                .result()
                .map_err(failed("filling the receive buffer"))?;
            }
            buffers.streams.push(stream);
            buffers.send.push(s);
            buffers.recv.push(r);
        }
        for stream in &buffers.streams {
            stream.synchronize().map_err(failed("synchronising"))?;
        }
        Ok(buffers)
    }
}

impl Buffers {
    fn pointers(&self) -> Vec<(u64, u64)> {
        (0..self.streams.len())
            .map(|r| {
                (
                    self.send[r].device_ptr(&self.streams[r]).0,
                    self.recv[r].device_ptr(&self.streams[r]).0,
                )
            })
            .collect()
    }
}

/// The communicators of this node's GPUs. Device i joins with `ids[i]`: the one id of
/// a collective over every GPU, or its rail's. Within this node a fresh id serves, as
/// inside `ncclCommInitAll`.
fn join(
    nccl: &'static Nccl,
    contexts: &[Arc<CudaContext>],
    layout: &RankLayout,
    ranks: usize,
    limits: &Limits,
    cancel: &CancelToken,
) -> Result<Comms, BackendError> {
    let local = contexts.len();
    let ids = match layout {
        RankLayout::ThisNode => vec![nccl.unique_id()?; local],
        RankLayout::Across { id, .. } => vec![*id; local],
        RankLayout::Rails { ids, .. } => ids.clone(),
    };
    let places: Vec<(UniqueId, usize)> = ids
        .into_iter()
        .enumerate()
        .map(|(device, id)| (id, layout.rank_of(device)))
        .collect();
    let bind = |device: usize| {
        contexts[device]
            .bind_to_thread()
            .map_err(|e| driver_error("binding the context", e))
    };
    Comms::init(nccl, ranks, &places, bind, limits, cancel)
}

/// One measured collective on joined communicators: what the timed loop, the result
/// check and the report need.
struct Measured<'a> {
    contexts: &'a [Arc<CudaContext>],
    layout: &'a RankLayout,
    kind: Kind,
    size: &'a Sizing,
    buffers: &'a Buffers,
    /// Each local GPU's send and receive buffer addresses, taken once: cudarc records
    /// a stream event each time an address is taken.
    pointers: Vec<(u64, u64)>,
    limits: &'a Limits,
    cancel: &'a CancelToken,
}

impl Measured<'_> {
    /// One iteration on every local GPU, in one NCCL group.
    fn launch(&self, comms: &mut Comms) -> Result<(), BackendError> {
        let Sizing {
            count,
            chunk,
            ranks,
            ..
        } = *self.size;
        let kind = self.kind;
        let streams = &self.buffers.streams;
        let what = format!("the {}", kind.label());
        comms.launch(&what, self.limits, self.cancel, |comms| {
            for (index, (s, r)) in self.pointers.iter().enumerate() {
                let stream = streams[index].cu_stream() as RawStream;
                // SAFETY: live buffers of `send_count` and `count` f32 on this GPU and
                // stream.
                unsafe {
                    match kind {
                        Kind::AllReduce => {
                            comms.all_reduce(index, *s, *r, count, datatype::FLOAT32, stream)
                        }
                        Kind::AllGather => {
                            comms.all_gather(index, *s, *r, chunk, datatype::FLOAT32, stream)
                        }
                        Kind::AllToAll => all_to_all(comms, index, (*s, *r), chunk, ranks, stream),
                    }
                }?;
            }
            Ok(())
        })
    }

    fn wait(&self, comms: &mut Comms) -> Result<(), BackendError> {
        wait_all(
            &self.buffers.streams,
            comms,
            self.kind,
            self.limits,
            self.cancel,
        )
    }

    /// Warms up, then times consecutive iterations with events: one timing per timed
    /// stream (the first GPU's, or each rail's), and the iterations timed.
    fn timed_loop(&self, comms: &mut Comms) -> Result<(Vec<Timing>, usize), BackendError> {
        // The first iteration also sets up NCCL's connections (lazily, since 2.22), so
        // only the rest of the warm-up sizes the timed loop.
        self.launch(comms)?;
        self.wait(comms)?;
        let warm_started = Instant::now();
        for _ in 1..WARMUP_ITERATIONS {
            self.launch(comms)?;
        }
        self.wait(comms)?;
        let per_iteration =
            warm_started.elapsed().as_secs_f64() / (WARMUP_ITERATIONS - 1).max(1) as f64;
        let iterations = if self.layout.spans_nodes() {
            MAX_ITERATIONS
        } else {
            ((TIMED_BUDGET_SECS / per_iteration.max(1e-9)) as usize)
                .clamp(MIN_ITERATIONS, MAX_ITERATIONS)
        };

        // One collective is timed on the first GPU's stream; rails each on their own.
        let timed = match self.layout {
            RankLayout::Rails { .. } => self.contexts.len(),
            _ => 1,
        };
        let events = (0..timed)
            .map(|index| {
                (0..=iterations)
                    .map(|_| self.contexts[index].new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)))
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(failed("creating events"))?;
        let record = |iteration: usize| -> Result<(), BackendError> {
            for (index, stream_events) in events.iter().enumerate() {
                stream_events[iteration]
                    .record(&self.buffers.streams[index])
                    .map_err(failed("recording an event"))?;
            }
            Ok(())
        };
        record(0)?;
        for iteration in 1..=iterations {
            // Recorded once NCCL has launched the iteration: with non-blocking
            // communicators its kernels may reach the stream after the group closes.
            self.launch(comms)?;
            record(iteration)?;
        }
        self.wait(comms)?;

        let mut timings = Vec::with_capacity(timed);
        for stream_events in &events {
            let mut seconds = Vec::with_capacity(iterations);
            for pair in stream_events.windows(2) {
                let ms = pair[0]
                    .elapsed_ms(&pair[1])
                    .map_err(failed("reading event times"))?;
                seconds.push(f64::from(ms) / 1000.0);
            }
            timings.push(Timing::of(
                &seconds,
                self.size.bytes,
                self.kind,
                self.size.ranks,
            ));
        }
        Ok((timings, iterations))
    }

    /// The first wrong element of any local rank's output, read back in probes.
    fn first_wrong_result(&self) -> Result<Option<String>, BackendError> {
        let Sizing {
            count,
            chunk,
            ranks,
            ..
        } = *self.size;
        for (index, buffer) in self.buffers.recv.iter().enumerate() {
            for (offset, len) in probe_offsets(count, PROBE_ELEMENTS, PROBES) {
                let values = self.buffers.streams[index]
                    .clone_dtoh(&buffer.slice(offset..offset + len))
                    .map_err(failed("reading the result"))?;
                let rank = self.layout.rank_of(index);
                let expected = |element| self.kind.expected(element, ranks, chunk);
                if let Some(message) = first_wrong(rank, offset, &values, expected) {
                    return Ok(Some(message));
                }
            }
        }
        Ok(None)
    }

    /// The sample's `extra` figures and `params`.
    fn describe(
        &self,
        nccl: &Nccl,
        timings: &[Timing],
        slowest: usize,
        iterations: usize,
        init_secs: f64,
    ) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
        let (kind, layout, size) = (self.kind, self.layout, self.size);
        let mut extra = BTreeMap::new();
        extra.insert("algbw".to_owned(), timings[slowest].algbw);
        extra.insert("bytes".to_owned(), size.bytes as f64);
        extra.insert(
            "time_us_mean".to_owned(),
            timings[slowest].total_secs / iterations as f64 * 1e6,
        );
        extra.insert("init_secs".to_owned(), init_secs);
        if let RankLayout::Rails { .. } = layout {
            for (rail, timing) in timings.iter().enumerate() {
                extra.insert(format!("rail{rail}"), timing.busbw);
            }
        }
        let mut params = BTreeMap::new();
        params.insert("bytes".to_owned(), size.bytes.to_string());
        params.insert("count".to_owned(), size.count.to_string());
        params.insert("dtype".to_owned(), "fp32".to_owned());
        params.insert("collective".to_owned(), kind.label().to_owned());
        if kind == Kind::AllReduce {
            params.insert("op".to_owned(), "sum".to_owned());
        }
        params.insert("ranks".to_owned(), size.ranks.to_string());
        match layout {
            RankLayout::ThisNode => {}
            RankLayout::Across { first_rank, .. } => {
                params.insert("first_rank".to_owned(), first_rank.to_string());
            }
            RankLayout::Rails { .. } => {
                params.insert("rails".to_owned(), self.contexts.len().to_string());
            }
        }
        if layout.spans_nodes() {
            params.insert("transport".to_owned(), "nccl".to_owned());
        }
        params.insert("iterations".to_owned(), iterations.to_string());
        params.insert(
            "warmup_iterations".to_owned(),
            WARMUP_ITERATIONS.to_string(),
        );
        params.insert("nccl_version".to_owned(), nccl.version_string());
        params.insert("nccl_library".to_owned(), nccl.path.display().to_string());
        params.insert("nccl_mode".to_owned(), nccl.mode());
        (extra, params)
    }
}

/// Lets each GPU of `contexts` read and write the buffers the others allocate.
///
/// cudarc allocates stream-ordered (`cuMemAllocAsync`) from each device's default
/// memory pool, and peer access as NCCL enables it does not open pool memory to other
/// GPUs. NCCL's kernels read and write a peer's buffers directly when both ranks live
/// in one process, as every GPU of this node does here, so without this they would
/// fault. PyTorch's `cudaMallocAsync` allocator does the same for the same reason.
fn grant_pool_access(contexts: &[Arc<CudaContext>]) -> Result<(), BackendError> {
    use cudarc::driver::sys;
    if contexts.len() < 2 {
        return Ok(());
    }
    for owner in contexts.iter().filter(|c| c.has_async_alloc()) {
        let mut access = Vec::with_capacity(contexts.len() - 1);
        for peer in contexts.iter().filter(|p| p.ordinal() != owner.ordinal()) {
            let mut can = 0;
            // SAFETY: writes one int; both are devices the driver enumerated.
            unsafe { sys::cuDeviceCanAccessPeer(&mut can, peer.cu_device(), owner.cu_device()) }
                .result()
                .map_err(|e| driver_error("asking whether GPUs can reach each other", e))?;
            if can != 0 {
                access.push(sys::CUmemAccessDesc {
                    location: sys::CUmemLocation {
                        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                        id: peer.ordinal() as i32,
                    },
                    flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
                });
            }
        }
        if access.is_empty() {
            continue;
        }
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: writes one pool handle of a device the driver enumerated; `access`
        // holds `access.len()` descriptors.
        unsafe {
            sys::cuDeviceGetDefaultMemPool(&mut pool, owner.cu_device())
                .result()
                .map_err(|e| driver_error("finding a GPU's memory pool", e))?;
            sys::cuMemPoolSetAccess(pool, access.as_ptr(), access.len())
                .result()
                .map_err(|e| driver_error("opening a GPU's memory pool to its peers", e))?;
        }
    }
    Ok(())
}

/// One stream's timed loop.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    pub algbw: f64,
    pub busbw: f64,
    /// busbw of each iteration.
    pub samples: Vec<f64>,
    pub total_secs: f64,
}

impl Timing {
    /// From each iteration's seconds, moving `bytes` among `ranks`.
    pub fn of(seconds: &[f64], bytes: u64, kind: Kind, ranks: usize) -> Timing {
        let total_secs: f64 = seconds.iter().sum();
        let algbw = bytes as f64 * seconds.len() as f64 / total_secs.max(1e-12) / 1e9;
        Timing {
            algbw,
            busbw: kind.busbw(algbw, ranks),
            samples: seconds
                .iter()
                .map(|secs| kind.busbw(bytes as f64 / secs.max(1e-12) / 1e9, ranks))
                .collect(),
            total_secs,
        }
    }
}

/// The index of the lowest busbw: the rail that sets the check's figure.
pub fn slowest_timing(timings: &[Timing]) -> Option<usize> {
    (0..timings.len()).min_by(|&a, &b| timings[a].busbw.total_cmp(&timings[b].busbw))
}

/// One rank's part of an all-to-all: chunk p of its input to rank p, and chunk p of
/// its output from rank p, as grouped sends and receives.
///
/// # Safety
/// `buffers` are live device buffers of `ranks × chunk` f32 on communicator `index`'s
/// GPU, and `stream` a stream of that GPU; the caller is inside an NCCL group.
unsafe fn all_to_all(
    comms: &Comms,
    index: usize,
    (send, recv): (u64, u64),
    chunk: usize,
    ranks: usize,
    stream: RawStream,
) -> Result<(), BackendError> {
    for peer in 0..ranks {
        let offset = (peer * chunk * size_of::<f32>()) as u64;
        let peer_rank = i32::try_from(peer)
            .map_err(|_| BackendError::Failed("rank out of range".to_owned()))?;
        // SAFETY: the chunk lies inside both buffers; the rest is the caller's promise.
        unsafe {
            comms.send(
                index,
                send + offset,
                chunk,
                datatype::FLOAT32,
                peer_rank,
                stream,
            )?;
            comms.recv(
                index,
                recv + offset,
                chunk,
                datatype::FLOAT32,
                peer_rank,
                stream,
            )?;
        }
    }
    Ok(())
}

/// Waits until every stream has run what was launched, watching for cancellation,
/// NCCL's asynchronous errors and the step limit; on any of them the communicators are
/// aborted, which ends their kernels.
fn wait_all(
    streams: &[Arc<CudaStream>],
    comms: &mut Comms,
    kind: Kind,
    limits: &Limits,
    cancel: &CancelToken,
) -> Result<(), BackendError> {
    let events = streams
        .iter()
        .map(|s| s.record_event(None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| driver_error("recording an event", e))?;
    // Events complete in any order; the first not yet seen complete is looked at next.
    let mut next = 0;
    comms.wait(
        &format!("the {}", kind.label()),
        limits.step,
        cancel,
        || {
            while let Some(event) = events.get(next) {
                // NCCL switches the current device as it works; query each event in its own
                // context.
                event
                    .context()
                    .bind_to_thread()
                    .map_err(|e| driver_error("binding the context", e))?;
                if !event
                    .try_is_complete()
                    .map_err(|e| driver_error("waiting for the streams", e))?
                {
                    return Ok(false);
                }
                next += 1;
            }
            Ok(true)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_context_s_recorded_error_is_taken_not_only_the_first() {
        // cudarc's `check_err` clears what it returns; a context left holding an error
        // would fail the next check on its GPU in `bind_to_thread`.
        let taken = std::cell::Cell::new(0);
        let checks = [Ok(()), Err("gpu 1"), Err("gpu 2"), Ok(())];
        let first = first_of_all(checks.into_iter().inspect(|_| taken.set(taken.get() + 1)));
        assert_eq!((first, taken.get()), (Some("gpu 1"), 4));
        assert_eq!(first_of_all::<&str>([Ok(()), Ok(())]), None);
    }

    #[test]
    fn message_size_follows_config_and_memory() {
        assert_eq!(message_bytes(Some(1 << 20), 80 << 30), 1 << 20);
        assert_eq!(message_bytes(Some(1023), 80 << 30), 1020);
        assert_eq!(message_bytes(Some(1), 80 << 30), 4);
        assert_eq!(message_bytes(None, 141 << 30), DEFAULT_BYTES);
        assert_eq!(message_bytes(None, 16 << 30), 2 << 30);
        assert_eq!(message_bytes(None, 0), 1 << 20);
    }

    #[test]
    fn the_expected_sum_is_exact_in_fp32() {
        assert_eq!(expected_sum(8), 36.0);
        assert_eq!(expected_sum(2), 3.0);
        assert_eq!(first_wrong(1, 100, &[36.0, 36.0], |_| 36.0), None);
        assert_eq!(
            first_wrong(3, 100, &[36.0, 35.0], |_| 36.0).unwrap(),
            "rank `3` element `101` is `35` but must be `36`"
        );
        assert!(
            first_wrong(0, 0, &[f32::NAN], |_| 36.0)
                .unwrap()
                .contains("`NaN`")
        );
    }

    #[test]
    fn gathers_and_exchanges_expect_each_rank_s_chunk() {
        // 10 elements over 4 ranks: 8, two per rank.
        assert_eq!(Kind::AllGather.output_count(10, 4), 8);
        assert_eq!(Kind::AllToAll.output_count(3, 4), 4);
        assert_eq!(Kind::AllReduce.output_count(10, 4), 10);
        let expected: Vec<f32> = (0..8).map(|e| Kind::AllGather.expected(e, 4, 2)).collect();
        assert_eq!(expected, [1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
        assert_eq!(Kind::AllReduce.expected(7, 4, 2), 10.0);
        let wrong = first_wrong(2, 4, &[3.0, 4.0], |e| Kind::AllToAll.expected(e, 4, 2));
        assert_eq!(
            wrong.as_deref(),
            Some("rank `2` element `5` is `4` but must be `3`")
        );
        assert_eq!(Kind::AllGather.busbw(8.0, 4), 6.0);
        assert_eq!(Kind::AllReduce.busbw(8.0, 4), 12.0);
    }

    #[test]
    fn each_stream_is_timed_and_the_slowest_sets_the_figure() {
        // 1 GB in 0.5 s and 1.5 s: 1 GB/s algbw; an all-reduce of 2 ranks moves as much.
        let even = Timing::of(&[0.5, 1.5], 1_000_000_000, Kind::AllReduce, 2);
        assert_eq!(even.algbw, 1.0);
        assert_eq!(even.busbw, 1.0);
        assert_eq!(even.samples, [2.0, 1.0 / 1.5]);
        assert_eq!(even.total_secs, 2.0);
        let slow = Timing::of(&[2.0, 2.0], 1_000_000_000, Kind::AllReduce, 2);
        assert_eq!(slow.busbw, 0.5);
        assert_eq!(slowest_timing(&[even.clone(), slow, even]), Some(1));
        assert_eq!(slowest_timing(&[]), None);
    }

    #[test]
    fn each_gpu_takes_its_rank_in_its_communicator() {
        let id = UniqueId { internal: [0; 128] };
        let spread = RankLayout::Across {
            id,
            world: 16,
            first_rank: 8,
        };
        assert_eq!((spread.ranks(8), spread.rank_of(3)), (16, 11));
        let rails = RankLayout::Rails {
            ids: vec![id; 4],
            nodes: 3,
            node: 2,
        };
        assert_eq!(
            (rails.ranks(4), rails.rank_of(0), rails.rank_of(3)),
            (3, 2, 2)
        );
        assert_eq!(RankLayout::ThisNode.rank_of(5), 5);
        assert_eq!(RankLayout::ThisNode.ranks(8), 8);
    }

    #[test]
    fn places_nccl_would_reject_are_refused() {
        let id = UniqueId { internal: [0; 128] };
        let across = |world, first_rank| RankLayout::Across {
            id,
            world,
            first_rank,
        };
        assert!(across(16, 8).check(8).is_ok());
        assert!(across(16, 9).check(8).is_err(), "ranks 9..17 of 16");
        assert!(across(1, 0).check(1).is_err(), "one rank spans no nodes");
        let rails = |count, nodes, node| RankLayout::Rails {
            ids: vec![id; count],
            nodes,
            node,
        };
        assert!(rails(8, 2, 1).check(8).is_ok());
        assert!(rails(8, 2, 2).check(8).is_err(), "node 2 of 2");
        assert!(rails(4, 2, 0).check(8).is_err(), "4 ids for 8 GPUs");
        assert!(rails(1, 1, 0).check(1).is_err(), "one node");
        assert!(RankLayout::ThisNode.check(0).is_err());
        let message = rails(8, 2, 2).check(8).unwrap_err();
        assert!(
            matches!(&message, BackendError::Failed(m) if m.starts_with("this node's 8 GPUs cannot take")),
            "{message}"
        );
    }

    #[test]
    fn probes_cover_both_ends_and_stay_in_bounds() {
        let count = 1 << 28;
        let probes = probe_offsets(count, PROBE_ELEMENTS, PROBES);
        assert_eq!(probes.len(), PROBES);
        assert_eq!(probes[0], (0, PROBE_ELEMENTS));
        assert_eq!(probes.last().unwrap().0 + PROBE_ELEMENTS, count);
        assert!(probes.iter().all(|(o, l)| o + l <= count));
        assert_eq!(probe_offsets(1000, PROBE_ELEMENTS, PROBES), [(0, 1000)]);
    }
}
