//! The NVML health source: XID events, ECC, remapped rows, retired pages, clock-event
//! reasons, temperature, power, NVLink, PCIe replays and the GPU recovery action.
//!
//! NVML is loaded at run time; without the driver, [`NvmlSource::new`] returns
//! [`HealthError::NvmlInit`]. Errors about one GPU become [`HealthReading::GpuError`]
//! readings (GPU_IS_LOST marks the GPU lost), so a dying GPU is a finding, not a crash.
//! Calls NVML may not support on a GPU (NOT_SUPPORTED, a missing symbol) leave the
//! field `None`. Wrap the source in a [`super::Watchdog`]: NVML calls can hang.
//!
//! nvml-wrapper 0.13 has no wrapper for remapped rows or clock-event reasons; both are
//! called through the raw symbols of `nvml.lib()`. The recovery action and NVLink
//! error totals come from one batched `nvmlDeviceGetFieldValues` call.

use std::sync::Mutex;

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, RetirementCause, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::{NvmlError, nvml_sym, nvml_try};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::{
    NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
};
use nvml_wrapper::{Device, EventSet, Nvml};

use super::{
    EccCounts, GpuSample, HealthError, HealthReading, HealthSource, NvLinkCounters, NvLinkState,
    RecoveryAction, RemappedRows, RetiredPages,
};
use crate::kmsg::read_boot_id;
use crate::policy::{GpuId, XidObservation};

/// `NVML_NVLINK_MAX_LINKS` in `nvml.h`.
const MAX_NVLINKS: u32 = 18;

/// Options of the NVML source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlOptions {
    /// Read the per-link NVLink state every this many polls (18 calls per GPU; the
    /// error totals are read every poll).
    pub link_state_every: u32,
    /// At most this many XID events drained per GPU per poll.
    pub max_events_per_poll: usize,
    /// Boot id for XID observations; `None`: read from the kernel.
    pub boot_id: Option<String>,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        NvmlOptions {
            link_state_every: 10,
            max_events_per_poll: 1000,
            boot_id: None,
        }
    }
}

/// The process's NVML handle. It lives as long as the process: event sets and device
/// handles borrow it, and a source moves between threads (the watchdog's worker).
static NVML: Mutex<Option<&'static Nvml>> = Mutex::new(None);

fn shared_nvml() -> Result<&'static Nvml, NvmlError> {
    let mut guard = NVML.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = *guard {
        return Ok(n);
    }
    // Failures are not cached: the driver may load later.
    let n: &'static Nvml = Box::leak(Box::new(Nvml::init()?));
    *guard = Some(n);
    Ok(n)
}

/// An event set registered for one GPU.
struct XidEvents(EventSet<'static>);

// SAFETY: the wrapper leaves `EventSet` `!Send` only because it holds a raw
// `nvmlEventSet_t`. NVML is thread-safe (nvml.h: "NVML is thread-safe so it is safe to
// make simultaneous NVML calls from multiple threads"); the set is owned by one
// `NvmlSource` and used by one thread at a time (`&mut self` in `poll`), so moving it
// to the watchdog's worker is sound. It is not `Sync`.
unsafe impl Send for XidEvents {}

struct NvmlGpu {
    id: GpuId,
    device: Option<Device<'static>>,
    events: Option<XidEvents>,
    links: Vec<u32>,
    /// Set after GPU_IS_LOST: the rest of the GPU's calls are skipped.
    lost: bool,
}

/// Health readings from NVML.
pub struct NvmlSource {
    nvml: &'static Nvml,
    gpus: Vec<NvmlGpu>,
    options: NvmlOptions,
    boot_id: String,
    polls: u64,
    /// Readings from setup (failed registrations, lost GPUs), sent with the first poll.
    setup: Vec<HealthReading>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&GpuId> = self.gpus.iter().map(|g| &g.id).collect();
        f.debug_struct("NvmlSource")
            .field("gpus", &ids)
            .field("polls", &self.polls)
            .finish()
    }
}

impl NvmlSource {
    /// Loads NVML and finds the GPUs. Fails with [`HealthError::NvmlInit`] where there
    /// is no driver (as on CI machines).
    pub fn new(options: NvmlOptions) -> Result<Self, HealthError> {
        let nvml = shared_nvml().map_err(HealthError::NvmlInit)?;
        let count = nvml.device_count().map_err(|source| HealthError::Nvml {
            call: "device_count",
            source,
        })?;
        let mut setup = Vec::new();
        let mut gpus = Vec::new();
        for index in 0..count {
            let mut gpu = NvmlGpu {
                id: GpuId::index(index),
                device: None,
                events: None,
                links: Vec::new(),
                lost: false,
            };
            match nvml.device_by_index(index) {
                Ok(device) => {
                    if let Ok(pci) = device.pci_info() {
                        gpu.id = GpuId::new(Some(index), Some(&pci.bus_id));
                    }
                    match register_xid_events(nvml, &device) {
                        Ok(events) => gpu.events = events,
                        Err(e) => setup.push(gpu_error(&gpu.id, 0, "register_events", &e)),
                    }
                    gpu.links = (0..MAX_NVLINKS)
                        .filter(|&l| device.link_wrapper_for(l).is_active().is_ok())
                        .collect();
                    gpu.device = Some(device);
                }
                Err(e) => {
                    gpu.lost = matches!(e, NvmlError::GpuLost);
                    setup.push(gpu_error(&gpu.id, 0, "device_by_index", &e));
                }
            }
            gpus.push(gpu);
        }
        Ok(NvmlSource {
            nvml,
            gpus,
            boot_id: options
                .boot_id
                .clone()
                .or_else(read_boot_id)
                .unwrap_or_default(),
            options,
            polls: 0,
            setup,
        })
    }

    /// The GPUs found at start.
    pub fn gpus(&self) -> Vec<GpuId> {
        self.gpus.iter().map(|g| g.id.clone()).collect()
    }
}

fn register_xid_events(
    nvml: &'static Nvml,
    device: &Device<'static>,
) -> Result<Option<XidEvents>, NvmlError> {
    match device.supported_event_types() {
        Ok(t) if t.contains(EventTypes::CRITICAL_XID_ERROR) => {}
        // The kernel log still sees this GPU's XIDs.
        Ok(_) | Err(NvmlError::NotSupported) => return Ok(None),
        Err(e) => return Err(e),
    }
    let set = nvml.create_event_set()?;
    let set = device
        .register_events(EventTypes::CRITICAL_XID_ERROR, set)
        .map_err(|e| e.error)?;
    Ok(Some(XidEvents(set)))
}

fn gpu_error(gpu: &GpuId, time_ms: u64, call: &str, e: &NvmlError) -> HealthReading {
    HealthReading::GpuError {
        gpu: gpu.clone(),
        time_ms,
        call: call.to_owned(),
        error: e.to_string(),
        lost: matches!(e, NvmlError::GpuLost),
    }
}

/// Collects the outcome of one NVML call: unsupported → `None` quietly, GPU lost →
/// remembered, anything else → an error reading.
struct Probe<'a> {
    gpu: &'a GpuId,
    time_ms: u64,
    lost: bool,
    errors: Vec<HealthReading>,
}

impl Probe<'_> {
    fn get<T>(&mut self, call: &str, r: Result<T, NvmlError>) -> Option<T> {
        if self.lost {
            return None;
        }
        match r {
            Ok(v) => Some(v),
            Err(
                NvmlError::NotSupported
                | NvmlError::FunctionNotFound
                | NvmlError::FailedToLoadSymbol(_)
                | NvmlError::NotFound,
            ) => None,
            Err(e) => {
                self.lost = matches!(e, NvmlError::GpuLost);
                self.errors
                    .push(gpu_error(self.gpu, self.time_ms, call, &e));
                None
            }
        }
    }
}

fn remapped_rows(nvml: &Nvml, device: &Device) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failure) = (0u32, 0u32, 0u32, 0u32);
    // SAFETY: the device handle comes from this NVML instance and stays valid while it
    // lives (for the process); the out-pointers point at live locals.
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

/// Clock-event reasons (the newer name of throttle reasons), raw bits, so bits the
/// wrapper's bitflags do not know are kept. Falls back to the older symbol.
fn clock_event_reasons(nvml: &Nvml, device: &Device) -> Result<u64, NvmlError> {
    match nvml_sym(nvml.lib().nvmlDeviceGetCurrentClocksEventReasons.as_ref()) {
        Ok(sym) => {
            let mut bits: u64 = 0;
            // SAFETY: as in `remapped_rows`.
            unsafe { nvml_try(sym(device.handle(), &mut bits))? };
            Ok(bits)
        }
        Err(_) => device.current_throttle_reasons().map(|r| r.bits()),
    }
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

impl NvmlSource {
    fn drain_xids(&mut self, i: usize, now_ms: u64, out: &mut Vec<HealthReading>) {
        let max = self.options.max_events_per_poll;
        let boot_id = self.boot_id.clone();
        let gpu = &mut self.gpus[i];
        let Some(events) = gpu.events.as_ref() else {
            return;
        };
        for _ in 0..max {
            match events.0.wait(0) {
                Ok(data) => {
                    if !data.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                        continue;
                    }
                    let xid = match data.event_data {
                        Some(XidError::Value(v)) => u32::try_from(v).unwrap_or(u32::MAX),
                        // NVML could not tell which XID: record it as unknown.
                        Some(XidError::Unknown) | None => u32::MAX,
                    };
                    out.push(HealthReading::Xid(XidObservation {
                        gpu: gpu.id.clone(),
                        xid,
                        time_ms: now_ms,
                        boot_id: boot_id.clone(),
                        pid: None,
                        text: String::new(),
                        source: "nvml".to_owned(),
                    }));
                }
                Err(NvmlError::Timeout) => return,
                Err(e) => {
                    gpu.lost |= matches!(e, NvmlError::GpuLost);
                    out.push(gpu_error(&gpu.id, now_ms, "event_set_wait", &e));
                    return;
                }
            }
        }
    }

    fn sample(&mut self, i: usize, now_ms: u64, read_links: bool) -> Vec<HealthReading> {
        let nvml = self.nvml;
        let gpu = &self.gpus[i];
        let Some(device) = gpu.device.as_ref() else {
            return Vec::new();
        };
        let mut p = Probe {
            gpu: &gpu.id,
            time_ms: now_ms,
            lost: false,
            errors: Vec::new(),
        };
        let mut s = GpuSample {
            gpu: gpu.id.clone(),
            time_ms: now_ms,
            ..GpuSample::default()
        };

        s.temperature_c = p.get("temperature", device.temperature(TemperatureSensor::Gpu));
        s.power_mw = p.get("power_usage", device.power_usage());
        s.ecc = EccCounts {
            volatile_corrected: p.get(
                "total_ecc_errors",
                device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
            ),
            volatile_uncorrected: p.get(
                "total_ecc_errors",
                device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            ),
            aggregate_corrected: p.get(
                "total_ecc_errors",
                device.total_ecc_errors(MemoryError::Corrected, EccCounter::Aggregate),
            ),
            aggregate_uncorrected: p.get(
                "total_ecc_errors",
                device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate),
            ),
        };
        s.remapped_rows = p.get("remapped_rows", remapped_rows(nvml, device));
        let sbe = p.get(
            "retired_pages",
            device.retired_pages(RetirementCause::MultipleSingleBitEccErrors),
        );
        let dbe = p.get(
            "retired_pages",
            device.retired_pages(RetirementCause::DoubleBitEccError),
        );
        let pending = p.get(
            "are_pages_pending_retired",
            device.are_pages_pending_retired(),
        );
        if sbe.is_some() || dbe.is_some() {
            s.retired_pages = Some(RetiredPages {
                single_bit: sbe.map_or(0, |v| v.len() as u64),
                double_bit: dbe.map_or(0, |v| v.len() as u64),
                pending: pending.unwrap_or(false),
            });
        }
        s.clock_event_reasons = p.get("clock_event_reasons", clock_event_reasons(nvml, device));
        s.pcie_replays = p
            .get("pcie_replay_counter", device.pcie_replay_counter())
            .map(u64::from);
        s.pcie_link_width = p.get("current_pcie_link_width", device.current_pcie_link_width());

        let fields = [
            FieldId(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
            FieldId(NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL),
            FieldId(NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL),
            FieldId(NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL),
            FieldId(NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL),
        ];
        if let Some(values) = p.get("field_values", device.field_values_for(&fields)) {
            let v: Vec<Option<u64>> = values
                .into_iter()
                .map(|r| {
                    r.ok()
                        .and_then(|s| s.value.ok())
                        .as_ref()
                        .and_then(sample_u64)
                })
                .collect();
            let at = |k: usize| v.get(k).copied().flatten();
            s.recovery_action = at(0).map(|a| RecoveryAction::from_raw(a as u32));
            s.nvlink = NvLinkCounters {
                links: Vec::new(),
                crc_flit_total: at(1),
                crc_data_total: at(2),
                replay_total: at(3),
                recovery_total: at(4),
            };
        }
        if read_links {
            for &link in &gpu.links {
                if let Some(active) =
                    p.get("nvlink_state", device.link_wrapper_for(link).is_active())
                {
                    s.nvlink.links.push(NvLinkState { link, active });
                }
            }
        }

        let lost = p.lost;
        let mut out = p.errors;
        if lost {
            self.gpus[i].lost = true;
        } else {
            out.push(HealthReading::Gpu(s));
        }
        out
    }
}

impl HealthSource for NvmlSource {
    fn name(&self) -> &str {
        "nvml"
    }

    fn poll(&mut self, now_ms: u64) -> Result<Vec<HealthReading>, HealthError> {
        let mut out = Vec::new();
        if self.polls == 0 {
            out.push(HealthReading::Inventory { gpus: self.gpus() });
            for mut r in std::mem::take(&mut self.setup) {
                if let HealthReading::GpuError { time_ms, .. } = &mut r {
                    *time_ms = now_ms;
                }
                out.push(r);
            }
        }
        let every = u64::from(self.options.link_state_every.max(1));
        let read_links = self.polls % every == 0;
        self.polls += 1;
        for i in 0..self.gpus.len() {
            if self.gpus[i].lost {
                // Keep saying so: the policy counts it, and it is the state that matters.
                let id = self.gpus[i].id.clone();
                out.push(HealthReading::GpuError {
                    gpu: id,
                    time_ms: now_ms,
                    call: "device".to_owned(),
                    error: "GPU is lost".to_owned(),
                    lost: true,
                });
                continue;
            }
            self.drain_xids(i, now_ms, &mut out);
            if !self.gpus[i].lost {
                out.extend(self.sample(i, now_ms, read_links));
            }
        }
        Ok(out)
    }
}
