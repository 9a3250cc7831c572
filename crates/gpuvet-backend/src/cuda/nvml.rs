//! GPU inventory and health readings through NVML.
//!
//! NVML is optional: without it the cuda backend still measures, and the inventory
//! says why the readings are missing. Devices are matched to CUDA ordinals by UUID,
//! which stays right under `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`. Row-remap
//! counts and the clock event reasons have no wrapper in nvml-wrapper 0.13, so they go
//! through the raw symbols, and a driver that lacks them just leaves them unset.

use std::collections::BTreeMap;

use gpuvet_core::inventory::{GpuHealth, keys};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};

/// NVML exposes at most this many NVLink links per GPU (`NVML_NVLINK_MAX_LINKS`).
const NVLINK_MAX_LINKS: u32 = 18;

/// Opens NVML: `libnvidia-ml.so.1` (what the driver installs), then the unversioned name.
pub fn init() -> Result<Nvml, String> {
    match Nvml::init() {
        Ok(nvml) => Ok(nvml),
        Err(first) => Nvml::builder()
            .lib_path(std::ffi::OsStr::new("libnvidia-ml.so"))
            .init()
            .map_err(|_| format!("NVML is not available: {first}")),
    }
}

/// The UUID NVML uses (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) from CUDA's 16 bytes.
pub fn uuid_string(bytes: &[std::ffi::c_char; 16]) -> String {
    let b: Vec<u8> = bytes.iter().map(|c| *c as u8).collect();
    let hex = |range: std::ops::Range<usize>| {
        b[range]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    };
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex(0..4),
        hex(4..6),
        hex(6..8),
        hex(8..10),
        hex(10..16)
    )
}

/// The PCI bus id in NVML's form (`00000000:18:00.0`) from CUDA's attributes.
pub fn pci_bus_id(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:08X}:{bus:02X}:{device:02X}.0")
}

/// `13000` → `13.0`.
pub fn cuda_version_string(code: i32) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

/// NVML's index of the GPU with this UUID.
pub fn index_of(nvml: &Nvml, uuid: &str) -> Option<u32> {
    nvml.device_by_uuid(uuid).ok()?.index().ok()
}

/// Node-wide facts: the driver version.
pub fn system_details(nvml: &Nvml) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(version) = nvml.sys_driver_version() {
        out.insert(keys::DRIVER_VERSION.to_owned(), version);
    }
    out
}

/// Every reading gpuvet records for one GPU; unreadable ones stay `None`.
pub fn health(nvml: &Nvml, index: u32) -> GpuHealth {
    let Ok(device) = nvml.device_by_index(index) else {
        return GpuHealth::default();
    };
    let mut health = GpuHealth {
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        power_w: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        power_limit_w: device
            .enforced_power_limit()
            .ok()
            .map(|mw| f64::from(mw) / 1000.0),
        sm_clock_mhz: device.clock_info(Clock::SM).ok(),
        sm_clock_max_mhz: device.max_clock_info(Clock::SM).ok(),
        throttle_reasons: throttle_reasons(nvml, &device),
        ecc_uncorrected_volatile: device
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
            .ok(),
        ecc_corrected_volatile: device
            .total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
            .ok(),
        ecc_uncorrected_aggregate: device
            .total_ecc_errors(MemoryError::Uncorrected, EccCounter::Aggregate)
            .ok(),
        pcie_replays: device.pcie_replay_counter().ok().map(u64::from),
        ..GpuHealth::default()
    };
    if let Some((correctable, uncorrectable, pending, failure)) = remapped_rows(nvml, &device) {
        health.remapped_rows_correctable = Some(correctable);
        health.remapped_rows_uncorrectable = Some(uncorrectable);
        health.remap_pending = Some(pending);
        health.remap_failure = Some(failure);
    }
    // Links that answer at all exist on this GPU; the others are not counted.
    let states: Vec<bool> = (0..NVLINK_MAX_LINKS)
        .filter_map(|link| device.link_wrapper_for(link).is_active().ok())
        .collect();
    health.nvlink_total = Some(states.len() as u32);
    health.nvlink_active = Some(states.iter().filter(|s| **s).count() as u32);
    health
}

/// The fast readings sampled while work runs: SM clock, temperature, power, throttle.
pub fn sample(nvml: &Nvml, index: u32) -> GpuHealth {
    let Ok(device) = nvml.device_by_index(index) else {
        return GpuHealth::default();
    };
    GpuHealth {
        temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
        power_w: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        power_limit_w: device
            .enforced_power_limit()
            .ok()
            .map(|mw| f64::from(mw) / 1000.0),
        sm_clock_mhz: device.clock_info(Clock::SM).ok(),
        sm_clock_max_mhz: device.max_clock_info(Clock::SM).ok(),
        throttle_reasons: throttle_reasons(nvml, &device),
        ..GpuHealth::default()
    }
}

/// `nvmlDeviceGetCurrentClocksEventReasons` (the current name), else the deprecated
/// throttle-reasons call the wrapper offers.
fn throttle_reasons(nvml: &Nvml, device: &nvml_wrapper::Device<'_>) -> Option<u64> {
    if let Ok(get) = nvml.lib().nvmlDeviceGetCurrentClocksEventReasons.as_ref() {
        let mut bits: std::ffi::c_ulonglong = 0;
        // SAFETY: a live device handle and a valid out-pointer, as `nvml.h` declares.
        let status = unsafe { get(device.handle(), &mut bits) };
        if status == 0 {
            return Some(bits);
        }
    }
    device.current_throttle_reasons().ok().map(|r| r.bits())
}

/// `(correctable, uncorrectable, pending, failure)` from `nvmlDeviceGetRemappedRows`
/// (Ampere and newer; older GPUs answer "not supported").
fn remapped_rows(nvml: &Nvml, device: &nvml_wrapper::Device<'_>) -> Option<(u32, u32, bool, bool)> {
    let get = nvml.lib().nvmlDeviceGetRemappedRows.as_ref().ok()?;
    let (mut correctable, mut uncorrectable, mut pending, mut failure) = (0, 0, 0, 0);
    // SAFETY: a live device handle and four valid out-pointers, as `nvml.h` declares.
    let status = unsafe {
        get(
            device.handle(),
            &mut correctable,
            &mut uncorrectable,
            &mut pending,
            &mut failure,
        )
    };
    (status == 0).then_some((correctable, uncorrectable, pending != 0, failure != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_are_formatted_as_nvml_prints_them() {
        let mut bytes = [0 as std::ffi::c_char; 16];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i as u8 * 17) as std::ffi::c_char;
        }
        assert_eq!(
            uuid_string(&bytes),
            "GPU-00112233-4455-6677-8899-aabbccddeeff"
        );
    }

    #[test]
    fn pci_ids_and_cuda_versions_are_formatted() {
        assert_eq!(pci_bus_id(0, 0x18, 0), "00000000:18:00.0");
        assert_eq!(pci_bus_id(1, 0xc1, 3), "00000001:C1:03.0");
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12080), "12.8");
    }

    #[test]
    fn nvml_is_missing_here_and_says_so() {
        // No driver on this machine kind; with one, init must simply succeed.
        if let Err(err) = init() {
            assert!(err.starts_with("NVML is not available"), "{err}");
        }
    }
}
