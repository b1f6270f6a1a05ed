//! The permission rules: decision order, bash prefixes and compound
//! commands, path globs (symlinks resolved), MCP tool names, bad rules.

use super::*;
use serde_json::json;

fn policy(deny: &[&str], ask: &[&str], allow: &[&str], default: PermissionDecision) -> Permissions {
    let rules = |list: &[&str]| {
        list.iter()
            .map(|rule| PermissionRule {
                rule: rule.to_string(),
            })
            .collect()
    };
    Permissions::from_policy(&PermissionPolicy {
        deny: rules(deny),
        allow: rules(allow),
        ask: rules(ask),
        default_decision: default as i32,
        enabled: true,
    })
    .unwrap()
}

fn bash(command: &str) -> Value {
    json!({ "command": command })
}

#[test]
fn deny_beats_allow_and_ask() {
    let p = policy(
        &["Bash(rm:*)"],
        &["Bash"],
        &["Bash(rm:*)"],
        PermissionDecision::Allow,
    );
    assert_eq!(
        p.check("bash", &bash("rm -rf target")),
        (PermissionDecision::Deny, vec!["Bash(rm:*)".to_string()])
    );
    assert_eq!(p.check("Bash", &bash("ls")).0, PermissionDecision::Ask);
}

#[test]
fn ask_beats_allow_and_allow_beats_default() {
    let p = policy(
        &[],
        &["Write(src/**)"],
        &["Write", "Read"],
        PermissionDecision::Deny,
    );
    let (decision, rules) = p.check("write", &json!({"path": "src/a/b.rs"}));
    assert_eq!(decision, PermissionDecision::Ask);
    assert_eq!(rules, vec!["Write(src/**)"]);
    assert_eq!(
        p.check("write", &json!({"path": "README.md"})).0,
        PermissionDecision::Allow
    );
    assert_eq!(
        p.check("read", &json!({"path": "x"})).0,
        PermissionDecision::Allow
    );
    let (decision, rules) = p.check("edit", &json!({"path": "x"}));
    assert_eq!((decision, rules.len()), (PermissionDecision::Deny, 0));
}

#[test]
fn default_unknown_and_disabled_allow() {
    let p = policy(&[], &[], &[], PermissionDecision::Unknown);
    assert_eq!(
        p.check("bash", &bash("anything")).0,
        PermissionDecision::Allow
    );
    let p = policy(&[], &[], &[], PermissionDecision::Ask);
    assert_eq!(
        p.check("bash", &bash("anything")).0,
        PermissionDecision::Ask
    );
    let mut disabled = p.to_policy();
    disabled.enabled = false;
    disabled.deny.push(PermissionRule {
        rule: "Bash".into(),
    });
    let p = Permissions::from_policy(&disabled).unwrap();
    assert_eq!(
        p.check("bash", &bash("rm -rf /")).0,
        PermissionDecision::Allow
    );
}

#[test]
fn bash_prefix_and_glob_rules() {
    let p = policy(
        &[],
        &[],
        &["Bash(cargo:*)", "Bash(git log*)"],
        PermissionDecision::Deny,
    );
    let decide = |command: &str| p.check("bash", &bash(command)).0;
    assert_eq!(decide("cargo"), PermissionDecision::Allow);
    assert_eq!(decide("cargo test -p x"), PermissionDecision::Allow);
    assert_eq!(decide("cargofoo"), PermissionDecision::Deny);
    assert_eq!(
        decide("git log --oneline -- src/x"),
        PermissionDecision::Allow
    );
    assert_eq!(decide("git status"), PermissionDecision::Deny);
    // Every part of a compound command must be allowed.
    let (decision, rules) = p.check("bash", &bash("cargo build && git log"));
    assert_eq!(decision, PermissionDecision::Allow);
    assert_eq!(rules, vec!["Bash(cargo:*)", "Bash(git log*)"]);
    assert_eq!(decide("cargo build && rm -rf /"), PermissionDecision::Deny);
    assert_eq!(decide("cargo build $(rm -rf /)"), PermissionDecision::Deny);
    assert_eq!(decide("cargo build `rm x`"), PermissionDecision::Deny);
    assert_eq!(
        decide("cargo test 2>&1 | cargo fmt"),
        PermissionDecision::Allow
    );
    assert_eq!(decide("cargo test &> log & rm x"), PermissionDecision::Deny);
    // A deny rule matches any part.
    let p = policy(&["Bash(rm:*)"], &[], &[], PermissionDecision::Allow);
    assert_eq!(
        p.check("bash", &bash("ls; rm -rf /")).0,
        PermissionDecision::Deny
    );
}

#[test]
fn mcp_rules_match_tool_names() {
    let p = Permissions::from_policy(&PermissionPolicy {
        deny: vec![PermissionRule {
            rule: "mcp__docs__delete*".into(),
        }],
        ask: vec![PermissionRule {
            rule: "mcp__docs__*".into(),
        }],
        allow: vec![PermissionRule {
            rule: "mcp__*".into(),
        }],
        default_decision: PermissionDecision::Deny as i32,
        enabled: true,
    })
    .unwrap();
    assert_eq!(
        p.check("mcp__docs__delete_all", &json!({})).0,
        PermissionDecision::Deny
    );
    assert_eq!(
        p.check("mcp__docs__search", &json!({})).0,
        PermissionDecision::Ask
    );
    assert_eq!(
        p.check("mcp__other__x", &json!({})).0,
        PermissionDecision::Allow
    );
    assert_eq!(
        p.check("bash", &json!({"command": "ls"})).0,
        PermissionDecision::Deny
    );
    assert!(parse_rule("mcp__docs__x(y)").is_err());
}

#[test]
fn path_globs() {
    let p = policy(
        &["Read(secrets/**)"],
        &[],
        &["Read(src/**/*.rs)"],
        PermissionDecision::Ask,
    );
    let decide = |path: &str| p.check("read", &json!({ "path": path })).0;
    assert_eq!(decide("src/lib.rs"), PermissionDecision::Allow);
    assert_eq!(decide("./src/a/b/c.rs"), PermissionDecision::Allow);
    assert_eq!(decide("src/lib.md"), PermissionDecision::Ask);
    assert_eq!(decide("secrets/key"), PermissionDecision::Deny);
    assert_eq!(decide("src/../secrets/key"), PermissionDecision::Deny);
    let p = policy(&[], &[], &["Read(*.md)"], PermissionDecision::Deny);
    assert_eq!(
        p.check("read", &json!({"path": "README.md"})).0,
        PermissionDecision::Allow
    );
    assert_eq!(
        p.check("read", &json!({"path": "docs/a.md"})).0,
        PermissionDecision::Deny
    );
}

#[test]
fn check_in_resolves_absolute_paths_and_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("secrets")).unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("secrets/key"), "k").unwrap();
    std::os::unix::fs::symlink(ws.join("secrets"), ws.join("src/link")).unwrap();
    let p = policy(
        &["Read(secrets/**)"],
        &[],
        &["Read(src/**)"],
        PermissionDecision::Ask,
    );
    let abs = ws.join("secrets/key").display().to_string();
    assert_eq!(
        p.check_in(&ws, "read", &json!({ "path": abs })).0,
        PermissionDecision::Deny
    );
    assert_eq!(
        p.check_in(&ws, "read", &json!({"path": "src/link/key"})).0,
        PermissionDecision::Deny
    );
    let p = policy(&[], &[], &["Read(src/**)"], PermissionDecision::Ask);
    // Allowed as given, but resolves outside src/: allow needs both forms.
    assert_eq!(
        p.check_in(&ws, "read", &json!({"path": "src/link/key"})).0,
        PermissionDecision::Ask
    );
    assert_eq!(
        p.check("read", &json!({"path": "src/link/key"})).0,
        PermissionDecision::Allow
    );
}

#[test]
fn grep_and_glob_match_path_or_pattern() {
    let p = policy(
        &["Grep(secrets/**)", "Glob(**/*.pem)"],
        &[],
        &[],
        PermissionDecision::Allow,
    );
    assert_eq!(
        p.check("grep", &json!({"pattern": "key", "path": "secrets/x"}))
            .0,
        PermissionDecision::Deny
    );
    assert_eq!(
        p.check("grep", &json!({"pattern": "key"})).0,
        PermissionDecision::Allow
    );
    assert_eq!(
        p.check("glob", &json!({"pattern": "certs/a.pem"})).0,
        PermissionDecision::Deny
    );
}

#[test]
fn invalid_rules_are_rejected_naming_the_rule() {
    for rule in [
        "Bash(",
        "Frobnicate",
        "Bash()",
        "Todo(x)",
        "Read([)",
        "Bash(:*)",
    ] {
        let err = parse_rule(rule).unwrap_err();
        assert!(err.contains(&format!("{rule:?}")), "{rule}: {err}");
    }
    let bad = PermissionPolicy {
        allow: vec![PermissionRule {
            rule: "Nope(x)".into(),
        }],
        enabled: true,
        ..Default::default()
    };
    let err = Permissions::from_policy(&bad).unwrap_err();
    assert!(err.contains("allow rule \"Nope(x)\""), "{err}");
    let mut p = policy(&[], &[], &[], PermissionDecision::Allow);
    assert!(
        p.add_rule("maybe", "Bash")
            .unwrap_err()
            .contains("rule_type")
    );
    assert!(p.add_rule("deny", "Bash(").is_err());
}

#[test]
fn add_rule_and_round_trip() {
    let mut p = policy(&[], &[], &[], PermissionDecision::Ask);
    p.add_rule("Deny", "Bash(rm:*)").unwrap();
    p.add_rule("allow", "LS").unwrap();
    p.add_rule("allow", "LS").unwrap();
    assert_eq!(p.check("bash", &bash("rm x")).0, PermissionDecision::Deny);
    assert_eq!(p.check("ls", &json!({})).0, PermissionDecision::Allow);
    let wire = p.to_policy();
    assert_eq!(
        wire.deny,
        vec![PermissionRule {
            rule: "Bash(rm:*)".into()
        }]
    );
    assert_eq!(wire.allow.len(), 1);
    assert_eq!(wire.default_decision, PermissionDecision::Ask as i32);
    assert!(wire.enabled);
    let again = Permissions::from_policy(&wire).unwrap();
    assert_eq!(again.to_policy(), wire);
}
