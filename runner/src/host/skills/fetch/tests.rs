//! The runner's git for skill packages on real local repositories: the
//! size limit stops a fetch while it runs (and nothing is left of it), and
//! git itself refuses every transport but the admitted one.

use std::path::Path;
use std::process::Command;

use super::*;
use crate::host::skills::policy::SourcePolicy;
use crate::host::skills::{SkillSettings, install_package};

fn run_git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A repository at `dir` holding a skill and `bytes` of incompressible
/// data (a little xorshift generator: no compression shrinks it).
fn big_repository(dir: &Path, bytes: usize) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: big\ndescription: A big skill\n---\n",
    )
    .unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let blob: Vec<u8> = (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(dir.join("blob.bin"), blob).unwrap();
    run_git(dir, &["init", "-q"]);
    run_git(dir, &["add", "."]);
    run_git(dir, &["commit", "-qm", "big"]);
}

/// The served side has sent everything and then never finishes (its
/// `upload-pack` lingers), so git would wait for it until its time limit:
/// only measuring the directory while git runs can stop it, and does, once
/// the download is past the limit.
#[test]
fn the_size_limit_stops_a_running_fetch() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    big_repository(&repo, 1 << 20);
    let lingering = tmp.path().join("lingering-upload-pack");
    std::fs::write(
        &lingering,
        "#!/bin/sh\ngit upload-pack \"$@\"\nexec sleep 600\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &lingering,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let dest = tmp.path().join("dest");
    let how = GitFetch {
        transport: Transport::File,
        env: &[],
        max_bytes: 64 * 1024,
    };
    let url = format!("file://{}", repo.display());
    let upload_pack = format!("--upload-pack={}", lingering.display());
    let err = git(
        &[
            "clone",
            "--quiet",
            "--no-checkout",
            &upload_pack,
            "--",
            &url,
            &dest.to_string_lossy(),
        ],
        None,
        &how,
        Some((&dest, how.max_bytes)),
    )
    .unwrap_err();
    assert!(
        err.contains("larger than the limit of 65536 bytes"),
        "{err}"
    );
    assert!(err.contains("the fetch was stopped"), "{err}");
}

/// Installing a package larger than the limit fails naming the limit, and
/// the partial download is gone.
#[test]
fn a_too_large_package_is_refused_and_its_download_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let listed = tmp.path().join("listed");
    big_repository(&listed.join("repo"), 1 << 20);
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let settings = SkillSettings {
        sources: SourcePolicy {
            local_dirs: vec![listed.canonicalize().unwrap()],
            ..SourcePolicy::default()
        },
        ..SkillSettings::with_max_bytes(64 * 1024)
    };
    let package = format!("file://{}/repo#main", listed.display());
    let err = install_package(&home, &package, &settings, &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("larger than the limit of 65536 bytes"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(home.join(".agents"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Within the limit it installs.
    let roomy = SkillSettings {
        max_bytes: 8 << 20,
        ..settings
    };
    let installed = install_package(&home, &package, &roomy, &[]).unwrap();
    assert_eq!(installed[0].name, "big");
}

/// Whatever the URL says, git uses only the admitted transport: not
/// `file` when https was admitted, never `ext::` (which runs a command).
#[test]
fn git_refuses_every_transport_but_the_admitted_one() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    big_repository(&repo, 16);
    let https = GitFetch {
        transport: Transport::Https,
        env: &[],
        max_bytes: 1 << 20,
    };
    let dest = tmp.path().join("dest");
    let url = format!("file://{}", repo.display());
    let err = fetch_git(&url, None, "", &dest, &https)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("transport 'file' not allowed"), "{err}");
    let marker = tmp.path().join("ran");
    let ext = format!("ext::touch {}", marker.display());
    let file = GitFetch {
        transport: Transport::File,
        ..https
    };
    assert!(fetch_git(&ext, None, "", &tmp.path().join("dest2"), &file).is_err());
    assert!(!marker.exists());
}
