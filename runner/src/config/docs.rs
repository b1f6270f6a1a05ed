//! docs/configuration.md's table of settings, generated from their
//! definitions ([`definitions`]): one table per section, a row per setting
//! with its flag, variable, TOML key, default and meaning.
//!
//! The table lives between two markers in the file; the prose around it is
//! written by hand and left alone. A test fails when the committed table is
//! stale; `UPDATE_DOCS=1 cargo test -p agent-runner --lib config::docs`
//! rewrites it.

use super::defs::{Definition, definitions};

/// How the generated block starts (the rest of its line says how to refresh it).
pub const BEGIN: &str = "<!-- generated:";
/// How the generated block ends.
pub const END: &str = "<!-- end generated -->";

/// The first line of the block.
const BEGIN_LINE: &str = "<!-- generated: from the flags' definitions in runner/src/config; do not edit by hand, refresh with `UPDATE_DOCS=1 cargo test -p agent-runner --lib config::docs` -->";

/// What a new file starts with.
const INTRO: &str = "# Configuration\n\nEvery setting of `agent-runner run` can be given as a flag, an\n`AGENT_RUNNER_*` environment variable, or a key of the optional TOML file\nnamed by `--config`; precedence is flag > environment variable > config\nfile > default.\n\n## Every setting\n\n";

/// The tables, one per section (`### Connection` …), in `--help` order.
pub fn markdown() -> String {
    let defs = definitions();
    let mut headings: Vec<&str> = Vec::new();
    for d in &defs {
        if !headings.contains(&d.heading.as_str()) {
            headings.push(&d.heading);
        }
    }
    let mut out = String::new();
    for heading in headings {
        out.push_str(&format!(
            "### {heading}\n\n| flag | env | TOML key | default | meaning |\n|---|---|---|---|---|\n"
        ));
        for d in defs.iter().filter(|d| d.heading == heading) {
            out.push_str(&row(d));
        }
        out.push('\n');
    }
    out
}

fn row(d: &Definition) -> String {
    let (repeatable, separated) = if d.list {
        (" (repeatable)", " (comma-separated)")
    } else {
        ("", "")
    };
    let key = match d.toml_key() {
        Some(key) if d.list => format!("`{key} = [..]`"),
        Some(key) => format!("`{key}`"),
        None => "—".to_owned(),
    };
    format!(
        "| {} | {} | {} | {} | {} |\n",
        cell(&format!("`--{} {}`{repeatable}", d.long, d.value_name)),
        cell(&format!("`{}`{separated}", d.env)),
        key,
        cell(d.default.as_deref().unwrap_or("none")),
        cell(&d.help),
    )
}

/// A table cell: `|` escaped (even inside backticks, for GitHub).
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `text` with its generated block replaced by `table` (prose before and
/// after kept as it is); a file without a block gets one at its end, an
/// empty one the intro first.
pub fn with_generated(text: &str, table: &str) -> String {
    let block = format!("{BEGIN_LINE}\n\n{table}{END}");
    let begin = text.find(BEGIN);
    let end = text.find(END);
    match (begin, end) {
        (Some(begin), Some(end)) if begin < end => {
            format!("{}{block}{}", &text[..begin], &text[end + END.len()..])
        }
        _ if text.trim().is_empty() => format!("{INTRO}{block}\n"),
        _ => format!("{}\n\n## Every setting\n\n{block}\n", text.trim_end()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_is_replaced_and_the_prose_kept() {
        let text = format!("# T\n\nbefore\n\n{BEGIN} old -->\n\nold\n{END}\n\nafter\n");
        let out = with_generated(&text, "new\n");
        assert_eq!(
            out,
            format!("# T\n\nbefore\n\n{BEGIN_LINE}\n\nnew\n{END}\n\nafter\n")
        );
        assert_eq!(with_generated(&out, "new\n"), out);
        let fresh = with_generated("", "t\n");
        assert!(fresh.starts_with("# Configuration\n"), "{fresh}");
        assert!(fresh.ends_with(&format!("t\n{END}\n")), "{fresh}");
        let appended = with_generated("# Mine\n\nprose\n", "t\n");
        assert!(appended.starts_with("# Mine\n\nprose\n\n## Every setting\n\n<!-- generated:"));
    }

    #[test]
    fn every_setting_has_a_row_under_its_section() {
        let md = markdown();
        assert!(md.starts_with("### Connection\n"), "{md}");
        for d in definitions() {
            assert!(md.contains(&format!("`--{} ", d.long)), "{}", d.key);
            assert!(md.contains(&format!("`{}`", d.env)), "{}", d.env);
        }
        assert!(md.contains(
            "| `--drain-timeout DUR` | `AGENT_RUNNER_DRAIN_TIMEOUT` | `drain_timeout` | `30s` |"
        ));
        assert!(md.contains(
            "| `--sdk NAME` (repeatable) | `AGENT_RUNNER_SDK` (comma-separated) | `sdk = [..]` |"
        ));
        assert!(md.contains("| `--config FILE` | `AGENT_RUNNER_CONFIG` | — |"));
    }

    /// The committed docs/configuration.md holds the table the definitions
    /// give. `UPDATE_DOCS=1` rewrites it instead of failing.
    #[test]
    fn configuration_md_is_up_to_date() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let expected = with_generated(&text, &markdown());
        if text == expected {
            return;
        }
        if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
            std::fs::write(&path, expected).unwrap();
            return;
        }
        panic!(
            "docs/configuration.md is stale: the settings' definitions (runner/src/config) changed. \
             Refresh it with `UPDATE_DOCS=1 cargo test -p agent-runner --lib config::docs` and commit it."
        );
    }
}
