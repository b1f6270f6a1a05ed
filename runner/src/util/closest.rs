//! The known word a mistyped one most likely meant: one edit in three
//! letters at most (Damerau-Levenshtein). For the "did you mean" of a
//! misspelt TOML key and of an unknown SDK name.

/// The word of `known` closest to `word`, when at most a third of `word`'s
/// letters (at least one) are wrong.
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(word, k), *k))
        .filter(|(distance, _)| *distance * 3 <= word.len().max(3))
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_finds_its_word_a_stranger_none() {
        assert_eq!(
            closest("drain_timout", &["drain_timeout", "state_dir"]),
            Some("drain_timeout")
        );
        assert_eq!(closest("gpt", &["codex", "scripted"]), None);
    }
}
