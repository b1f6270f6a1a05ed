//! The scripted language's parser (docs/protocol.md, "The scripted language"): a message's text becomes the
//! list of steps a turn runs, one per non-blank line.
//!
//! Parsing is kept apart from running so the rules can be read (and tested)
//! in one place. A line that looks like a step but is malformed (for example
//! `sleep soon`) is not rejected up front: it becomes an error at its place in
//! the list, and the turn fails only when it reaches that line, after the
//! steps before it ran.
//!
//! Rules:
//! - Lines are split on `\n`; one trailing `\r` is removed. A line that is
//!   empty or only whitespace is no step at all.
//! - A keyword is recognised only at the very start of the line, in lower
//!   case, followed by one ASCII space and a non-blank argument: `say hi` is a
//!   step, while `say`, `say   `, ` say hi` and `Say hi` are "anything else"
//!   and are echoed (`echo: say`).
//! - Text arguments (`say`, `think`, `run`, `approve`, `ask`, `fail`, `name`) are the rest of the line
//!   after that one space, verbatim.
//! - One keyword takes no argument: a line that is exactly `instructions`
//!   is that step (the thread's additional model instructions, said back).
//! - `mcp SERVER TOOL [JSON]`: SERVER and TOOL are the next two
//!   whitespace-separated words; the rest of the line, if any, is the
//!   tool's arguments as one JSON object (none: `{}`). Fewer than two words,
//!   or a rest that is not a JSON object, is an error naming the line.
//! - Number arguments (`sleep`, `usage`) are whitespace-separated decimal
//!   integers; a wrong count or a value that is not a non-negative integer
//!   is an error naming the line.

use std::fmt;
use std::time::Duration;

/// One step of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `say TEXT`: an agent message.
    Say(String),
    /// `think TEXT`: a reasoning item.
    Think(String),
    /// `run COMMAND`: `sh -c COMMAND` in the thread's workspace.
    Run(String),
    /// `sleep MS`: wait (an interrupt cuts it short).
    Sleep(Duration),
    /// `usage INPUT OUTPUT`: report token usage.
    Usage { input: i64, output: i64 },
    /// `fail TEXT`: end the turn as failed with TEXT.
    Fail(String),
    /// `name TEXT`: the "model" names the thread TEXT (a thread name event).
    Name(String),
    /// `instructions`: an agent message holding the thread's additional
    /// model instructions (`(no instructions)` when it has none), so a
    /// harness can see what every turn of the thread is given.
    Instructions,
    /// `mcp SERVER TOOL JSON`: call TOOL of the thread's MCP server SERVER
    /// with the JSON object as arguments; an `McpToolCall` item reports the
    /// result or the error.
    Mcp {
        /// The server's name in the thread's `mcp_servers`.
        server: String,
        /// The tool's name on that server.
        tool: String,
        /// The arguments (a JSON object).
        arguments: serde_json::Value,
    },
    /// `approve COMMAND`: ask for approval to run COMMAND (a command
    /// execution request); run it as `run` does if approved, else a command
    /// item whose output is `[denied]`.
    Approve(String),
    /// `ask TEXT`: ask the user TEXT (a question); the answer becomes an
    /// agent message (`(no answer)` when none came).
    Ask(String),
    /// Any other line: an agent message `echo: ` + the line.
    Echo(String),
}

/// A line that names a step but cannot be run as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// 1-based, counting every line of the message (blank ones too).
    pub line: usize,
    /// The line as written (without a trailing `\r`).
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {} (`{}`): {}", self.line, self.text, self.reason)
    }
}

impl std::error::Error for ScriptError {}

/// Parse a whole message into its steps, in order. Blank lines are skipped;
/// malformed lines stay in place as errors (see the module docs).
pub fn parse(script: &str) -> Vec<Result<Step, ScriptError>> {
    // Room for every line at once: grown from empty, a long script's
    // steps were copied a dozen times over.
    let mut steps = Vec::with_capacity(script.bytes().filter(|&b| b == b'\n').count() + 1);
    steps.extend(script.split('\n').enumerate().filter_map(|(index, raw)| {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        parse_line(line).map(|parsed| {
            parsed.map_err(|reason| ScriptError {
                line: index + 1,
                text: line.to_owned(),
                reason,
            })
        })
    }));
    steps
}

/// Parse one line (already without its `\r`). `None` for a blank line.
fn parse_line(line: &str) -> Option<Result<Step, String>> {
    if line.trim().is_empty() {
        return None;
    }
    if line == "instructions" {
        return Some(Ok(Step::Instructions));
    }
    let Some((keyword, arg)) = line.split_once(' ') else {
        return Some(Ok(Step::Echo(line.to_owned())));
    };
    if arg.trim().is_empty() {
        return Some(Ok(Step::Echo(line.to_owned())));
    }
    let step = match keyword {
        "say" => Ok(Step::Say(arg.to_owned())),
        "think" => Ok(Step::Think(arg.to_owned())),
        "run" => Ok(Step::Run(arg.to_owned())),
        "approve" => Ok(Step::Approve(arg.to_owned())),
        "ask" => Ok(Step::Ask(arg.to_owned())),
        "fail" => Ok(Step::Fail(arg.to_owned())),
        "name" => Ok(Step::Name(arg.to_owned())),
        "sleep" => parse_sleep(arg),
        "usage" => parse_usage(arg),
        "mcp" => parse_mcp(arg),
        _ => Ok(Step::Echo(line.to_owned())),
    };
    Some(step)
}

fn parse_sleep(arg: &str) -> Result<Step, String> {
    match numbers(arg)?.as_slice() {
        &[ms] => Ok(Step::Sleep(Duration::from_millis(ms))),
        _ => Err("`sleep` takes exactly one number: milliseconds".to_owned()),
    }
}

fn parse_usage(arg: &str) -> Result<Step, String> {
    match numbers(arg)?.as_slice() {
        &[input, output] => {
            let too_large = || "`usage` token counts are too large".to_owned();
            let input = i64::try_from(input).map_err(|_| too_large())?;
            let output = i64::try_from(output).map_err(|_| too_large())?;
            input.checked_add(output).ok_or_else(too_large)?;
            Ok(Step::Usage { input, output })
        }
        _ => Err("`usage` takes exactly two numbers: input and output tokens".to_owned()),
    }
}

fn parse_mcp(arg: &str) -> Result<Step, String> {
    let usage = "`mcp` takes SERVER TOOL and an optional JSON object of arguments";
    let mut words = arg.trim_start().splitn(2, char::is_whitespace);
    let server = words.next().filter(|w| !w.is_empty()).ok_or(usage)?;
    let rest = words.next().unwrap_or("").trim_start();
    let mut words = rest.splitn(2, char::is_whitespace);
    let tool = words.next().filter(|w| !w.is_empty()).ok_or(usage)?;
    let json = words.next().unwrap_or("").trim();
    let arguments = if json.is_empty() {
        serde_json::Value::Object(serde_json::Map::new())
    } else {
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(v @ serde_json::Value::Object(_)) => v,
            Ok(_) => return Err("`mcp` arguments must be a JSON object".to_owned()),
            Err(e) => return Err(format!("`mcp` arguments are not valid JSON: {e}")),
        }
    };
    Ok(Step::Mcp {
        server: server.to_owned(),
        tool: tool.to_owned(),
        arguments,
    })
}

/// Whitespace-separated non-negative decimal integers.
fn numbers(arg: &str) -> Result<Vec<u64>, String> {
    arg.split_whitespace()
        .map(|word| {
            if !word.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("`{word}` is not a non-negative whole number"));
            }
            word.parse::<u64>()
                .map_err(|_| format!("`{word}` is too large"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(script: &str) -> Vec<Step> {
        parse(script)
            .into_iter()
            .map(|s| s.unwrap_or_else(|e| panic!("unexpected error: {e}")))
            .collect()
    }

    fn error(line: &str) -> ScriptError {
        let mut parsed = parse(line);
        assert_eq!(parsed.len(), 1, "{line:?}");
        match parsed.remove(0) {
            Err(e) => e,
            Ok(step) => panic!("{line:?} parsed as {step:?}"),
        }
    }

    #[test]
    fn approve_and_ask_take_the_rest_of_the_line() {
        assert_eq!(
            steps("approve rm -rf  build\nask Which  branch?\napprove\nApprove x"),
            [
                Step::Approve("rm -rf  build".into()),
                Step::Ask("Which  branch?".into()),
                Step::Echo("approve".into()),
                Step::Echo("Approve x".into()),
            ]
        );
    }

    #[test]
    fn every_keyword() {
        assert_eq!(
            steps(
                "say hello world\nthink  hmm\nrun echo a; echo b\nsleep 250\nusage 10 5\nfail oh no"
            ),
            vec![
                Step::Say("hello world".into()),
                Step::Think(" hmm".into()),
                Step::Run("echo a; echo b".into()),
                Step::Sleep(Duration::from_millis(250)),
                Step::Usage {
                    input: 10,
                    output: 5
                },
                Step::Fail("oh no".into()),
            ]
        );
    }

    #[test]
    fn name_takes_the_rest_of_the_line() {
        assert_eq!(
            steps("name Fix the build\nname"),
            vec![
                Step::Name("Fix the build".into()),
                Step::Echo("name".into())
            ]
        );
    }

    #[test]
    fn instructions_is_a_step_only_alone() {
        assert_eq!(
            steps("instructions\ninstructions please\n instructions\nInstructions"),
            vec![
                Step::Instructions,
                Step::Echo("instructions please".into()),
                Step::Echo(" instructions".into()),
                Step::Echo("Instructions".into()),
            ]
        );
    }

    #[test]
    fn mcp_calls_name_server_tool_and_arguments() {
        assert_eq!(
            steps("mcp docs search {\"q\": \"x y\"}\nmcp  docs   list"),
            vec![
                Step::Mcp {
                    server: "docs".into(),
                    tool: "search".into(),
                    arguments: serde_json::json!({"q": "x y"}),
                },
                Step::Mcp {
                    server: "docs".into(),
                    tool: "list".into(),
                    arguments: serde_json::json!({}),
                },
            ]
        );
        for line in [
            "mcp docs",
            "mcp docs t [1]",
            "mcp docs t {oops",
            "mcp docs t 3",
        ] {
            let err = error(line);
            assert!(err.reason.starts_with("`mcp`"), "{err}");
        }
    }

    #[test]
    fn anything_else_is_echoed() {
        assert_eq!(
            steps("hello\nSay hi\n say hi\nsaying hi\nsleepy 5"),
            vec![
                Step::Echo("hello".into()),
                Step::Echo("Say hi".into()),
                Step::Echo(" say hi".into()),
                Step::Echo("saying hi".into()),
                Step::Echo("sleepy 5".into()),
            ]
        );
    }

    #[test]
    fn bare_keywords_are_echoed() {
        assert_eq!(
            steps("say\nthink \nrun\t\nsleep\nusage   \nfail"),
            vec![
                Step::Echo("say".into()),
                Step::Echo("think ".into()),
                Step::Echo("run\t".into()),
                Step::Echo("sleep".into()),
                Step::Echo("usage   ".into()),
                Step::Echo("fail".into()),
            ]
        );
    }

    #[test]
    fn blank_lines_and_carriage_returns() {
        assert_eq!(
            steps("\r\nsay a\r\n   \n\t\r\n\nsay b  \r\n"),
            vec![Step::Say("a".into()), Step::Say("b  ".into())]
        );
        assert!(parse("").is_empty());
        assert!(parse("\n \r\n\t").is_empty());
    }

    #[test]
    fn numbers_allow_extra_spaces() {
        assert_eq!(
            steps("sleep  7 \nusage 0   0"),
            vec![
                Step::Sleep(Duration::from_millis(7)),
                Step::Usage {
                    input: 0,
                    output: 0
                }
            ]
        );
    }

    #[test]
    fn bad_numbers_name_their_line() {
        let mut parsed = parse("say ok\n\nsleep soon\r\nsay after");
        assert_eq!(parsed.len(), 3);
        assert_eq!(parsed.remove(0), Ok(Step::Say("ok".into())));
        let err = parsed.remove(0).unwrap_err();
        assert_eq!(err.line, 3);
        assert_eq!(err.text, "sleep soon");
        assert!(
            err.to_string().starts_with("line 3 (`sleep soon`): "),
            "{err}"
        );
        assert_eq!(parsed.remove(0), Ok(Step::Say("after".into())));

        for line in [
            "sleep -5",
            "sleep 1.5",
            "sleep +5",
            "sleep 1 2",
            "sleep 99999999999999999999",
            "usage 1",
            "usage 1 2 3",
            "usage a 2",
            "usage 1 -2",
            "usage 9223372036854775807 1",
        ] {
            let err = error(line);
            assert_eq!(err.line, 1);
            assert_eq!(err.text, line);
        }
    }
}
