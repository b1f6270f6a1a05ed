//! Matching received messages against what a scenario expects, on their
//! canonical JSON: a recursive subset match that names each mismatch, a
//! dotted-path lookup for captures, and `${var}` substitution.
//!
//! Subset rules: every key of an expected object must match in the actual
//! object (extra actual keys are fine); arrays must have the same length and
//! match element-wise; scalars must be equal, where a number and a string
//! holding the same number are equal (int64 fields are strings in protobuf
//! JSON). Protobuf JSON omits default values, so an expected `false`, `0`,
//! `"0"`, `""`, `[]` or `null` also matches an absent key.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Result, bail};
use serde_json::Value;

/// One place where the actual value differs from the expected subset.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// Dotted path, e.g. `turnUpdate.status` or `agentSdks.0.name`.
    pub path: String,
    /// The pattern that was looked for.
    pub expected: Value,
    /// `None`: the key is absent.
    pub actual: Option<Value>,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(top)"
        } else {
            &self.path
        };
        match &self.actual {
            Some(actual) => write!(f, "{path}: expected {}, got {actual}", self.expected),
            None => write!(f, "{path}: expected {}, but it is absent", self.expected),
        }
    }
}

/// Whether `expected` is a subset of `actual`.
pub fn is_subset(expected: &Value, actual: &Value) -> bool {
    mismatches(expected, actual).is_empty()
}

/// Every mismatch between `expected` (a subset) and `actual`.
pub fn mismatches(expected: &Value, actual: &Value) -> Vec<Mismatch> {
    let mut out = Vec::new();
    compare("", expected, actual, &mut out);
    out
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// What protobuf JSON leaves out: a field with this value may be absent.
fn is_default(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty() || s == "0",
        Value::Array(a) => a.is_empty(),
        Value::Object(_) => false,
    }
}

fn scalars_equal(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n)) => {
            s.parse::<f64>().ok().is_some_and(|v| Some(v) == n.as_f64())
        }
        _ => expected == actual,
    }
}

fn compare(path: &str, expected: &Value, actual: &Value, out: &mut Vec<Mismatch>) {
    match (expected, actual) {
        (Value::Object(want), Value::Object(have)) => {
            for (key, want_value) in want {
                let at = join(path, key);
                match have.get(key) {
                    Some(have_value) => compare(&at, want_value, have_value, out),
                    None if is_default(want_value) => {}
                    None => out.push(Mismatch {
                        path: at,
                        expected: want_value.clone(),
                        actual: None,
                    }),
                }
            }
        }
        (Value::Array(want), Value::Array(have)) if want.len() == have.len() => {
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                compare(&join(path, &i.to_string()), w, h, out);
            }
        }
        _ if scalars_equal(expected, actual) => {}
        _ => out.push(Mismatch {
            path: path.to_owned(),
            expected: expected.clone(),
            actual: Some(actual.clone()),
        }),
    }
}

/// The value at a dotted `path` (`threadUpdate.threadId`, `agentSdks.0.name`).
pub fn lookup<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .filter(|segment| !segment.is_empty())
        .try_fold(value, |current, segment| match current {
            Value::Object(map) => map.get(segment),
            Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
}

/// A captured value as text: strings as they are, anything else as JSON.
pub fn as_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Replaces `${name}` in every string (values and object keys) of `value`
/// with `vars[name]`; `$${` stands for a literal `${`. An unknown name is an
/// error.
pub fn substitute(value: &Value, vars: &BTreeMap<String, String>) -> Result<Value> {
    Ok(match value {
        Value::String(s) => Value::String(substitute_str(s, vars)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| substitute(v, vars))
                .collect::<Result<_>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((substitute_str(k, vars)?, substitute(v, vars)?)))
                .collect::<Result<_>>()?,
        ),
        other => other.clone(),
    })
}

/// [`substitute`] for one string.
pub fn substitute_str(text: &str, vars: &BTreeMap<String, String>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let Some(end) = after.find('}') else {
                bail!("unterminated ${{ in {text:?}");
            };
            let name = &after[..end];
            match vars.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    let known: Vec<&str> = vars.keys().map(String::as_str).collect();
                    bail!("unknown variable ${{{name}}} in {text:?} (known: {known:?})");
                }
            }
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn subset_match_is_recursive_and_ignores_extra_keys() {
        let actual = json!({
            "requestId": "r1",
            "agentUpdate": {"agentId": "a1", "status": "AGENT_STATUS_READY"}
        });
        assert!(is_subset(&json!({}), &actual));
        assert!(is_subset(&json!({"agentUpdate": {}}), &actual));
        assert!(is_subset(
            &json!({"requestId": "r1", "agentUpdate": {"status": "AGENT_STATUS_READY"}}),
            &actual
        ));
        assert!(!is_subset(&json!({"threadUpdate": {}}), &actual));
        assert_eq!(
            mismatches(
                &json!({"requestId": "r2", "agentUpdate": {"status": "AGENT_STATUS_DELETED"}}),
                &actual
            ),
            vec![
                Mismatch {
                    path: "agentUpdate.status".into(),
                    expected: json!("AGENT_STATUS_DELETED"),
                    actual: Some(json!("AGENT_STATUS_READY")),
                },
                Mismatch {
                    path: "requestId".into(),
                    expected: json!("r2"),
                    actual: Some(json!("r1")),
                },
            ]
        );
    }

    #[test]
    fn defaults_match_absent_keys_and_numbers_match_int64_strings() {
        let actual = json!({"usage": {"inputTokens": "5"}});
        assert!(is_subset(&json!({"usage": {"inputTokens": 5}}), &actual));
        assert!(is_subset(&json!({"usage": {"inputTokens": "5"}}), &actual));
        assert!(is_subset(
            &json!({"usage": {"outputTokens": 0, "flag": false, "s": "", "l": []}}),
            &actual
        ));
        assert!(!is_subset(&json!({"usage": {"outputTokens": 1}}), &actual));
        let absent = mismatches(&json!({"requestId": "r"}), &json!({}));
        assert_eq!(absent[0].actual, None);
        assert!(absent[0].to_string().contains("absent"));
    }

    #[test]
    fn arrays_match_element_wise() {
        let actual = json!({"sdks": [{"name": "a", "x": 1}, {"name": "b"}]});
        assert!(is_subset(
            &json!({"sdks": [{"name": "a"}, {"name": "b"}]}),
            &actual
        ));
        assert!(!is_subset(&json!({"sdks": [{"name": "a"}]}), &actual));
        assert!(!is_subset(
            &json!({"sdks": [{"name": "b"}, {"name": "a"}]}),
            &actual
        ));
    }

    #[test]
    fn lookup_follows_dotted_paths() {
        let v = json!({"threadUpdate": {"threadId": "t-9"}, "list": [{"n": 1}]});
        assert_eq!(lookup(&v, "threadUpdate.threadId"), Some(&json!("t-9")));
        assert_eq!(lookup(&v, "list.0.n"), Some(&json!(1)));
        assert_eq!(lookup(&v, "list.1.n"), None);
        assert_eq!(lookup(&v, "nope"), None);
        assert_eq!(as_text(&json!("t")), "t");
        assert_eq!(as_text(&json!(3)), "3");
    }

    #[test]
    fn substitution_replaces_variables_everywhere() {
        let vars = BTreeMap::from([("thread".to_owned(), "t-9".to_owned())]);
        let out = substitute(
            &json!({"x": {"threadId": "${thread}", "text": "in ${thread}!", "n": 1, "a": ["${thread}"]}}),
            &vars,
        )
        .expect("substitutes");
        assert_eq!(
            out,
            json!({"x": {"threadId": "t-9", "text": "in t-9!", "n": 1, "a": ["t-9"]}})
        );
        assert_eq!(
            substitute_str("$${thread} $5 $", &vars).expect("ok"),
            "${thread} $5 $"
        );
        let err = substitute_str("${nope}", &vars).expect_err("unknown");
        assert!(err.to_string().contains("nope"));
        assert!(substitute_str("${thread", &vars).is_err());
    }
}
