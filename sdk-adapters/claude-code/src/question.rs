//! Claude Code's clarifying questions: its `AskUserQuestion` tool, which
//! reaches the host as a `can_use_tool` prompt like any tool (as the pinned
//! CLI, 2.1.197, sends and takes it), asked through the runner as a
//! question, not as a permission to use a tool:
//! - the input: `{"questions":[{"question":…,"header":…,"options":[{"label":…,
//!   "description":…}],"multiSelect":…}]}` (1–4 questions of 2–4 options;
//!   claude itself offers "Other", free text);
//! - the answer: `{"behavior":"allow","updatedInput":{"questions":[…],
//!   "answers":{<question text>: <answer>}}}`, multi-select answers
//!   comma-separated; claude tells the model `"<question>"="<answer>"` for
//!   each, or "The user did not answer the questions." when none is given.
//!
//! What a person sees ([`ask`]): the questions joined as the title, the
//! first one's header as the reason and its option labels as the choices
//! (as codex's questions are asked). What they answer ([`answered`]): the
//! `answer` text answers every question, or a JSON object answers them one
//! by one, keyed by the question's text or its header (a string, or a list
//! of labels for a multi-select). A question's outcome does not matter, its
//! answer does; without one, a message (a denial's) is what claude is told,
//! and `CANCEL_TURN` interrupts claude's turn as it does for any tool.

#[cfg(test)]
use sdk_adapter::ApprovalKind;
use sdk_adapter::{ApprovalAnswer, ApprovalAsk, Verdict};
use serde_json::{Map, Value, json};

/// The tool's name.
pub(crate) const TOOL: &str = "AskUserQuestion";

/// What claude is told when no control plane answers questions.
pub(crate) const NOBODY_ANSWERS: &str =
    "nobody is there to answer questions: go on with your best judgement";

/// The questions in `input`, as claude sent them.
fn questions(input: &Value) -> &[Value] {
    input
        .get("questions")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A question's field `key`, when it is text.
fn field<'a>(question: &'a Value, key: &str) -> Option<&'a str> {
    question.get(key).and_then(Value::as_str)
}

/// What a person needs to answer the questions of `input`
/// ([`ApprovalAsk::questions`]; the title as it comes: the caller puts it
/// on one line).
pub(crate) fn ask(input: &Value) -> ApprovalAsk {
    let mut ask = ApprovalAsk::questions(questions(input));
    if ask.title.is_empty() {
        ask.title = "answer the agent's question".to_owned();
    }
    ask.reason = ask.reason.filter(|h| !h.trim().is_empty());
    ask
}

/// Claude Code's `PermissionResult` for `answer` to the questions of
/// `input` (see the module doc).
pub(crate) fn answered(input: &Value, answer: &ApprovalAnswer) -> Value {
    let Some(text) = answer.answer.as_deref() else {
        return unanswered(input, answer);
    };
    let by_question: Option<Map<String, Value>> = serde_json::from_str(text).ok();
    let mut answers = Map::new();
    for question in questions(input) {
        let Some(asked) = field(question, "question") else {
            continue;
        };
        let given = match &by_question {
            None => Some(text.to_owned()),
            Some(map) => field(question, "header")
                .into_iter()
                .chain([asked])
                .find_map(|key| map.get(key))
                .and_then(one_answer),
        };
        if let Some(given) = given {
            answers.insert(asked.to_owned(), Value::String(given));
        }
    }
    let mut updated = input.as_object().cloned().unwrap_or_default();
    updated.insert("answers".to_owned(), Value::Object(answers));
    json!({"behavior": "allow", "updatedInput": updated})
}

/// An answer given for one question: text, or labels (comma-separated, as
/// claude takes a multi-select's).
fn one_answer(value: &Value) -> Option<String> {
    match value {
        Value::String(one) => Some(one.clone()),
        Value::Array(many) => {
            let labels: Vec<&str> = many.iter().filter_map(Value::as_str).collect();
            (!labels.is_empty()).then(|| labels.join(", "))
        }
        _ => None,
    }
}

/// No answer came: what the person said instead, if anything (a denial's
/// message, the turn cancelled), else no answers at all.
fn unanswered(input: &Value, answer: &ApprovalAnswer) -> Value {
    let message = answer.message.as_deref().filter(|m| !m.trim().is_empty());
    let cancel = answer.verdict == Verdict::CancelTurn;
    match (message, cancel) {
        (None, false) => {
            let mut updated = input.as_object().cloned().unwrap_or_default();
            updated.insert("answers".to_owned(), json!({}));
            json!({"behavior": "allow", "updatedInput": updated})
        }
        (message, interrupt) => {
            let message = message.unwrap_or("the question was not answered");
            let mut result = json!({"behavior": "deny", "message": message});
            if interrupt {
                result["interrupt"] = Value::Bool(true);
            }
            result
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input() -> Value {
        json!({"questions": [
            {"question": "Which database?", "header": "Database", "multiSelect": false,
             "options": [{"label": "Postgres", "description": "relational"},
                         {"label": "SQLite", "description": "a file"}]},
            {"question": "Which extras?", "header": "Extras", "multiSelect": true,
             "options": [{"label": "Cache", "description": ""},
                         {"label": "Search", "description": ""}]}
        ]})
    }

    fn with(answer: Option<&str>, verdict: Verdict, message: Option<&str>) -> ApprovalAnswer {
        ApprovalAnswer {
            verdict,
            answer: answer.map(str::to_owned),
            message: message.map(str::to_owned),
        }
    }

    #[test]
    fn the_questions_are_asked_as_a_question_with_the_first_ones_choices() {
        let ask = ask(&input());
        assert_eq!(ask.kind, ApprovalKind::Question);
        assert_eq!(ask.title, "Which database? / Which extras?");
        assert_eq!(ask.reason.as_deref(), Some("Database"));
        assert_eq!(ask.options, ["Postgres", "SQLite"]);
        let odd = ask_of(json!({"questions": "not a list"}));
        assert_eq!(odd.title, "answer the agent's question");
        assert!(odd.options.is_empty());
    }

    fn ask_of(input: Value) -> ApprovalAsk {
        ask(&input)
    }

    #[test]
    fn an_answer_text_answers_every_question_and_the_input_is_kept() {
        let got = answered(&input(), &with(Some("SQLite"), Verdict::Approve, None));
        assert_eq!(got["behavior"], "allow");
        assert_eq!(got["updatedInput"]["questions"], input()["questions"]);
        assert_eq!(
            got["updatedInput"]["answers"],
            json!({"Which database?": "SQLite", "Which extras?": "SQLite"})
        );
        // The outcome does not matter, the answer does.
        let denied = answered(&input(), &with(Some("SQLite"), Verdict::Deny, None));
        assert_eq!(denied["behavior"], "allow");
    }

    #[test]
    fn a_json_object_answers_by_question_text_or_header() {
        let by = r#"{"Which database?": "Postgres", "Extras": ["Cache", "Search"], "Other": "x"}"#;
        let got = answered(&input(), &with(Some(by), Verdict::Approve, None));
        assert_eq!(
            got["updatedInput"]["answers"],
            json!({"Which database?": "Postgres", "Which extras?": "Cache, Search"})
        );
        let partial = answered(
            &input(),
            &with(Some(r#"{"Database": 3}"#), Verdict::Approve, None),
        );
        assert_eq!(partial["updatedInput"]["answers"], json!({}));
    }

    #[test]
    fn without_an_answer_claude_hears_the_message_or_no_answer() {
        let none = answered(&input(), &with(None, Verdict::Approve, None));
        assert_eq!(none["behavior"], "allow");
        assert_eq!(none["updatedInput"]["answers"], json!({}));
        let told = answered(
            &input(),
            &with(None, Verdict::Deny, Some("decide yourself")),
        );
        assert_eq!(
            told,
            json!({"behavior": "deny", "message": "decide yourself"})
        );
        let cancel = answered(&input(), &with(None, Verdict::CancelTurn, None));
        assert_eq!(
            cancel,
            json!({"behavior": "deny", "message": "the question was not answered", "interrupt": true})
        );
    }
}
