//! Whatever bytes a guest answers with, the host's decoders return a value or an error: they
//! never panic, never allocate more than the input justifies, never pass more yields than the
//! limit. `wit/tests/decode_corpus.rs` replays a mutated corpus of the same kind in `cargo test`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wfcontract::abi::{decode_step_output, InitResponse};

fuzz_target!(|data: &[u8]| {
    if let Ok(out) = decode_step_output(data, 10_000) {
        assert!(out.yields.len() <= 10_000);
        let again = postcard::to_allocvec(&out).expect("a decoded answer encodes");
        assert_eq!(decode_step_output(&again, 10_000).expect("and decodes again"), out);
    }
    let _ = postcard::from_bytes::<InitResponse>(data);
});
