//! The stable-toolchain fallback for the fuzz target: no coverage guidance,
//! but the same harness and structure-aware mutator, for machines without
//! nightly or cargo-fuzz. Replays the seed corpus, then runs N mutated
//! inputs (a quarter of them byte-level mutations of encoded messages, so
//! undecodable bytes are covered too).
//!
//! `cargo run -p agent-runner-fuzz --bin stable_driver -- [N] [SEED] [--seconds S]`:
//! N inputs (default 1,000,000), stopping early after S seconds if given (CI
//! runs it for a fixed time in the dev profile, built with the tests);
//! `… -- --write-seeds corpus/server_message` regenerates the seed corpus.

use std::time::{Duration, Instant};

use agent_runner_fuzz::{Harness, Outcome, Rng, mutate, seeds};
use prost::Message as _;

fn byte_mutate(rng: &mut Rng, raw: &mut Vec<u8>) {
    match rng.below(4) {
        0 if !raw.is_empty() => {
            let i = rng.below(raw.len());
            raw[i] ^= 1 << rng.below(8);
        }
        1 => {
            let i = rng.below(raw.len() + 1);
            raw.insert(i, (rng.next_u64() & 0xff) as u8);
        }
        2 if !raw.is_empty() => {
            let i = rng.below(raw.len());
            raw.remove(i);
        }
        _ => {
            let i = rng.below(raw.len() + 1);
            raw.truncate(i);
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    if args.peek().map(String::as_str) == Some("--write-seeds") {
        let dir = args
            .nth(1)
            .unwrap_or_else(|| "corpus/server_message".to_owned());
        for (name, msg) in seeds() {
            let path = std::path::Path::new(&dir).join(format!("seed-{name}"));
            if let Err(e) = std::fs::write(&path, msg.encode_to_vec()) {
                eprintln!("writing {}: {e}", path.display());
                std::process::exit(1);
            }
        }
        return;
    }
    let mut positional = Vec::new();
    let mut budget = None;
    while let Some(arg) = args.next() {
        if arg == "--seconds" {
            match args.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(s) => budget = Some(Duration::from_secs(s)),
                None => {
                    eprintln!("stable_driver: --seconds takes a whole number of seconds");
                    std::process::exit(2);
                }
            }
        } else {
            positional.push(arg);
        }
    }
    let mut positional = positional.into_iter();
    let n: u64 = positional
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let seed: u64 = positional
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(0x5eed);
    let corpus: Vec<Vec<u8>> = seeds()
        .into_iter()
        .map(|(_, m)| m.encode_to_vec())
        .collect();
    let mut h = Harness::new();
    let mut rng = Rng(seed | 1);
    let mut counts = [0u64; 5];
    let start = Instant::now();
    let mut done = 0;
    for i in 0..n {
        if budget.is_some_and(|b| i >= corpus.len() as u64 && start.elapsed() >= b) {
            break;
        }
        done = i + 1;
        let base = &corpus[rng.below(corpus.len())];
        let input = if i < corpus.len() as u64 {
            corpus[i as usize].clone()
        } else if rng.below(4) == 0 {
            let mut raw = base.clone();
            for _ in 0..1 + rng.below(4) {
                byte_mutate(&mut rng, &mut raw);
            }
            raw
        } else {
            let mut msg = agent_runner_proto::runner::ServerMessage::decode(base.as_slice())
                .unwrap_or_default();
            let mut r2 = Rng(rng.next_u64() | 1);
            for _ in 0..1 + rng.below(3) {
                mutate(&mut msg, &mut rng, &mut |raw| byte_mutate(&mut r2, raw));
            }
            msg.encode_to_vec()
        };
        let outcome = h.run_bytes(&input);
        counts[outcome as usize] += 1;
        if (i + 1) % 100_000 == 0 {
            eprintln!(
                "{} executions, {:.0}/s",
                i + 1,
                (i + 1) as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "stable_driver: {done} executions in {:.1}s without a finding: undecodable {}, invalid (RequestError) {}, answered {}, no request id {}, acknowledgement only {}",
        start.elapsed().as_secs_f64(),
        counts[Outcome::Undecodable as usize],
        counts[Outcome::Invalid as usize],
        counts[Outcome::Answered as usize],
        counts[Outcome::Unchecked as usize],
        counts[Outcome::AckOnly as usize]
    );
}
