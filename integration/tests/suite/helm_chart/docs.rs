//! docs/configuration.md against values.yaml: every value listed once, with its default,
//! and nothing listed that is not a value.

use std::collections::BTreeMap;

use anyhow::{ensure, Context};
use graft_integration::Testbed;
use serde_json::Value;

use super::{chart, top};

/// values.yaml as JSON, read by helm itself (the repository has no YAML parser): a chart of
/// one template that prints its values.
fn values_json(tb: &Testbed) -> anyhow::Result<Value> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("templates"))?;
    std::fs::write(
        dir.path().join("Chart.yaml"),
        "apiVersion: v2\nname: values\nversion: 0.0.0\n",
    )?;
    std::fs::write(
        dir.path().join("templates/v.yaml"),
        "{{ toJson .Values }}\n",
    )?;
    std::fs::copy(chart().join("values.yaml"), dir.path().join("values.yaml"))?;
    let out = std::process::Command::new(&tb.helm)
        .arg("template")
        .arg(dir.path())
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout)?;
    let json = text
        .lines()
        .find(|l| l.starts_with('{'))
        .context("no values printed")?;
    Ok(serde_json::from_str(json)?)
}

/// The documented paths of values.yaml: maps are walked into where the schema lists their
/// keys (`properties`), and each path ends at a value (a scalar, a list, or a map the schema
/// leaves open, such as nodeSelector or resources.driver.requests).
fn leaves(value: &Value, schema: &Value, path: &str, out: &mut BTreeMap<String, Value>) {
    match (value, schema.get("properties")) {
        (Value::Object(map), Some(props)) if !map.is_empty() => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                leaves(v, props.get(k).unwrap_or(&Value::Null), &p, out);
            }
        }
        _ => {
            out.insert(path.to_string(), value.clone());
        }
    }
}

/// A scalar default as the page writes it (a text of several lines, devicesToml, is
/// described instead).
fn written(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if s.contains('\n') => None,
        Value::String(s) if s.is_empty() => Some("\"\"".into()),
        Value::String(s) => Some(s.clone()),
        Value::Bool(_) | Value::Number(_) => Some(v.to_string()),
        _ => None,
    }
}

#[test]
fn configuration_doc_lists_every_value() -> anyhow::Result<()> {
    let tb = Testbed::load()?;
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(
        chart().join("values.schema.json"),
    )?)?;
    let mut values = BTreeMap::new();
    leaves(&values_json(&tb)?, &schema, "", &mut values);
    let doc = std::fs::read_to_string(top().join("docs/configuration.md"))?;
    // Each value is an item `- `path` (default `x`): ...`.
    let mut listed = BTreeMap::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix("- `") else {
            continue;
        };
        let (path, rest) = rest.split_once('`').context("unclosed `")?;
        let default = rest
            .strip_prefix(" (default `")
            .and_then(|d| d.split_once("`)"))
            .map(|(d, _)| d.to_string());
        ensure!(
            listed.insert(path.to_string(), default).is_none(),
            "{path} is listed twice"
        );
    }
    for (path, value) in &values {
        let default = listed
            .get(path)
            .with_context(|| format!("docs/configuration.md does not list {path}"))?;
        if let Some(want) = written(value) {
            ensure!(
                default.as_deref() == Some(want.as_str()),
                "docs/configuration.md: {path} defaults to `{want}`, not {default:?}"
            );
        }
    }
    for path in listed.keys() {
        ensure!(
            values.contains_key(path),
            "docs/configuration.md lists {path}, which values.yaml does not have"
        );
    }
    Ok(())
}
