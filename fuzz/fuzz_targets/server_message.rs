//! libFuzzer target: arbitrary bytes and structure-aware mutations of
//! `ServerMessage`s through the runner's decoding, validation and dispatch,
//! in-process with the scripted adapter. The checks live in the harness
//! (`src/lib.rs`): no panic, no hang, every invalid message answered with a
//! `RequestError`.
//!
//! `cargo +nightly fuzz run server_message -s none`

#![no_main]

use std::cell::RefCell;

use agent_runner_fuzz::{Harness, Rng, mutate};
use agent_runner_proto::runner::ServerMessage;
use libfuzzer_sys::{fuzz_mutator, fuzz_target, fuzzer_mutate};
use prost::Message as _;

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with(|h| {
        let mut h = h.borrow_mut();
        h.get_or_insert_with(Harness::new).run_bytes(data);
    });
});

fuzz_mutator!(|data: &mut [u8], size: usize, max_size: usize, seed: u32| {
    let mut rng = Rng(u64::from(seed) | 1 << 40);
    // A quarter of the time (and whenever the input does not decode): plain
    // byte-level mutation, which reaches the decoder's error paths.
    let decoded = if rng.below(4) == 0 {
        None
    } else {
        ServerMessage::decode(&data[..size]).ok()
    };
    let Some(mut msg) = decoded else {
        return fuzzer_mutate(data, size, max_size);
    };
    let mut field_bytes = |raw: &mut Vec<u8>| {
        let len = raw.len();
        raw.resize(len.max(1) * 2 + 8, 0);
        let cap = raw.len();
        let new_len = fuzzer_mutate(raw, len, cap);
        raw.truncate(new_len);
    };
    for _ in 0..1 + rng.below(3) {
        mutate(&mut msg, &mut rng, &mut field_bytes);
    }
    let out = msg.encode_to_vec();
    if out.len() > max_size {
        return fuzzer_mutate(data, size, max_size);
    }
    data[..out.len()].copy_from_slice(&out);
    out.len()
});
