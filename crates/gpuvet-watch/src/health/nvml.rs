//! The NVML health source: XID events, ECC, remapped rows, retired pages, clock-event
//! reasons, temperature, power, NVLink, PCIe replays and the GPU recovery action, read
//! through `gpuvet-nvml` and turned into [`HealthReading`]s.
//!
//! NVML is loaded at run time; without the driver, [`NvmlSource::new`] returns
//! [`HealthError::NvmlInit`]. Errors about one GPU become [`HealthReading::GpuError`]
//! readings (GPU_IS_LOST marks the GPU lost), so a dying GPU is a finding, not a crash.
//! Calls NVML may not support on a GPU (NOT_SUPPORTED, a missing symbol) leave the
//! field `None`. Wrap the source in a [`super::Watchdog`]: NVML calls can hang.

use gpuvet_nvml::{Device, GpuReader, NVLINK_MAX_LINKS, NvmlError, XidEvents};

use super::{GpuSample, HealthError, HealthReading, HealthSource};
use crate::finding::{GpuId, XidObservation};
use crate::kmsg::read_boot_id;

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
        let nvml = gpuvet_nvml::shared().map_err(HealthError::NvmlInit)?;
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
                    match XidEvents::register(nvml, &device) {
                        Ok(events) => gpu.events = events,
                        Err(e) => setup.push(gpu_error(&gpu.id, 0, "register_events", &e)),
                    }
                    gpu.links = GpuReader::new(&device)
                        .nvlink_states(0..NVLINK_MAX_LINKS)
                        .iter()
                        .map(|state| state.link)
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

fn gpu_error(gpu: &GpuId, time_ms: u64, call: &str, e: &NvmlError) -> HealthReading {
    HealthReading::GpuError {
        gpu: gpu.clone(),
        time_ms,
        call: call.to_owned(),
        error: e.to_string(),
        lost: matches!(e, NvmlError::GpuLost),
    }
}

impl NvmlSource {
    fn drain_xids(&mut self, i: usize, now_ms: u64, out: &mut Vec<HealthReading>) {
        let gpu = &mut self.gpus[i];
        let Some(events) = gpu.events.as_ref() else {
            return;
        };
        let (xids, error) = events.drain(self.options.max_events_per_poll);
        out.extend(xids.into_iter().map(|xid| {
            HealthReading::Xid(XidObservation {
                gpu: gpu.id.clone(),
                xid,
                time_ms: now_ms,
                boot_id: self.boot_id.clone(),
                pid: None,
                text: String::new(),
                source: "nvml".to_owned(),
            })
        }));
        if let Some(e) = error {
            gpu.lost |= matches!(e, NvmlError::GpuLost);
            out.push(gpu_error(&gpu.id, now_ms, "event_set_wait", &e));
        }
    }

    fn sample(&mut self, i: usize, now_ms: u64, read_links: bool) -> Vec<HealthReading> {
        let gpu = &self.gpus[i];
        let Some(device) = gpu.device.as_ref() else {
            return Vec::new();
        };
        let mut read = GpuReader::new(device);
        let mut s = GpuSample {
            gpu: gpu.id.clone(),
            time_ms: now_ms,
            ..GpuSample::default()
        };
        s.temperature_c = read.temperature_c();
        s.power_mw = read.power_mw();
        s.ecc = read.ecc_counts();
        s.remapped_rows = read.remapped_rows();
        s.retired_pages = read.retired_pages();
        s.clock_event_reasons = read.clock_event_reasons();
        s.pcie_replays = read.pcie_replays();
        s.pcie_link_width = read.pcie_link_width();
        if let Some(counters) = read.field_counters() {
            s.recovery_action = counters.recovery_action;
            s.nvlink = counters.nvlink;
        }
        if read_links {
            s.nvlink.links = read.nvlink_states(gpu.links.iter().copied());
        }

        let lost = read.lost();
        let mut out: Vec<HealthReading> = read
            .into_failures()
            .iter()
            .map(|f| gpu_error(&gpu.id, now_ms, f.call, &f.error))
            .collect();
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
        let read_links = self.polls.is_multiple_of(every);
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
