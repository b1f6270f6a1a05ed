//! A tool call's JSON arguments: the schema a tool declares for them, and
//! reading them with errors that name the field.

use serde_json::{Value, json};

/// The schema of a tool's arguments: an object with these `properties`
/// (name → schema), the `required` ones among them, and no others.
pub(crate) fn object_schema(properties: Value, required: &[&str]) -> Value {
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false
    });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

/// The schema of the `path` argument of the tools that work on one file.
pub(crate) fn file_path_schema() -> Value {
    json!({"type": "string", "description": "File path, relative to the workspace or absolute inside it."})
}

/// A required string argument.
pub(crate) fn required_str<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    match args.get(key) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(format!("argument `{key}` must be a string")),
        None => Err(format!("missing required argument `{key}`")),
    }
}

/// An optional string argument (`null` counts as absent).
pub(crate) fn optional_str<'a>(args: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(format!("argument `{key}` must be a string")),
    }
}

/// An optional non-negative integer argument; integral floats and numeric
/// strings (models send both) are accepted.
pub(crate) fn optional_u64(args: &Value, key: &str) -> Result<Option<u64>, String> {
    let bad = || format!("argument `{key}` must be a non-negative integer");
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => {
            if let Some(value) = number.as_u64() {
                return Ok(Some(value));
            }
            match number.as_f64() {
                Some(value) if value >= 0.0 && value.fract() == 0.0 && value < u64::MAX as f64 => {
                    Ok(Some(value as u64))
                }
                _ => Err(bad()),
            }
        }
        Some(Value::String(text)) => text.trim().parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

/// An optional boolean argument (`"true"`/`"false"` strings accepted).
pub(crate) fn optional_bool(args: &Value, key: &str) -> Result<Option<bool>, String> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(flag)) => Ok(Some(*flag)),
        Some(Value::String(text)) if text == "true" => Ok(Some(true)),
        Some(Value::String(text)) if text == "false" => Ok(Some(false)),
        Some(_) => Err(format!("argument `{key}` must be a boolean")),
    }
}

/// The arguments must be a JSON object.
pub(crate) fn object(args: &Value) -> Result<(), String> {
    if args.is_object() {
        Ok(())
    } else {
        Err("arguments must be a JSON object".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_closed_objects() {
        let schema = object_schema(json!({"path": file_path_schema()}), &["path"]);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "File path, relative to the workspace or absolute inside it."}},
                "required": ["path"],
                "additionalProperties": false
            })
        );
        assert!(object_schema(json!({}), &[]).get("required").is_none());
    }

    #[test]
    fn errors_name_the_field() {
        let args = json!({"n": -1, "s": 3, "b": "maybe"});
        assert!(required_str(&args, "path").unwrap_err().contains("`path`"));
        assert!(required_str(&args, "s").unwrap_err().contains("`s`"));
        assert!(optional_u64(&args, "n").unwrap_err().contains("`n`"));
        assert!(optional_bool(&args, "b").unwrap_err().contains("`b`"));
        assert!(object(&json!([])).is_err());
    }

    #[test]
    fn lenient_numbers_and_bools() {
        let args = json!({"a": 5, "b": 5.0, "c": "7", "t": "true", "n": null});
        assert_eq!(optional_u64(&args, "a").unwrap(), Some(5));
        assert_eq!(optional_u64(&args, "b").unwrap(), Some(5));
        assert_eq!(optional_u64(&args, "c").unwrap(), Some(7));
        assert_eq!(optional_u64(&args, "n").unwrap(), None);
        assert_eq!(optional_bool(&args, "t").unwrap(), Some(true));
        assert_eq!(optional_str(&args, "missing").unwrap(), None);
    }
}
