//! One layer of settings (what the command line and environment gave, or
//! what the config file gave) and the generic merge of two layers.
//!
//! A settings struct is written once, inside [`settings!`]: its fields are
//! clap flags (long name, `AGENT_RUNNER_*` variable, help with the
//! `Default: …` sentence, help heading); the field name is the TOML key.
//! The macro adds [`Layer`]: merging field by field (`self` wins) and
//! listing the keys a layer sets, so no setting is ever listed by hand a
//! second time.

/// A layer of settings: every field optional (`None` or an empty list is
/// "not given").
pub(crate) trait Layer: Sized {
    /// Each setting from `self`, else from `other`.
    fn or(self, other: Self) -> Self;
    /// Pushes the key of every setting `self` gives; `name` is the key of
    /// `self` itself when it is one setting.
    fn set_keys(&self, name: &'static str, out: &mut Vec<&'static str>);
}

impl<T> Layer for Option<T> {
    fn or(self, other: Self) -> Self {
        Option::or(self, other)
    }

    fn set_keys(&self, name: &'static str, out: &mut Vec<&'static str>) {
        if self.is_some() {
            out.push(name);
        }
    }
}

/// A list is given whole or not at all: a list from the command line
/// replaces the file's (they are not merged).
impl<T> Layer for Vec<T> {
    fn or(self, other: Self) -> Self {
        if self.is_empty() { other } else { self }
    }

    fn set_keys(&self, name: &'static str, out: &mut Vec<&'static str>) {
        if !self.is_empty() {
            out.push(name);
        }
    }
}

/// The keys `layer` gives, in declaration order.
pub(crate) fn keys_of(layer: &impl Layer) -> Vec<&'static str> {
    let mut out = Vec::new();
    layer.set_keys("", &mut out);
    out
}

/// Declares a settings struct (fields `pub`, each ending with `,`) and
/// implements [`Layer`] for it. Flattened groups (`#[command(flatten)]`)
/// are fields too: their type implements [`Layer`] the same way.
macro_rules! settings {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )*
        }

        impl $crate::config::layer::Layer for $name {
            fn or(self, other: Self) -> Self {
                Self {
                    $($field: $crate::config::layer::Layer::or(self.$field, other.$field),)*
                }
            }

            fn set_keys(&self, _name: &'static str, out: &mut Vec<&'static str>) {
                $($crate::config::layer::Layer::set_keys(&self.$field, stringify!($field), out);)*
            }
        }
    };
}

pub(crate) use settings;

#[cfg(test)]
mod tests {
    use super::*;

    settings! {
        #[derive(Debug, Default, PartialEq)]
        pub struct Inner {
            pub c: Option<u8>,
        }
    }

    settings! {
        #[derive(Debug, Default, PartialEq)]
        pub struct Outer {
            pub a: Option<u8>,
            pub b: Vec<u8>,
            pub inner: Inner,
        }
    }

    #[test]
    fn the_first_layer_wins_field_by_field_and_lists_whole() {
        let flags = Outer {
            a: Some(1),
            b: vec![],
            inner: Inner { c: None },
        };
        let file = Outer {
            a: Some(2),
            b: vec![3, 4],
            inner: Inner { c: Some(5) },
        };
        assert_eq!(keys_of(&flags), ["a"]);
        assert_eq!(keys_of(&file), ["a", "b", "c"]);
        let merged = flags.or(file);
        assert_eq!(
            merged,
            Outer {
                a: Some(1),
                b: vec![3, 4],
                inner: Inner { c: Some(5) },
            }
        );
        let both = Outer {
            b: vec![9],
            ..Default::default()
        }
        .or(merged);
        assert_eq!(both.b, [9]);
    }
}
