//! gpuvet's one NVML reader: every NVML call gpuvet makes, for the cuda backend's
//! inventory and GEMM sampling and for the runtime watch's health source.
//!
//! NVML is loaded at run time ([`open`], [`shared`]); without the driver they fail and
//! the caller says why the readings are missing. [`GpuReader`] reads one GPU and sorts
//! NVML's answers once for every caller: a call the GPU does not support
//! (NOT_SUPPORTED, a symbol the driver lacks) reads as `None` quietly, GPU_IS_LOST ends
//! the GPU's reads, and other errors are kept as [`FailedCall`]s, which the watch
//! reports and the backend ignores. [`XidEvents`] drains a GPU's XID events. The
//! readings are the types of [`gpuvet_model::gpu_health`] and
//! [`gpuvet_model::inventory::GpuHealth`].
//!
//! nvml-wrapper 0.13 has no wrapper for remapped rows or clock event reasons; both go
//! through the raw symbols of `nvml.lib()`. The recovery action and the NVLink error
//! totals come from one batched `nvmlDeviceGetFieldValues` call. NVML calls can hang:
//! the watch runs its reads under a watchdog.

use std::sync::Mutex;

use gpuvet_model::gpu_health::{
    EccCounts, NvLinkCounters, NvLinkState, RecoveryAction, RemappedRows, RetiredPages,
};
use gpuvet_model::inventory::GpuHealth;
use nvml_wrapper::EventSet;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::event::XidError;
pub use nvml_wrapper::error::NvmlError;
use nvml_wrapper::error::{nvml_sym, nvml_try};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
};
pub use nvml_wrapper::{Device, Nvml};

/// NVML exposes at most this many NVLink links per GPU (`NVML_NVLINK_MAX_LINKS`).
pub const NVLINK_MAX_LINKS: u32 = 18;

/// Opens NVML: `libnvidia-ml.so.1` (what the driver installs), then the unversioned
/// name. The error is the first attempt's.
pub fn open() -> Result<Nvml, NvmlError> {
    Nvml::init().or_else(|first| {
        Nvml::builder()
            .lib_path(std::ffi::OsStr::new("libnvidia-ml.so"))
            .init()
            .map_err(|_| first)
    })
}

/// The process's NVML handle. It lives as long as the process: event sets and device
/// handles borrow it, and the watch's source moves between threads.
static SHARED: Mutex<Option<&'static Nvml>> = Mutex::new(None);

/// [`open`], once per process.
pub fn shared() -> Result<&'static Nvml, NvmlError> {
    let mut guard = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(nvml) = *guard {
        return Ok(nvml);
    }
    // Failures are not cached: the driver may load later.
    let nvml: &'static Nvml = Box::leak(Box::new(open()?));
    *guard = Some(nvml);
    Ok(nvml)
}

/// NVML's index of the GPU with this UUID.
pub fn index_of(nvml: &Nvml, uuid: &str) -> Option<u32> {
    nvml.device_by_uuid(uuid).ok()?.index().ok()
}

/// The driver's version, a node-wide fact.
pub fn driver_version(nvml: &Nvml) -> Option<String> {
    nvml.sys_driver_version().ok()
}

/// Every reading the inventory records for one GPU; unreadable ones stay `None`.
pub fn health(nvml: &Nvml, index: u32) -> GpuHealth {
    let Ok(device) = nvml.device_by_index(index) else {
        return GpuHealth::default();
    };
    let mut read = GpuReader::new(&device);
    let mut health = fast_readings(&mut read);
    let ecc = read.ecc_counts();
    health.ecc_uncorrected_volatile = ecc.volatile_uncorrected;
    health.ecc_corrected_volatile = ecc.volatile_corrected;
    health.ecc_uncorrected_aggregate = ecc.aggregate_uncorrected;
    health.pcie_replays = read.pcie_replays();
    if let Some(rows) = read.remapped_rows() {
        health.remapped_rows_correctable = u32::try_from(rows.correctable).ok();
        health.remapped_rows_uncorrectable = u32::try_from(rows.uncorrectable).ok();
        health.remap_pending = Some(rows.pending);
        health.remap_failure = Some(rows.failure);
    }
    // Links that answer at all exist on this GPU; the others are not counted.
    let links = read.nvlink_states(0..NVLINK_MAX_LINKS);
    health.nvlink_total = Some(links.len() as u32);
    health.nvlink_active = Some(links.iter().filter(|l| l.active).count() as u32);
    health
}

/// The fast readings sampled while work runs: SM clock, temperature, power, throttle.
pub fn sample(nvml: &Nvml, index: u32) -> GpuHealth {
    match nvml.device_by_index(index) {
        Ok(device) => fast_readings(&mut GpuReader::new(&device)),
        Err(_) => GpuHealth::default(),
    }
}

fn fast_readings(read: &mut GpuReader<'_, '_>) -> GpuHealth {
    let watts = |mw: u32| f64::from(mw) / 1000.0;
    GpuHealth {
        temperature_c: read.temperature_c(),
        power_w: read.power_mw().map(watts),
        power_limit_w: read.power_limit_mw().map(watts),
        sm_clock_mhz: read.sm_clock_mhz(),
        sm_clock_max_mhz: read.sm_clock_max_mhz(),
        throttle_reasons: read.clock_event_reasons(),
        ..GpuHealth::default()
    }
}

/// An NVML call about one GPU that failed for a reason other than "not supported".
#[derive(Debug)]
pub struct FailedCall {
    /// The call, as the watch names it in findings (`temperature`, `remapped_rows`, ...).
    pub call: &'static str,
    pub error: NvmlError,
}

impl FailedCall {
    /// NVML's GPU_IS_LOST: the GPU fell off the bus or hung.
    pub fn is_gpu_lost(&self) -> bool {
        matches!(self.error, NvmlError::GpuLost)
    }
}

/// The recovery action and NVLink error totals, read in one call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldCounters {
    pub recovery_action: Option<RecoveryAction>,
    /// The totals; `links` stays empty (see [`GpuReader::nvlink_states`]).
    pub nvlink: NvLinkCounters,
}

/// Reads one GPU, one call at a time; see the crate's docs for how answers are sorted.
#[derive(Debug)]
pub struct GpuReader<'d, 'n> {
    device: &'d Device<'n>,
    failures: Vec<FailedCall>,
    lost: bool,
}

impl<'d, 'n> GpuReader<'d, 'n> {
    pub fn new(device: &'d Device<'n>) -> Self {
        GpuReader {
            device,
            failures: Vec::new(),
            lost: false,
        }
    }

    /// Whether a call answered GPU_IS_LOST; later reads return `None` without calling.
    pub fn lost(&self) -> bool {
        self.lost
    }

    /// The calls that failed, in the order they were made.
    pub fn into_failures(self) -> Vec<FailedCall> {
        self.failures
    }

    fn get<T>(&mut self, call: &'static str, answer: Result<T, NvmlError>) -> Option<T> {
        if self.lost {
            return None;
        }
        match answer {
            Ok(value) => Some(value),
            Err(
                NvmlError::NotSupported
                | NvmlError::FunctionNotFound
                | NvmlError::FailedToLoadSymbol(_)
                | NvmlError::NotFound,
            ) => None,
            Err(error) => {
                let failed = FailedCall { call, error };
                self.lost = failed.is_gpu_lost();
                self.failures.push(failed);
                None
            }
        }
    }

    pub fn temperature_c(&mut self) -> Option<u32> {
        let answer = self.device.temperature(TemperatureSensor::Gpu);
        self.get("temperature", answer)
    }

    pub fn power_mw(&mut self) -> Option<u32> {
        let answer = self.device.power_usage();
        self.get("power_usage", answer)
    }

    pub fn power_limit_mw(&mut self) -> Option<u32> {
        let answer = self.device.enforced_power_limit();
        self.get("enforced_power_limit", answer)
    }

    pub fn sm_clock_mhz(&mut self) -> Option<u32> {
        let answer = self.device.clock_info(Clock::SM);
        self.get("clock_info", answer)
    }

    pub fn sm_clock_max_mhz(&mut self) -> Option<u32> {
        let answer = self.device.max_clock_info(Clock::SM);
        self.get("max_clock_info", answer)
    }

    /// Clock event reasons (the newer name of throttle reasons) as raw bits, so bits
    /// the wrapper's bitflags do not know are kept; see
    /// [`gpuvet_model::gpu_health::throttle`]. Where the driver lacks
    /// `nvmlDeviceGetCurrentClocksEventReasons`, the deprecated throttle-reasons call.
    pub fn clock_event_reasons(&mut self) -> Option<u64> {
        let answer = clock_event_reasons(self.device);
        self.get("clock_event_reasons", answer)
    }

    /// `nvmlDeviceGetTotalEccErrors`, volatile and aggregate.
    pub fn ecc_counts(&mut self) -> EccCounts {
        let mut count = |error: MemoryError, counter: EccCounter| {
            let answer = self.device.total_ecc_errors(error, counter);
            self.get("total_ecc_errors", answer)
        };
        EccCounts {
            volatile_corrected: count(MemoryError::Corrected, EccCounter::Volatile),
            volatile_uncorrected: count(MemoryError::Uncorrected, EccCounter::Volatile),
            aggregate_corrected: count(MemoryError::Corrected, EccCounter::Aggregate),
            aggregate_uncorrected: count(MemoryError::Uncorrected, EccCounter::Aggregate),
        }
    }

    /// `nvmlDeviceGetRemappedRows` (Ampere and newer; older GPUs answer "not supported").
    pub fn remapped_rows(&mut self) -> Option<RemappedRows> {
        let answer = remapped_rows(self.device);
        self.get("remapped_rows", answer)
    }

    /// Retired pages (pre-Ampere page retirement); `None` when neither cause reads.
    pub fn retired_pages(&mut self) -> Option<RetiredPages> {
        let single_bit = self
            .device
            .retired_pages(RetirementCause::MultipleSingleBitEccErrors);
        let single_bit = self.get("retired_pages", single_bit);
        let double_bit = self
            .device
            .retired_pages(RetirementCause::DoubleBitEccError);
        let double_bit = self.get("retired_pages", double_bit);
        let pending = self.device.are_pages_pending_retired();
        let pending = self.get("are_pages_pending_retired", pending);
        (single_bit.is_some() || double_bit.is_some()).then(|| RetiredPages {
            single_bit: single_bit.map_or(0, |v| v.len() as u64),
            double_bit: double_bit.map_or(0, |v| v.len() as u64),
            pending: pending.unwrap_or(false),
        })
    }

    pub fn pcie_replays(&mut self) -> Option<u64> {
        let answer = self.device.pcie_replay_counter();
        self.get("pcie_replay_counter", answer).map(u64::from)
    }

    pub fn pcie_link_width(&mut self) -> Option<u32> {
        let answer = self.device.current_pcie_link_width();
        self.get("current_pcie_link_width", answer)
    }

    /// The driver's recovery action and the NVLink error totals, in one call.
    pub fn field_counters(&mut self) -> Option<FieldCounters> {
        let fields = [
            FieldId(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
            FieldId(NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
            FieldId(NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
            FieldId(NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
            FieldId(NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
        ];
        let answer = self.device.field_values_for(&fields);
        let values: Vec<Option<u64>> = self
            .get("field_values", answer)?
            .into_iter()
            .map(|r| {
                r.ok()
                    .and_then(|s| s.value.ok())
                    .as_ref()
                    .and_then(sample_u64)
            })
            .collect();
        let at = |k: usize| values.get(k).copied().flatten();
        Some(FieldCounters {
            recovery_action: at(0).map(|a| RecoveryAction::from_raw(a as u32)),
            nvlink: NvLinkCounters {
                links: Vec::new(),
                crc_flit_total: at(1),
                crc_data_total: at(2),
                replay_total: at(3),
                recovery_total: at(4),
            },
        })
    }

    /// The state of each of these links that answers; pass `0..NVLINK_MAX_LINKS` to
    /// find the links a GPU has.
    pub fn nvlink_states(&mut self, links: impl IntoIterator<Item = u32>) -> Vec<NvLinkState> {
        links
            .into_iter()
            .filter_map(|link| {
                let answer = self.device.link_wrapper_for(link).is_active();
                self.get("nvlink_state", answer)
                    .map(|active| NvLinkState { link, active })
            })
            .collect()
    }
}

fn clock_event_reasons(device: &Device<'_>) -> Result<u64, NvmlError> {
    match nvml_sym(
        device
            .nvml()
            .lib()
            .nvmlDeviceGetCurrentClocksEventReasons
            .as_ref(),
    ) {
        Ok(sym) => {
            let mut bits: u64 = 0;
            // SAFETY: the device handle comes from this NVML instance and stays valid
            // while it lives; the out-pointer points at a live local.
            unsafe { nvml_try(sym(device.handle(), &mut bits))? };
            Ok(bits)
        }
        Err(_) => device.current_throttle_reasons().map(|r| r.bits()),
    }
}

fn remapped_rows(device: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(device.nvml().lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: as in `clock_event_reasons`, with four out-pointers at live locals.
    unsafe {
        nvml_try(sym(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failure,
        ))?;
    }
    Ok(RemappedRows {
        correctable: corr.into(),
        uncorrectable: unc.into(),
        pending: pending != 0,
        failure: failure != 0,
    })
}

fn sample_u64(v: &SampleValue) -> Option<u64> {
    match *v {
        SampleValue::U32(x) => Some(x.into()),
        SampleValue::U64(x) => Some(x),
        SampleValue::I64(x) => u64::try_from(x).ok(),
        SampleValue::F64(x) if x >= 0.0 => Some(x as u64),
        SampleValue::F64(_) => None,
    }
}

/// An XID event set registered for one GPU.
pub struct XidEvents(EventSet<'static>);

impl std::fmt::Debug for XidEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("XidEvents")
    }
}

// SAFETY: the wrapper leaves `EventSet` `!Send` only because it holds a raw
// `nvmlEventSet_t`. NVML is thread-safe (nvml.h: "NVML is thread-safe so it is safe to
// make simultaneous NVML calls from multiple threads"); the set has one owner and is
// used by one thread at a time, so moving it to another thread (the watchdog's worker)
// is sound. It is not `Sync`.
unsafe impl Send for XidEvents {}

/// An XID NVML could not name.
pub const UNKNOWN_XID: u32 = u32::MAX;

impl XidEvents {
    /// Registers for the GPU's critical XID events; `None` where the GPU does not
    /// offer them (the kernel log still sees its XIDs).
    pub fn register(
        nvml: &'static Nvml,
        device: &Device<'static>,
    ) -> Result<Option<Self>, NvmlError> {
        match device.supported_event_types() {
            Ok(t) if t.contains(EventTypes::CRITICAL_XID_ERROR) => {}
            Ok(_) | Err(NvmlError::NotSupported) => return Ok(None),
            Err(e) => return Err(e),
        }
        let set = nvml.create_event_set()?;
        let set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| e.error)?;
        Ok(Some(XidEvents(set)))
    }

    /// The XIDs waiting now, at most `max` events, without blocking; [`UNKNOWN_XID`]
    /// where NVML could not tell which. An error ends the drain and comes back with
    /// what was read before it.
    pub fn drain(&self, max: usize) -> (Vec<u32>, Option<NvmlError>) {
        let mut xids = Vec::new();
        for _ in 0..max {
            match self.0.wait(0) {
                Ok(data) => {
                    if !data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                        continue;
                    }
                    xids.push(match data.event_data {
                        Some(XidError::Value(v)) => u32::try_from(v).unwrap_or(UNKNOWN_XID),
                        Some(XidError::Unknown) | None => UNKNOWN_XID,
                    });
                }
                Err(NvmlError::Timeout) => break,
                Err(e) => return (xids, Some(e)),
            }
        }
        (xids, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_opening_nvml_fails_and_is_tried_again() {
        // No driver on this machine kind; with one, both must simply succeed.
        if open().is_err() {
            assert!(shared().is_err());
            assert!(shared().is_err(), "a failure is not cached");
        } else {
            assert!(std::ptr::eq(shared().unwrap(), shared().unwrap()));
        }
    }
}
