//! `min_len: 1` is checked as emptiness (proto-build rewrites the
//! generated character count): the rule must still hold exactly — an empty
//! id is refused, naming the field and the rule, and a one-character id of
//! any width is accepted.

use agent_runner_proto::runner::ItemUpdate;
use prost_protovalidate::Validate as _;

fn item(sdk_item_id: &str, thread_id: &str, sdk_turn_id: &str) -> ItemUpdate {
    ItemUpdate {
        sdk_item_id: sdk_item_id.into(),
        thread_id: thread_id.into(),
        sdk_turn_id: sdk_turn_id.into(),
        ..Default::default()
    }
}

/// The `(field, rule)` pairs `update` violates.
fn violated(update: &ItemUpdate) -> Vec<(String, String)> {
    match update.validate() {
        Ok(()) => Vec::new(),
        Err(e) => e
            .violations()
            .iter()
            .map(|v| (v.field_path(), v.rule_id().to_owned()))
            .collect(),
    }
}

#[test]
fn an_empty_id_is_refused_by_name() {
    assert_eq!(
        violated(&item("", "t", "turn")),
        [("sdk_item_id".to_owned(), "string.min_len".to_owned())]
    );
    assert_eq!(
        violated(&item("i", "", "")),
        [
            ("thread_id".to_owned(), "string.min_len".to_owned()),
            ("sdk_turn_id".to_owned(), "string.min_len".to_owned())
        ]
    );
}

#[test]
fn any_one_character_is_enough() {
    for one in ["a", "é", "€", "🦀"] {
        assert_eq!(violated(&item(one, one, one)), [], "{one:?}");
    }
    let long = "x".repeat(100);
    assert_eq!(violated(&item(&long, &long, &long)), []);
}

/// The rewrite took: were the generator to lay its output out differently,
/// the rewrite would silently match nothing and the character count would
/// be back on every update sent.
#[test]
fn the_generated_code_counts_no_characters_for_min_len_one() {
    for generated in [
        include_str!(concat!(env!("OUT_DIR"), "/v0.2/validate_impl.rs")),
        include_str!(concat!(env!("OUT_DIR"), "/v0.7/validate_impl.rs")),
    ] {
        assert!(generated.contains("self.thread_id.is_empty()"));
        assert!(
            !generated.contains("chars().count() < 1usize"),
            "a min_len 1 check still counts characters"
        );
    }
}
