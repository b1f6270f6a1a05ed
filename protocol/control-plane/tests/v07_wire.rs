//! Protocol 0.7 is wire-exact with the published 0.7.0: the descriptor of
//! our `proto/v0.7/…/runner.proto` (every message, field name, number,
//! type, label, oneof, enum value and `buf.validate` rule, as protoc
//! compiled it for this crate) equals the descriptor of the published file
//! (`tests/wire/v0.7.0.descriptor.txt`, protoc's text form of it), but for
//! what is ours by design:
//! - fields numbered 100 and up (this project's extensions) and the import
//!   of the file that defines the approvals messages;
//! - the three rules inside a oneof's messages that the generator cannot
//!   follow (`ThreadMcpStdioConfig.command`, `ThreadMcpStreamableHttpConfig.url`,
//!   `ThreadMcpHeader.key`, each `min_len: 1`): `src/envelope.rs` checks them
//!   by hand, and its tests and `envelope_v07.rs`'s hold it to that.
//!
//! protoc is the one the build uses (`build-support/protoc`).

#![allow(clippy::expect_used)]

use std::path::Path;
use std::process::Command;

/// `text` without what is ours by design (see the file's doc), and without
/// source info; `drop_hand_checked_rules` leaves out the three rules
/// checked by hand.
fn normalize(text: &str, drop_hand_checked_rules: bool) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut message = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim();
        if trimmed == "message_type {" {
            message = lines
                .get(i + 1)
                .and_then(|l| l.trim().strip_prefix("name: "))
                .unwrap_or_default()
                .trim_matches('"')
                .to_owned();
        }
        if trimmed == "dependency: \"companyhelm/runner/v1/approvals.proto\"" {
            i += 1;
            continue;
        }
        if trimmed == "source_code_info {" {
            // Comments and spans: how the file is written, not the wire.
            let indent = line.len() - line.trim_start().len();
            i = (i + 1..lines.len())
                .find(|&j| {
                    lines[j].trim() == "}" && lines[j].len() - lines[j].trim_start().len() == indent
                })
                .map_or(lines.len(), |end| end + 1);
            continue;
        }
        if trimmed == "field {" {
            let indent = line.len() - line.trim_start().len();
            let end = (i + 1..lines.len())
                .find(|&j| {
                    lines[j].trim() == "}" && lines[j].len() - lines[j].trim_start().len() == indent
                })
                .unwrap_or(lines.len() - 1);
            let block = &lines[i..=end];
            let number: u32 = block
                .iter()
                .find_map(|l| l.trim().strip_prefix("number: "))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let name = block
                .iter()
                .find_map(|l| l.trim().strip_prefix("name: "))
                .unwrap_or_default()
                .trim_matches('"');
            if number < 100 {
                let hand_checked = matches!(
                    (message.as_str(), name),
                    ("ThreadMcpStdioConfig", "command")
                        | ("ThreadMcpStreamableHttpConfig", "url")
                        | ("ThreadMcpHeader", "key")
                );
                out.extend(without_options(
                    block,
                    drop_hand_checked_rules && hand_checked,
                ));
            }
            i = end + 1;
            continue;
        }
        out.push(line.to_owned());
        i += 1;
    }
    out.join("\n")
}

/// `block`'s lines, its `options { … }` left out when `drop` is set.
fn without_options(block: &[&str], drop: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth_in_options = None;
    for line in block {
        let indent = line.len() - line.trim_start().len();
        match depth_in_options {
            Some(d) => {
                if line.trim() == "}" && indent == d {
                    depth_in_options = None;
                }
            }
            None if drop && line.trim() == "options {" => depth_in_options = Some(indent),
            None => out.push((*line).to_owned()),
        }
    }
    out
}

/// protoc's text form of the `companyhelm/runner/v1/runner.proto` file in
/// this crate's 0.7 descriptor set.
fn ours() -> String {
    let out = Path::new(env!("OUT_DIR")).join("v0.7");
    let protoc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../build-support/protoc");
    let set = std::fs::File::open(out.join("file_descriptor_set.bin")).expect("the descriptor set");
    let decoded = Command::new("sh")
        .arg(&protoc)
        .arg(format!(
            "--descriptor_set_in={}",
            out.join("buf_validate_descriptor_set.bin").display()
        ))
        .arg("--decode=google.protobuf.FileDescriptorSet")
        .arg("buf/validate/validate.proto")
        .stdin(set)
        .output()
        .expect("runs protoc");
    assert!(
        decoded.status.success(),
        "protoc --decode: {}",
        String::from_utf8_lossy(&decoded.stderr)
    );
    let text = String::from_utf8(decoded.stdout).expect("utf-8");
    // The set holds the imports too: keep the one file.
    let start = text
        .find("file {\n  name: \"companyhelm/runner/v1/runner.proto\"")
        .expect("runner.proto in the set");
    let end = text[start..]
        .find("\n}\n")
        .map_or(text.len(), |e| start + e + 3);
    text[start..end].to_owned()
}

#[test]
fn protocol_07_is_the_published_07_plus_our_extensions() {
    let published = include_str!("wire/v0.7.0.descriptor.txt");
    let ours = normalize(&ours(), false);
    let published = normalize(published, true);
    let (ours, published) = (ours.trim(), published.trim());
    if ours != published {
        let first = ours
            .lines()
            .zip(published.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        let near = |t: &str| {
            t.lines()
                .skip(first.saturating_sub(5))
                .take(12)
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "0.7 differs from the published 0.7.0 at line {first}:\nours:\n{}\npublished:\n{}",
            near(ours),
            near(published)
        );
    }
}

#[test]
fn the_comparison_sees_a_changed_number() {
    let published = include_str!("wire/v0.7.0.descriptor.txt");
    let changed = published.replacen("number: 8\n", "number: 18\n", 1);
    assert_ne!(normalize(&changed, true), normalize(published, true));
}
