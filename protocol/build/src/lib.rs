//! What both protocol crates' build scripts do, written once.
//!
//! Each `.proto` gets prost messages, tonic clients and servers, and
//! compile-time `buf.validate` checks (`prost-protovalidate-build`, no CEL on
//! the hot path). `buf/validate/validate.proto` is not copied into this
//! repository: it is resolved from the `prost-protovalidate-types` crate,
//! which ships its descriptor, and handed to protoc with
//! `--descriptor_set_in`. protoc itself is `build-support/protoc` (see
//! `.cargo/config.toml`): a system protoc, or the one `protoc-bin-vendored`
//! ships, so a fresh machine needs nothing installed.

use std::path::{Path, PathBuf};

use prost::Message;

/// One protocol crate's generation job.
pub struct Job<'a> {
    /// The `.proto` files, relative to the crate's manifest directory.
    pub protos: &'a [&'a str],
    /// The include roots the files' `import`s and packages are relative to,
    /// searched in order.
    pub include: &'a [&'a str],
    /// The folder inside `OUT_DIR` the generated files go to (`""` for
    /// `OUT_DIR` itself): a crate that generates two versions of one package
    /// gives each its own.
    pub out_subdir: &'a str,
    /// Packages (e.g. `.companyhelm.runner.v1`) that also get serde impls in
    /// the canonical protobuf JSON mapping (`pbjson-build`), written to
    /// `OUT_DIR/<package>.serde.rs`.
    pub json_packages: &'a [&'a str],
    /// Messages whose `Validate` impl the crate writes by hand (proto path,
    /// Rust path): the generator cannot cover a oneof of messages, and
    /// anything else it cannot cover fails the build instead of going
    /// unchecked.
    pub hand_validated: &'a [(&'a str, &'a str)],
}

/// Runs protoc, tonic, pbjson and the validate generator for `job`.
pub fn compile(job: &Job<'_>) -> Result<(), Box<dyn std::error::Error>> {
    for proto in job.protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?).join(job.out_subdir);
    std::fs::create_dir_all(&out_dir)?;
    let validate_set_path = write_validate_descriptors(&out_dir)?;

    let descriptor_path = out_dir.join("file_descriptor_set.bin");
    let mut config = prost_build::Config::new();
    config
        .protoc_arg(format!(
            "--descriptor_set_in={}",
            validate_set_path.display()
        ))
        .file_descriptor_set_path(&descriptor_path)
        .out_dir(&out_dir);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(&out_dir)
        .compile_with_config(config, job.protos, job.include)?;

    if !job.json_packages.is_empty() {
        pbjson_build::Builder::new()
            .register_descriptors(&std::fs::read(&descriptor_path)?)?
            .out_dir(&out_dir)
            .build(job.json_packages)?;
    }

    let validate = prost_protovalidate_build::Builder::new()
        .file_descriptor_set_path(&descriptor_path)?
        .out_dir(&out_dir)
        // Imported schemas are someone else's types: no impls for them here.
        .extern_path(".buf.validate", "::prost_protovalidate::types")
        .extern_path(".google.protobuf", "::prost_types");
    let validate = job
        .hand_validated
        .iter()
        .fold(validate, |b, (proto, rust)| b.extern_path(*proto, *rust));
    validate.fail_on_runtime_only(true).compile()?;
    let generated = out_dir.join("validate_impl.rs");
    let code = std::fs::read_to_string(&generated)?;
    std::fs::write(&generated, cheaper_min_len(&code))?;
    Ok(())
}

/// The generator writes `min_len: 1` as `s.chars().count() < 1usize`,
/// which walks every byte of the string; the runner validates each update
/// it sends, and counting the characters of its ids was 2 % of the
/// runner's CPU while updates stream. A string has fewer than
/// one character exactly when it is empty, so that check becomes
/// `s.is_empty()`: the same rule, the same violation, no walk. Other
/// lengths are left as generated.
fn cheaper_min_len(code: &str) -> String {
    code.replace(".chars().count() < 1usize", ".is_empty()")
}

/// `buf/validate/validate.proto`, as a descriptor set from the crate that
/// ships it.
fn write_validate_descriptors(out_dir: &Path) -> Result<PathBuf, Box<dyn std::error::Error>> {
    let set = prost_types::FileDescriptorSet {
        file: prost_protovalidate_types::DESCRIPTOR_POOL
            .file_descriptor_protos()
            .cloned()
            .collect(),
    };
    let path = out_dir.join("buf_validate_descriptor_set.bin");
    std::fs::write(&path, set.encode_to_vec())?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_min_len_one_becomes_an_emptiness_check() {
        let generated = "if self.thread_id.chars().count() < 1usize {}\n\
                         if (*_item).chars().count() < 1usize {}\n\
                         if self.name.chars().count() < 10usize {}\n\
                         if self.name.chars().count() > 1usize {}";
        assert_eq!(
            cheaper_min_len(generated),
            "if self.thread_id.is_empty() {}\n\
             if (*_item).is_empty() {}\n\
             if self.name.chars().count() < 10usize {}\n\
             if self.name.chars().count() > 1usize {}"
        );
    }
}
