//! The sim backend: a scripted machine for tests, drills and benchmarks.
//!
//! No work is computed. Each call returns H100-like nominal figures scaled by the
//! device's speed factor, with seeded noise, and plays the faults the script names
//! (hang, error, wrong result, zero work). The same script and seed give the same
//! numbers in every run, while a re-measurement of the same device draws fresh noise,
//! as a real re-test would.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use gpuvet_model::catalog::CheckName;
use gpuvet_model::config::{Dtype, SimFault, SimScript};
use gpuvet_model::inventory::DeviceFacts;
use gpuvet_model::results::DeviceInfo;
use gpuvet_model::stats::median;

use crate::{Across, AcrossRanks, Backend, BackendError, CancelToken, Sample, Support, WorkSpec};

/// Dense bf16 GEMM of an H100 SXM, TFLOPS.
const NOMINAL_GEMM_TFLOPS: f64 = 700.0;
/// Empty-kernel launch latency, µs.
const NOMINAL_LAUNCH_US: f64 = 5.0;
/// 8-GPU NVLink all-reduce busbw, GB/s.
const NOMINAL_ALL_REDUCE_BUSBW: f64 = 450.0;
/// All-reduce busbw across nodes with one 400 Gb/s NIC per GPU, GB/s.
const NOMINAL_ACROSS_BUSBW: f64 = 45.0;
/// Opens every group token the sim makes, so a token that was lost or mangled on its
/// way through the coordinator is caught, as NCCL would fail on it.
const TOKEN_PREFIX: &[u8] = b"gpuvet-sim-group:";
/// The size of NCCL's unique id, which the sim's tokens imitate.
const TOKEN_BYTES: usize = 128;

/// Sizes reported in `params` when the work spec leaves them open.
const DEFAULT_GEMM_SIZE: u32 = 8192;
const DEFAULT_COLLECTIVE_BYTES: u64 = 1 << 30;

const SAMPLES_PER_CALL: usize = 8;
/// Every call takes a little time, so schedulers and progress bars see real work.
const WORK_DELAY: Duration = Duration::from_millis(2);
/// How late the kernel may end that delay, in nanoseconds. The delay only stands for
/// device time; a group in one process has thousands of device threads sleeping it at
/// once, and the slack lets the kernel wake them in batches instead of one timer each
/// (measured: about 8 % of the CPU of 4,096 nodes' default suite).
const WORK_DELAY_SLACK_NS: libc::c_ulong = 1_000_000;
/// Keeps a noisy sample above zero, so heavy noise never passes for the `zero` fault.
const MIN_NOISE_FACTOR: f64 = 0.05;

/// A machine played from a [`SimScript`].
#[derive(Debug)]
pub struct SimBackend {
    script: SimScript,
    devices: Vec<DeviceInfo>,
    /// How many times each (check, device or device set) has been measured, so that a
    /// re-measurement draws fresh noise.
    measured: Mutex<BTreeMap<(CheckName, u64), u64>>,
}

impl SimBackend {
    pub fn new(script: SimScript) -> Self {
        let devices = (0..script.devices)
            .map(|index| {
                let speed = script.speed.get(&index).copied().unwrap_or(1.0);
                DeviceInfo {
                    index,
                    name: "sim-gpu".to_owned(),
                    memory_bytes: None,
                    facts: DeviceFacts::default(),
                    details: BTreeMap::from([("speed".to_owned(), speed.to_string())]),
                }
            })
            .collect();
        SimBackend {
            script,
            devices,
            measured: Mutex::new(BTreeMap::new()),
        }
    }

    fn speed(&self, device: u32) -> f64 {
        self.script.speed.get(&device).copied().unwrap_or(1.0)
    }

    fn fault(&self, check: CheckName, devices: &[u32]) -> Option<(u32, SimFault)> {
        self.script
            .faults
            .iter()
            .find(|(faulty_check, device, _)| *faulty_check == check && devices.contains(device))
            .map(|&(_, device, fault)| (device, fault))
    }

    /// A collective runs at the pace of its slowest member.
    fn slowest(&self, devices: &[u32]) -> f64 {
        devices
            .iter()
            .map(|&device| self.speed(device))
            .reduce(f64::min)
            .unwrap_or(1.0)
    }

    fn check_device(&self, device: u32) -> Result<(), BackendError> {
        crate::check_device("sim", device, self.script.devices)
    }

    /// The generator for the next measurement of `check` on `device_key`.
    fn next_noise_source(&self, check: CheckName, device_key: u64) -> SplitMix64 {
        let mut measured = self.measured.lock().unwrap_or_else(PoisonError::into_inner);
        let count = measured.entry((check, device_key)).or_insert(0);
        let attempt = *count;
        *count += 1;
        SplitMix64::keyed(self.script.seed, &[check as u64, device_key, attempt])
    }

    /// One scripted measurement: nominal × the noise of each sample, then the fault.
    fn measure(
        &self,
        check: CheckName,
        devices: &[u32],
        device_key: u64,
        nominal: f64,
    ) -> Result<Sample, BackendError> {
        simulate_device_time();
        let mut noise = self.next_noise_source(check, device_key);
        let samples: Vec<f64> = (0..SAMPLES_PER_CALL)
            .map(|_| {
                nominal * (1.0 + self.script.noise * noise.next_normal()).max(MIN_NOISE_FACTOR)
            })
            .collect();
        let mut sample = Sample {
            value: median(&samples).unwrap_or(nominal),
            samples,
            ..Sample::default()
        };
        match self.fault(check, devices) {
            None => {}
            Some((_, SimFault::Hang)) => hang_forever(),
            Some((device, SimFault::Error)) => {
                return Err(BackendError::Failed(format!(
                    "scripted error on device {device}"
                )));
            }
            Some((device, SimFault::WrongResult)) => {
                sample.wrong_result = Some(format!("scripted wrong result on device {device}"));
            }
            Some((_, SimFault::Zero)) => {
                sample.value = 0.0;
                sample.samples = vec![0.0; SAMPLES_PER_CALL];
            }
        }
        Ok(sample)
    }
}

impl Backend for SimBackend {
    fn name(&self) -> &'static str {
        "sim"
    }

    fn devices(&self) -> &[DeviceInfo] {
        &self.devices
    }

    fn supports(&self, check: CheckName) -> Support {
        match check {
            CheckName::GemmFlops
            | CheckName::KernelLaunch
            | CheckName::AllReduce1
            | CheckName::CompCommOverlap
            | CheckName::InventoryConsistency => Support::Supported,
            other => Support::NotImplemented(format!(
                "not implemented on the sim backend yet: the script plays gemm_flops, kernel_launch, \
                 all_reduce_1 and comp_comm_overlap only, not {other}"
            )),
        }
    }

    fn gemm(
        &self,
        device: u32,
        work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.check_device(device)?;
        let nominal = NOMINAL_GEMM_TFLOPS * self.speed(device);
        let mut sample =
            self.measure(CheckName::GemmFlops, &[device], u64::from(device), nominal)?;
        // `auto` means bf16 on a GPU, and the sim plays a GPU.
        let dtype = match work.gemm_dtype {
            Dtype::Auto => Dtype::Bf16,
            dtype => dtype,
        };
        let size = work.gemm_size.unwrap_or(DEFAULT_GEMM_SIZE).to_string();
        sample.params = BTreeMap::from([
            ("dtype".to_owned(), dtype.as_str().to_owned()),
            ("m".to_owned(), size.clone()),
            ("n".to_owned(), size.clone()),
            ("k".to_owned(), size),
        ]);
        Ok(sample)
    }

    fn kernel_launch(
        &self,
        device: u32,
        _work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.check_device(device)?;
        // A slower device takes longer to launch.
        let nominal = NOMINAL_LAUNCH_US / self.speed(device);
        self.measure(
            CheckName::KernelLaunch,
            &[device],
            u64::from(device),
            nominal,
        )
    }

    fn all_reduce_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.local_collective(CheckName::AllReduce1, devices, work)
    }

    fn all_gather_local(
        &self,
        devices: &[u32],
        work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        self.local_collective(CheckName::AllGather, devices, work)
    }

    fn spans_nodes(&self) -> bool {
        true
    }

    fn group_token(&self) -> Result<Vec<u8>, BackendError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut random = SplitMix64::keyed(self.script.seed, &[nanos]);
        let mut token = TOKEN_PREFIX.to_vec();
        while token.len() < TOKEN_BYTES {
            token.extend_from_slice(&random.next_u64().to_le_bytes());
        }
        token.truncate(TOKEN_BYTES);
        Ok(token)
    }

    /// Plays NCCL across nodes, at the pace of this node's slowest device in the
    /// collective (the sim cannot know the others'; a pair's figure is the lower of
    /// its two members'), or each rail at its own device's pace.
    fn collective_across(
        &self,
        across: &Across,
        work: &WorkSpec,
        _cancel: &CancelToken,
    ) -> Result<Sample, BackendError> {
        for token in across.ranks.tokens() {
            if token.len() != TOKEN_BYTES || !token.starts_with(TOKEN_PREFIX) {
                return Err(BackendError::Failed(format!(
                    "the group token ({} bytes) is not one a sim backend made",
                    token.len()
                )));
            }
        }
        let world = across.ranks.world();
        let busbw_per_algbw = match across.check {
            CheckName::AllGather2 | CheckName::AllGather | CheckName::AllToAll2 => {
                crate::all_gather_busbw(1.0, world)
            }
            _ => crate::all_reduce_busbw(1.0, world),
        };
        let mut sample = match &across.ranks {
            AcrossRanks::Devices { first_rank, .. } => {
                let devices: Vec<u32> = self.devices.iter().map(|d| d.index).collect();
                let key = SplitMix64::keyed(*first_rank as u64, &[world as u64]).next_u64();
                let nominal = NOMINAL_ACROSS_BUSBW * self.slowest(&devices);
                let mut sample = self.measure(across.check, &devices, key, nominal)?;
                sample.params = collective_params(work, world);
                sample
                    .params
                    .insert("first_rank".to_owned(), first_rank.to_string());
                sample
            }
            AcrossRanks::Rails { tokens, node, .. } => {
                self.rails_across(across.check, tokens.len(), *node, work, world)?
            }
        };
        sample
            .extra
            .insert("algbw".to_owned(), sample.value / busbw_per_algbw);
        sample
            .params
            .insert("transport".to_owned(), "sim".to_owned());
        Ok(sample)
    }
}

impl SimBackend {
    /// A collective among this node's `devices`, at the slowest one's pace; `check`
    /// keys its noise and scripted faults and says the collective.
    fn local_collective(
        &self,
        check: CheckName,
        devices: &[u32],
        work: &WorkSpec,
    ) -> Result<Sample, BackendError> {
        crate::check_local_group("sim", devices, self.script.devices)?;
        let nominal = NOMINAL_ALL_REDUCE_BUSBW * self.slowest(devices);
        let device_set_key = SplitMix64::keyed(
            0,
            &devices.iter().map(|&d| u64::from(d)).collect::<Vec<_>>(),
        )
        .next_u64();
        let mut sample = self.measure(check, devices, device_set_key, nominal)?;
        let ranks = devices.len();
        let busbw_per_algbw = match check {
            CheckName::AllGather => crate::all_gather_busbw(1.0, ranks),
            _ => crate::all_reduce_busbw(1.0, ranks),
        };
        sample
            .extra
            .insert("algbw".to_owned(), sample.value / busbw_per_algbw);
        sample.params = collective_params(work, ranks);
        Ok(sample)
    }

    /// One all-reduce per rail, device i on rail i: the slowest rail's sample, with
    /// every rail's busbw in `extra`.
    fn rails_across(
        &self,
        check: CheckName,
        rails: usize,
        node: usize,
        work: &WorkSpec,
        nodes: usize,
    ) -> Result<Sample, BackendError> {
        if rails == 0 || rails > self.devices.len() {
            return Err(BackendError::Failed(format!(
                "asked for {rails} rails, and this node has {} devices",
                self.devices.len()
            )));
        }
        let results = (0..rails as u32)
            .map(|rail| {
                let key =
                    SplitMix64::keyed(node as u64, &[nodes as u64, u64::from(rail)]).next_u64();
                let nominal = NOMINAL_ACROSS_BUSBW * self.speed(rail);
                self.measure(check, &[rail], key, nominal)
            })
            .collect();
        let mut sample = crate::slowest_rail(results)?;
        sample.params.extend(collective_params(work, nodes));
        Ok(sample)
    }
}

/// A collective's size and ranks, as its params report them.
fn collective_params(work: &WorkSpec, ranks: usize) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "bytes".to_owned(),
            work.collective_bytes
                .unwrap_or(DEFAULT_COLLECTIVE_BYTES)
                .to_string(),
        ),
        ("ranks".to_owned(), ranks.to_string()),
    ])
}

/// Sleeps [`WORK_DELAY`] with [`WORK_DELAY_SLACK_NS`] of timer slack, then puts the
/// thread's own slack back (it may be a pool thread that runs other work next).
fn simulate_device_time() {
    // SAFETY: PR_GET_TIMERSLACK and PR_SET_TIMERSLACK read and set the calling
    // thread's timer slack; neither touches memory.
    let previous = unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) };
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, WORK_DELAY_SLACK_NS, 0, 0, 0) };
    std::thread::sleep(WORK_DELAY);
    if let Ok(previous) = libc::c_ulong::try_from(previous)
        && previous > 0
    {
        // SAFETY: as above.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, previous, 0, 0, 0) };
    }
}

/// The scripted `hang`: never returns and ignores the cancel token, as a wedged GPU does.
fn hang_forever() -> ! {
    loop {
        // `park` may wake spuriously; nobody ever unparks this thread on purpose.
        std::thread::park();
    }
}

/// splitmix64 (Steele, Lea and Flood 2014): a tiny, well-mixed generator, enough for
/// scripted noise and pseudo-random test inputs. Not for anything secret.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// A generator whose stream depends on the seed and on every key part, in order.
    pub fn keyed(seed: u64, parts: &[u64]) -> Self {
        let state = parts.iter().fold(mix(seed), |state, &part| {
            mix(state ^ mix(part.wrapping_add(Self::GOLDEN_GAMMA)))
        });
        SplitMix64 { state }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GOLDEN_GAMMA);
        mix(self.state)
    }

    /// Uniform in [0, 1), with 53 random bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [-1, 1), with 24 random bits, so the value is exact in an f32.
    pub(crate) fn next_signed_unit_f32(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as f32; // 0 ..= 2^24 - 1
        bits / (1u32 << 23) as f32 - 1.0
    }

    /// Uniform in 0..bound (bound > 0), by multiply-shift.
    pub(crate) fn next_below(&mut self, bound: usize) -> usize {
        ((u128::from(self.next_u64()) * bound as u128) >> 64) as usize
    }

    /// Standard normal, by Box–Muller.
    pub fn next_normal(&mut self) -> f64 {
        // 1 − u lies in (0, 1], so the logarithm is finite.
        let radius = (-2.0 * (1.0 - self.next_f64()).ln()).sqrt();
        radius * (std::f64::consts::TAU * self.next_f64()).cos()
    }
}

/// splitmix64's output function: a bijective mix of all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, mpsc};

    use super::*;

    fn script(noise: f64) -> SimScript {
        SimScript {
            seed: 42,
            devices: 4,
            noise,
            ..SimScript::default()
        }
    }

    fn gemm(backend: &SimBackend, device: u32) -> Result<Sample, BackendError> {
        backend.gemm(device, &WorkSpec::default(), &CancelToken::new())
    }

    #[test]
    fn device_time_puts_the_threads_own_timer_slack_back() {
        let slack = || {
            // SAFETY: PR_GET_TIMERSLACK reads the calling thread's timer slack.
            unsafe { libc::prctl(libc::PR_GET_TIMERSLACK, 0, 0, 0, 0) }
        };
        std::thread::spawn(move || {
            // SAFETY: sets the calling thread's timer slack.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 12_345 as libc::c_ulong, 0, 0, 0) };
            simulate_device_time();
            assert_eq!(slack(), 12_345);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn splitmix_matches_the_published_reference_stream() {
        // First outputs of splitmix64 seeded with 1234567 (from the reference C code).
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
    }

    #[test]
    fn uniform_and_normal_draws_stay_in_range_and_look_normal() {
        let mut rng = SplitMix64::new(7);
        let normals: Vec<f64> = (0..20_000).map(|_| rng.next_normal()).collect();
        let mean = normals.iter().sum::<f64>() / normals.len() as f64;
        let variance =
            normals.iter().map(|z| (z - mean).powi(2)).sum::<f64>() / normals.len() as f64;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((variance - 1.0).abs() < 0.05, "{variance}");
        for _ in 0..10_000 {
            let unit = rng.next_signed_unit_f32();
            assert!((-1.0..1.0).contains(&unit));
            assert!(rng.next_below(7) < 7);
            assert!((0.0..1.0).contains(&rng.next_f64()));
        }
    }

    #[test]
    fn keyed_generators_differ_by_every_key_part() {
        let first = SplitMix64::keyed(1, &[0, 1, 2]).next_u64();
        assert_eq!(first, SplitMix64::keyed(1, &[0, 1, 2]).next_u64());
        assert_ne!(first, SplitMix64::keyed(2, &[0, 1, 2]).next_u64());
        assert_ne!(first, SplitMix64::keyed(1, &[1, 0, 2]).next_u64());
        assert_ne!(first, SplitMix64::keyed(1, &[0, 1, 3]).next_u64());
    }

    #[test]
    fn devices_and_support_follow_the_script() {
        let backend = SimBackend::new(script(0.0));
        assert_eq!(backend.name(), "sim");
        assert_eq!(backend.devices().len(), 4);
        assert_eq!(backend.devices()[3].index, 3);
        assert_eq!(backend.devices()[3].name, "sim-gpu");
        for check in [
            CheckName::GemmFlops,
            CheckName::KernelLaunch,
            CheckName::AllReduce1,
        ] {
            assert_eq!(backend.supports(check), Support::Supported);
        }
        let Support::NotImplemented(reason) = backend.supports(CheckName::AllToAll2) else {
            panic!("all_to_all_2 should not be supported");
        };
        assert!(
            reason.starts_with("not implemented on the sim backend yet"),
            "{reason}"
        );
    }

    #[test]
    fn without_noise_every_sample_is_nominal() {
        let backend = SimBackend::new(script(0.0));
        let sample = gemm(&backend, 0).unwrap();
        assert_eq!(sample.value, NOMINAL_GEMM_TFLOPS);
        assert_eq!(sample.samples, vec![NOMINAL_GEMM_TFLOPS; SAMPLES_PER_CALL]);
        assert_eq!(sample.params["dtype"], "bf16");
        let launch = backend
            .kernel_launch(1, &WorkSpec::default(), &CancelToken::new())
            .unwrap();
        assert_eq!(launch.value, NOMINAL_LAUNCH_US);
    }

    #[test]
    fn the_same_seed_replays_the_same_run() {
        let first = SimBackend::new(script(0.02));
        let second = SimBackend::new(script(0.02));
        let run = |backend: &SimBackend| {
            let cancel = CancelToken::new();
            vec![
                gemm(backend, 0).unwrap().samples,
                gemm(backend, 0).unwrap().samples,
                backend
                    .kernel_launch(2, &WorkSpec::default(), &cancel)
                    .unwrap()
                    .samples,
                backend
                    .all_reduce_local(&[0, 1, 2, 3], &WorkSpec::default(), &cancel)
                    .unwrap()
                    .samples,
            ]
        };
        let replayed = run(&first);
        assert_eq!(replayed, run(&second));
        // A re-measurement draws fresh noise.
        assert_ne!(replayed[0], replayed[1]);
        // Noise is there, and around the nominal value.
        let median = median(&replayed[0]).unwrap();
        assert!((median / NOMINAL_GEMM_TFLOPS - 1.0).abs() < 0.1, "{median}");
        assert_ne!(replayed[0][0], replayed[0][1]);
        // Another seed plays another run.
        let other = SimBackend::new(SimScript {
            seed: 43,
            ..script(0.02)
        });
        assert_ne!(gemm(&other, 0).unwrap().samples, replayed[0]);
    }

    #[test]
    fn speed_factors_scale_throughput_and_latency() {
        let backend = SimBackend::new(SimScript {
            speed: BTreeMap::from([(1, 0.5), (2, 2.0)]),
            ..script(0.0)
        });
        assert_eq!(gemm(&backend, 1).unwrap().value, NOMINAL_GEMM_TFLOPS * 0.5);
        assert_eq!(gemm(&backend, 2).unwrap().value, NOMINAL_GEMM_TFLOPS * 2.0);
        let cancel = CancelToken::new();
        let launch = backend
            .kernel_launch(1, &WorkSpec::default(), &cancel)
            .unwrap();
        assert_eq!(launch.value, NOMINAL_LAUNCH_US / 0.5);
        // The slowest member sets the pace of a collective.
        let all = backend
            .all_reduce_local(&[0, 1, 2], &WorkSpec::default(), &cancel)
            .unwrap();
        assert_eq!(all.value, NOMINAL_ALL_REDUCE_BUSBW * 0.5);
        let fast = backend
            .all_reduce_local(&[0, 2], &WorkSpec::default(), &cancel)
            .unwrap();
        assert_eq!(fast.value, NOMINAL_ALL_REDUCE_BUSBW);
        // With 2 ranks, busbw equals algbw.
        assert_eq!(fast.extra["algbw"], NOMINAL_ALL_REDUCE_BUSBW);
        assert_eq!(backend.devices()[1].details["speed"], "0.5");
    }

    #[test]
    fn scripted_errors_wrong_results_and_zero_work() {
        let faults = vec![
            (CheckName::GemmFlops, 0, SimFault::Error),
            (CheckName::GemmFlops, 1, SimFault::WrongResult),
            (CheckName::KernelLaunch, 2, SimFault::Zero),
            (CheckName::AllReduce1, 3, SimFault::Error),
        ];
        let backend = SimBackend::new(SimScript {
            faults,
            ..script(0.0)
        });
        let cancel = CancelToken::new();
        assert_eq!(
            gemm(&backend, 0),
            Err(BackendError::Failed(
                "scripted error on device 0".to_owned()
            ))
        );
        let wrong = gemm(&backend, 1).unwrap();
        assert_eq!(
            wrong.wrong_result.as_deref(),
            Some("scripted wrong result on device 1")
        );
        // A fault is scoped to its check and device.
        assert!(gemm(&backend, 2).unwrap().wrong_result.is_none());
        let zero = backend
            .kernel_launch(2, &WorkSpec::default(), &cancel)
            .unwrap();
        assert_eq!(zero.value, 0.0);
        assert!(zero.samples.iter().all(|&v| v == 0.0));
        assert!(
            backend
                .kernel_launch(0, &WorkSpec::default(), &cancel)
                .unwrap()
                .value
                > 0.0
        );
        // A fault on any member of a collective applies to it.
        assert_eq!(
            backend.all_reduce_local(&[2, 3], &WorkSpec::default(), &cancel),
            Err(BackendError::Failed(
                "scripted error on device 3".to_owned()
            ))
        );
        assert!(
            backend
                .all_reduce_local(&[0, 1, 2], &WorkSpec::default(), &cancel)
                .is_ok()
        );
    }

    #[test]
    fn a_scripted_hang_never_returns_even_when_cancelled() {
        let faults = vec![(CheckName::GemmFlops, 1, SimFault::Hang)];
        let backend = Arc::new(SimBackend::new(SimScript {
            faults,
            ..script(0.0)
        }));
        let cancel = CancelToken::new();
        let (done_tx, done_rx) = mpsc::channel();
        let worker_backend = Arc::clone(&backend);
        let worker_cancel = cancel.clone();
        // Leaked on purpose: the thread stays parked until the test process exits.
        std::thread::spawn(move || {
            let _ = done_tx.send(worker_backend.gemm(1, &WorkSpec::default(), &worker_cancel));
        });
        cancel.cancel();
        assert_eq!(
            done_rx.recv_timeout(Duration::from_millis(200)),
            Err(mpsc::RecvTimeoutError::Timeout)
        );
        // Other devices are unaffected.
        assert!(
            backend
                .gemm(0, &WorkSpec::default(), &CancelToken::new())
                .is_ok()
        );
    }

    #[test]
    fn bad_device_lists_are_refused() {
        let backend = SimBackend::new(script(0.0));
        let cancel = CancelToken::new();
        assert_eq!(
            backend.all_reduce_local(&[0], &WorkSpec::default(), &cancel),
            Err(BackendError::Unsupported(
                "a collective among a node's devices needs at least 2 of them".to_owned()
            ))
        );
        assert!(matches!(gemm(&backend, 4), Err(BackendError::Failed(_))));
        assert_eq!(
            backend.all_reduce_local(&[2, 2], &WorkSpec::default(), &cancel),
            Err(BackendError::Failed(
                "device 2 is listed twice for the collective".to_owned()
            ))
        );
        assert!(matches!(
            backend.all_reduce_local(&[0, 9], &WorkSpec::default(), &cancel),
            Err(BackendError::Failed(_))
        ));
    }

    #[test]
    fn across_nodes_runs_on_its_own_token_at_the_slowest_device_s_pace() {
        let backend = SimBackend::new(SimScript {
            devices: 2,
            speed: BTreeMap::from([(1, 0.5)]),
            ..SimScript::default()
        });
        assert!(backend.spans_nodes());
        let cancel = CancelToken::new();
        let token = backend.group_token().unwrap();
        assert_eq!(token.len(), TOKEN_BYTES);
        assert_ne!(
            token,
            backend.group_token().unwrap(),
            "every group gets its own"
        );
        let mut across = Across {
            check: CheckName::AllReduce2,
            ranks: AcrossRanks::Devices {
                token,
                world: 4,
                first_rank: 2,
            },
        };
        let sample = backend
            .collective_across(&across, &WorkSpec::default(), &cancel)
            .unwrap();
        assert_eq!(sample.value, NOMINAL_ACROSS_BUSBW * 0.5);
        assert_eq!(sample.params["ranks"], "4");
        assert_eq!(sample.params["first_rank"], "2");
        across.ranks = AcrossRanks::Devices {
            token: vec![0; TOKEN_BYTES],
            world: 4,
            first_rank: 2,
        };
        let err = backend
            .collective_across(&across, &WorkSpec::default(), &cancel)
            .unwrap_err();
        assert!(
            err.to_string().contains("not one a sim backend made"),
            "{err}"
        );
    }

    #[test]
    fn rails_across_nodes_run_each_at_its_own_device_s_pace() {
        let backend = SimBackend::new(SimScript {
            devices: 3,
            speed: BTreeMap::from([(1, 0.25)]),
            ..SimScript::default()
        });
        let cancel = CancelToken::new();
        let token = || backend.group_token().unwrap();
        let across = Across {
            check: CheckName::MultiAllReduce2,
            ranks: AcrossRanks::Rails {
                tokens: vec![token(), token()],
                nodes: 2,
                node: 1,
            },
        };
        let sample = backend
            .collective_across(&across, &WorkSpec::default(), &cancel)
            .unwrap();
        assert_eq!(sample.value, NOMINAL_ACROSS_BUSBW * 0.25);
        assert_eq!(sample.extra["rail0"], NOMINAL_ACROSS_BUSBW);
        assert_eq!(sample.extra["rail1"], NOMINAL_ACROSS_BUSBW * 0.25);
        assert!(!sample.extra.contains_key("rail2"), "device 2 sits out");
        assert_eq!(sample.params["rails"], "2");
        assert_eq!(sample.params["ranks"], "2");

        let mut too_many = across.clone();
        too_many.ranks = AcrossRanks::Rails {
            tokens: vec![token(); 4],
            nodes: 2,
            node: 1,
        };
        let err = backend
            .collective_across(&too_many, &WorkSpec::default(), &cancel)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "asked for 4 rails, and this node has 3 devices"
        );
        let mut mangled = across;
        mangled.ranks = AcrossRanks::Rails {
            tokens: vec![token(), vec![7; TOKEN_BYTES]],
            nodes: 2,
            node: 1,
        };
        assert!(
            backend
                .collective_across(&mangled, &WorkSpec::default(), &cancel)
                .is_err()
        );
    }
}
