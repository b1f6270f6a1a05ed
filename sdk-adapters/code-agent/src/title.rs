//! The thread's name under the `code-agent` SDK: the engine has no titles of
//! its own, so the adapter derives one from the thread's first message and
//! reports it once, as that first turn's
//! [`TurnEvent::ThreadNamed`](sdk_adapter::TurnEvent::ThreadNamed).
//!
//! The title is the message's first non-blank line with runs of whitespace
//! collapsed to one space, cut to at most [`MAX_TITLE_CHARS`] characters at
//! the last word boundary that fits (a single longer word is cut inside),
//! with `…` appended when anything was cut. A message with no visible text
//! gives no title.

/// The longest title, in characters (the ellipsis included).
pub const MAX_TITLE_CHARS: usize = 60;

/// The title for a thread whose first message is `message`.
pub fn from_first_message(message: &str) -> Option<String> {
    let line = message.lines().find(|l| !l.trim().is_empty())?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let full = words.join(" ");
    let more_lines = message.trim() != line.trim();
    if !more_lines && full.chars().count() <= MAX_TITLE_CHARS {
        return Some(full);
    }
    let budget = MAX_TITLE_CHARS - 1;
    let mut title = String::new();
    for word in &words {
        let extra = usize::from(!title.is_empty()) + word.chars().count();
        if title.chars().count() + extra > budget {
            break;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    if title.is_empty() {
        title = full.chars().take(budget).collect();
    }
    title.push('…');
    Some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_single_lines_are_kept_with_whitespace_collapsed() {
        assert_eq!(
            from_first_message("  Fix   the build\t").as_deref(),
            Some("Fix the build")
        );
    }

    #[test]
    fn later_lines_are_dropped_and_marked() {
        assert_eq!(
            from_first_message("\n\nFix the build\nthen run the tests").as_deref(),
            Some("Fix the build…")
        );
    }

    #[test]
    fn long_lines_are_cut_at_a_word() {
        let message =
            "Refactor the state store so that every thread keeps its instructions across restarts";
        let title = from_first_message(message).unwrap();
        assert!(title.chars().count() <= MAX_TITLE_CHARS, "{title}");
        assert_eq!(
            title,
            "Refactor the state store so that every thread keeps its…"
        );
    }

    #[test]
    fn one_long_word_is_cut_inside() {
        let title = from_first_message(&"x".repeat(100)).unwrap();
        assert_eq!(title.chars().count(), MAX_TITLE_CHARS);
        assert!(title.ends_with('…'));
    }

    #[test]
    fn blank_messages_give_none() {
        assert_eq!(from_first_message(" \n\t\n"), None);
        assert_eq!(from_first_message(""), None);
    }
}
