//! The kernel-log line parser and `parse_log`: never panic, overlong lines are not
//! parsed, and a whole log yields exactly what its lines do one by one.

#![no_main]

use gpuvet_watch::kmsg::{MAX_LINE_BYTES, parse_log, parse_xid_line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parsed = 0;
    for line in text.lines() {
        if let Some(xid) = parse_xid_line(line) {
            assert!(line.len() <= MAX_LINE_BYTES);
            assert_eq!(
                xid.pci_bus_id.len(),
                "0000:3b:00".len(),
                "{}",
                xid.pci_bus_id
            );
            parsed += 1;
        }
    }
    assert_eq!(parse_log(&text, "boot", 0).len(), parsed);
});
