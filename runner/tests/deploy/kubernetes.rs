//! `deploy/kubernetes/` and `deploy/systemd/`: schema validation offline
//! (`validate.sh`, kubernetes-validate against Kubernetes 1.31), and the
//! manifests cross-checked against the runner and the image.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_yaml::Value;

use crate::dockerfile::{image_user, image_volumes};
use crate::support::*;

/// After the drain timeout: interrupted turns get up to 10 s
/// (`runtime::INTERRUPT_GRACE`), the outbox 5 s to flush and the channel 5 s
/// to close (`runner::FLUSH_TIMEOUT`, twice).
const AFTER_DRAIN: Duration = Duration::from_secs(20);

fn k8s_dir() -> PathBuf {
    deploy_dir().join("kubernetes")
}

fn manifest(name: &str) -> Value {
    yaml(&k8s_dir().join(name))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v:?}"))
}

#[test]
fn every_manifest_validates_against_kubernetes_1_31() {
    let script = k8s_dir().join("validate.sh");
    let out = Command::new("bash")
        .arg(&script)
        .env(
            "CARGO_TARGET_DIR",
            std::env::var("CARGO_TARGET_DIR")
                .unwrap_or_else(|_| repo_root().join("target").display().to_string()),
        )
        .output()
        .expect("run validate.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(77) {
        skip(&format!("manifest validation: {}", text.trim()));
        return;
    }
    assert!(out.status.success(), "validate.sh failed:\n{text}");
    // Every manifest was looked at.
    for entry in std::fs::read_dir(k8s_dir()).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            assert!(
                text.contains(&format!("{name} passed")),
                "{name} not validated:\n{text}"
            );
        }
    }
}

#[test]
fn kustomization_lists_files_that_exist_and_builds() {
    let k = manifest("kustomization.yaml");
    let resources = k["resources"].as_sequence().expect("resources");
    assert!(resources.len() >= 7);
    for r in resources {
        let name = str_of(r, "resource");
        assert!(
            k8s_dir().join(name).exists(),
            "{name} is listed but missing"
        );
    }
    // The optional HPA is still a real file (validated above).
    assert!(k8s_dir().join("hpa.yaml").exists());
    if !have("kubectl") {
        skip("kubectl not found: kustomization not built");
        return;
    }
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(k8s_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built = String::from_utf8_lossy(&out.stdout);
    for kind in [
        "kind: Namespace",
        "kind: ServiceAccount",
        "kind: ConfigMap",
        "kind: Secret",
        "kind: Service",
        "kind: StatefulSet",
        "kind: PodDisruptionBudget",
    ] {
        assert!(built.contains(kind), "{kind} missing from the build");
    }
}

fn env_value(container: &Value, name: &str) -> Option<String> {
    container["env"]
        .as_sequence()?
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

/// The name of the volume mounted at `path` in `container`.
fn mount_of(container: &Value, path: &str) -> String {
    container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(path))
        .and_then(|m| m["name"].as_str())
        .unwrap_or_else(|| panic!("nothing mounted at {path}"))
        .to_owned()
}

/// Every variable set is a real setting, but the pod's own name (from the
/// downward API, for the secret file's path); so is every ConfigMap key.
fn check_env_is_runner_settings(c: &Value) {
    let settings = run_env_names();
    for e in c["env"].as_sequence().expect("env") {
        let name = str_of(&e["name"], "env name");
        if name == "POD_NAME" {
            assert_eq!(e["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
            continue;
        }
        assert!(settings.contains(name), "{name} is not a runner setting");
    }
    let config = manifest("configmap.yaml");
    for (k, _) in config["data"].as_mapping().expect("data") {
        let k = str_of(k, "key");
        assert!(
            settings.contains(k),
            "configmap: {k} is not a runner setting"
        );
    }
    assert_eq!(
        c["envFrom"][0]["configMapRef"]["name"],
        config["metadata"]["name"]
    );
}

/// Health on all interfaces, on the named port the probes use.
fn check_health_port_and_probes(c: &Value) {
    let health = env_value(c, "AGENT_RUNNER_HEALTH_ADDR").expect("AGENT_RUNNER_HEALTH_ADDR");
    let (host, port) = health.rsplit_once(':').unwrap();
    assert_eq!(
        host, "0.0.0.0",
        "probes come from the kubelet, not loopback"
    );
    let port: u64 = port.parse().unwrap();
    let ports = c["ports"].as_sequence().expect("ports");
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["containerPort"].as_u64(), Some(port));
    for (probe, path) in [
        ("livenessProbe", "/livez"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/livez"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(c[probe]["httpGet"]["port"], "metrics", "{probe}");
    }
}

/// The grace period outlasts the whole drain.
fn check_grace_outlasts_drain(pod: &Value, c: &Value) {
    let drain = env_value(c, "AGENT_RUNNER_DRAIN_TIMEOUT").expect("drain timeout set");
    let drain = humantime::parse_duration(&drain).unwrap();
    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("grace");
    assert!(
        Duration::from_secs(grace) > drain + AFTER_DRAIN,
        "terminationGracePeriodSeconds {grace} must exceed the drain {drain:?} + {AFTER_DRAIN:?}"
    );
}

/// Non-root as the image's user, read-only root, nothing to escalate.
fn check_hardening(pod: &Value, c: &Value) {
    let (uid, gid) = image_user();
    for sc in [&pod["securityContext"], &c["securityContext"]] {
        assert_eq!(sc["runAsNonRoot"].as_bool(), Some(true));
        assert_eq!(sc["runAsUser"].as_u64(), Some(u64::from(uid)));
        assert_eq!(sc["runAsGroup"].as_u64(), Some(u64::from(gid)));
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    }
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["capabilities"]["drop"][0], "ALL");
    assert!(sc["capabilities"]["add"].is_null());
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());
}

/// No API access.
fn check_no_api_access(pod: &Value) {
    assert_eq!(pod["automountServiceAccountToken"].as_bool(), Some(false));
    let sa = manifest("serviceaccount.yaml");
    assert_eq!(sa["automountServiceAccountToken"].as_bool(), Some(false));
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    for entry in std::fs::read_dir(k8s_dir()).unwrap().flatten() {
        let text = read(&entry.path());
        assert!(
            !text.contains("kind: Role") && !text.contains("kind: ClusterRole"),
            "{}: no RBAC",
            entry.path().display()
        );
    }
}

/// The state and workspaces volumes are the image's, per-pod claims.
fn check_volumes_are_per_pod_claims(sts: &Value, c: &Value) {
    let claims: Vec<&str> = sts["spec"]["volumeClaimTemplates"]
        .as_sequence()
        .expect("volumeClaimTemplates")
        .iter()
        .filter_map(|t| t["metadata"]["name"].as_str())
        .collect();
    for (path, env) in image_volumes()
        .iter()
        .zip(["AGENT_RUNNER_STATE_DIR", "AGENT_RUNNER_WORKSPACE_ROOT"])
    {
        assert!(
            claims.contains(&mount_of(c, path).as_str()),
            "{path}: a per-pod claim"
        );
        assert_eq!(env_value(c, env).as_deref(), Some(path.as_str()));
    }
}

/// The secret file the runner reads sits in the mounted Secret: each
/// replica its own, the key named after its pod.
fn check_secret_per_replica(sts: &Value, pod: &Value, c: &Value) {
    let secret_file = env_value(c, "AGENT_RUNNER_SECRET_FILE").expect("secret file");
    let (dir, key) = secret_file.rsplit_once('/').unwrap();
    assert_eq!(key, "$(POD_NAME)", "one secret per replica, by pod name");
    let volume = mount_of(c, dir);
    let secret_name = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str() == Some(volume.as_str()))
        .and_then(|v| v["secret"]["secretName"].as_str())
        .expect("a secret volume")
        .to_owned();
    let secret = manifest("secret.yaml");
    assert_eq!(str_of(&secret["metadata"]["name"], "secret"), secret_name);
    let sts_name = str_of(&sts["metadata"]["name"], "name");
    for ordinal in 0..sts["spec"]["replicas"].as_u64().expect("replicas") {
        let key = format!("{sts_name}-{ordinal}");
        assert!(
            secret["stringData"][key.as_str()].is_string(),
            "secret key {key}"
        );
    }
    assert!(
        secret["stringData"]["github-app-private-key.pem"].is_string(),
        "the GitHub App key is in the Secret"
    );
}

/// Disruptions one at a time; metrics port named for a ServiceMonitor.
fn check_pdb_and_service_select_the_pods(sts: &Value) {
    let pod_labels = &sts["spec"]["template"]["metadata"]["labels"];
    let pdb = manifest("poddisruptionbudget.yaml");
    for (k, v) in pdb["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
        assert_eq!(&pod_labels[k], v, "PDB selects the pods");
    }
    let svc = manifest("service.yaml");
    assert_eq!(sts["spec"]["serviceName"], svc["metadata"]["name"]);
    assert_eq!(svc["spec"]["ports"][0]["name"], "metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
    for (k, v) in svc["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(&pod_labels[k], v, "Service selects the pods");
    }
}

#[test]
fn statefulset_fits_the_runner_and_the_image() {
    let sts = manifest("statefulset.yaml");
    let pod = &sts["spec"]["template"]["spec"];
    let containers = pod["containers"].as_sequence().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];

    check_env_is_runner_settings(c);
    check_health_port_and_probes(c);
    check_grace_outlasts_drain(pod, c);
    check_hardening(pod, c);
    check_no_api_access(pod);
    check_volumes_are_per_pod_claims(&sts, c);
    check_secret_per_replica(&sts, pod, c);
    check_pdb_and_service_select_the_pods(&sts);
}

#[test]
fn hpa_scales_the_statefulset_on_a_metric_the_runner_exports() {
    let hpa = manifest("hpa.yaml");
    assert_eq!(hpa["apiVersion"], "autoscaling/v2");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["kind"], "StatefulSet");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        manifest("statefulset.yaml")["metadata"]["name"]
    );
    let metric = &hpa["spec"]["metrics"][0];
    assert_eq!(metric["type"], "Pods");
    let name = str_of(&metric["pods"]["metric"]["name"], "metric name");
    let exported = name
        .strip_prefix("agent_runner_")
        .expect("an agent_runner_ metric");
    let catalogue = "runner/src/observe/metrics/catalogue.rs";
    let source = read(&repo_root().join(catalogue));
    assert!(
        source.contains(&format!("\"{exported}\"")),
        "{name} is not registered in {catalogue}"
    );
}

#[test]
fn systemd_unit_sets_real_settings_and_verifies() {
    let path = deploy_dir().join("systemd/agent-runner.service");
    let unit = read(&path);
    let settings = run_env_names();
    for line in unit
        .lines()
        .filter(|l| l.starts_with("Environment=AGENT_RUNNER_"))
    {
        let (name, _) = line["Environment=".len()..].split_once('=').unwrap();
        assert!(settings.contains(name), "{name} is not a runner setting");
    }
    // No setting names the EnvironmentFile: the unit hides it from agents.
    let protected: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("Environment=AGENT_RUNNER_SANDBOX_PROTECT="))
        .flat_map(|v| v.split(','))
        .collect();
    for file in unit
        .lines()
        .filter_map(|l| l.strip_prefix("EnvironmentFile="))
    {
        let file = std::path::Path::new(file.trim_start_matches('-'));
        assert!(
            protected.iter().any(|p| file.starts_with(p)),
            "{} is not in AGENT_RUNNER_SANDBOX_PROTECT",
            file.display()
        );
    }
    let stop: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.parse().ok())
        .expect("TimeoutStopSec");
    let drain = unit
        .lines()
        .find_map(|l| l.strip_prefix("Environment=AGENT_RUNNER_DRAIN_TIMEOUT="))
        .map(|v| humantime::parse_duration(v).unwrap())
        .expect("drain timeout");
    assert!(Duration::from_secs(stop) > drain + AFTER_DRAIN);
    assert!(unit.contains("KillSignal=SIGTERM"));
    // Resource and /proc hardening; per-thread cgroups need the
    // delegated subtree writable, so no ProtectControlGroups.
    for setting in [
        "MemoryMax=",
        "TasksMax=",
        "LimitCORE=0",
        "ProtectProc=invisible",
        "Delegate=yes",
        "NoNewPrivileges=yes",
    ] {
        assert!(
            unit.lines().any(|l| l.starts_with(setting)),
            "{setting} missing from the unit"
        );
    }
    assert!(
        !unit.contains("ProtectControlGroups=yes"),
        "conflicts with Delegate=yes"
    );
    if !have("systemd-analyze") {
        skip("systemd-analyze not found: unit syntax not verified");
        return;
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let problems: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&out.stdout).lines())
        // The binary is not installed on a test machine.
        .filter(|l| !l.contains("/usr/local/bin/agent-runner is not executable"))
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}
