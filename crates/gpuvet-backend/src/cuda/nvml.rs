//! NVML for the cuda backend: opening it, and matching CUDA's devices to NVML's.
//!
//! NVML is optional: without it the cuda backend still measures, and the inventory
//! says why the readings are missing. Devices are matched to CUDA ordinals by UUID,
//! which stays right under `CUDA_VISIBLE_DEVICES` and `CUDA_DEVICE_ORDER`. The reads
//! themselves (inventory facts, health readings, samples during a GEMM) are
//! `gpuvet-nvml`'s, re-exported here.

use gpuvet_nvml::NvmlError;
pub use gpuvet_nvml::{driver_version, health, index_of, sample};
use nvml_wrapper::Nvml;

/// Opens NVML ([`gpuvet_nvml::open`]); the error says why it is missing.
pub fn init() -> Result<Nvml, NvmlError> {
    gpuvet_nvml::open()
}

/// The inventory's `nvml` detail when NVML is missing.
pub fn unavailable_detail(error: &NvmlError) -> String {
    format!("NVML is not available: {error}")
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
            let detail = unavailable_detail(&err);
            assert_eq!(detail, format!("NVML is not available: {err}"));
        }
        assert_eq!(
            unavailable_detail(&NvmlError::NotFound),
            format!("NVML is not available: {}", NvmlError::NotFound)
        );
    }
}
