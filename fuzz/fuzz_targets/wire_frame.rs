//! The control-plane frame decoder over a byte-slice reader: never panics, never takes
//! more than the frame says, and every message it accepts encodes and decodes back to
//! itself.

#![no_main]

use gpuvet_control::protocol::{MAX_FRAME_BYTES, encode_frame, read_message_from};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = data;
    while let Ok(message) = read_message_from(&mut reader) {
        let frame = encode_frame(&message).expect("an accepted message encodes");
        assert!(frame.len() <= MAX_FRAME_BYTES + 4);
        let again = read_message_from(&mut &frame[..]).expect("an encoded message decodes");
        assert_eq!(again, message);
    }
});
