//! Conversions between our protocol types and the generated protobuf messages.

use super::diagnostics::{Diagnostic, Diagnostics, Severity};
use super::msgpack;
use super::proto::tfplugin6 as pb;
use super::schema::{Attribute, AttributeType, Block, NestedBlock, Nesting, Schema};
use super::value::{AttributePath, PathStep, Type, Value};

pub fn schema(s: &Schema) -> pb::Schema {
    pb::Schema {
        version: s.version,
        block: Some(block(&s.block, s.version)),
    }
}

fn kind(text: &str) -> i32 {
    // Descriptions are written in Markdown (backticks for names).
    if text.contains('`') {
        pb::StringKind::Markdown as i32
    } else {
        pb::StringKind::Plain as i32
    }
}

fn block(b: &Block, version: i64) -> pb::schema::Block {
    pb::schema::Block {
        version,
        attributes: b.attributes.iter().map(attribute).collect(),
        block_types: b.blocks.iter().map(nested_block).collect(),
        description: b.description.clone(),
        description_kind: kind(&b.description),
        deprecated: b.deprecated,
    }
}

fn attribute(a: &Attribute) -> pb::schema::Attribute {
    let (ty, nested_type) = match &a.ty {
        AttributeType::Typed(t) => (
            serde_json::to_vec(&t.to_json()).expect("type JSON always serializes"),
            None,
        ),
        AttributeType::Nested {
            nesting,
            attributes,
        } => (
            Vec::new(),
            Some(pb::schema::Object {
                attributes: attributes.iter().map(attribute).collect(),
                nesting: object_nesting(*nesting) as i32,
                min_items: 0,
                max_items: 0,
            }),
        ),
    };
    pb::schema::Attribute {
        name: a.name.clone(),
        r#type: ty,
        nested_type,
        description: a.description.clone(),
        required: a.required,
        optional: a.optional,
        computed: a.computed,
        sensitive: a.sensitive,
        description_kind: kind(&a.description),
        deprecated: a.deprecated,
        write_only: false,
    }
}

fn object_nesting(n: Nesting) -> pb::schema::object::NestingMode {
    use pb::schema::object::NestingMode as M;
    match n {
        Nesting::Single | Nesting::Group => M::Single,
        Nesting::List => M::List,
        Nesting::Set => M::Set,
        Nesting::Map => M::Map,
    }
}

fn nested_block(b: &NestedBlock) -> pb::schema::NestedBlock {
    use pb::schema::nested_block::NestingMode as M;
    pb::schema::NestedBlock {
        type_name: b.type_name.clone(),
        block: Some(block(&b.block, 0)),
        nesting: match b.nesting {
            Nesting::Single => M::Single,
            Nesting::List => M::List,
            Nesting::Set => M::Set,
            Nesting::Map => M::Map,
            Nesting::Group => M::Group,
        } as i32,
        min_items: b.min_items,
        max_items: b.max_items,
    }
}

pub fn path(p: &AttributePath) -> pb::AttributePath {
    use pb::attribute_path::step::Selector;
    pb::AttributePath {
        steps: p
            .steps()
            .iter()
            .map(|s| pb::attribute_path::Step {
                selector: Some(match s {
                    PathStep::Attr(n) => Selector::AttributeName(n.clone()),
                    PathStep::Key(k) => Selector::ElementKeyString(k.clone()),
                    PathStep::Index(i) => Selector::ElementKeyInt(*i),
                }),
            })
            .collect(),
    }
}

pub fn diagnostic(d: &Diagnostic) -> pb::Diagnostic {
    pb::Diagnostic {
        severity: match d.severity {
            Severity::Error => pb::diagnostic::Severity::Error,
            Severity::Warning => pb::diagnostic::Severity::Warning,
        } as i32,
        summary: d.summary.clone(),
        detail: d.detail.clone(),
        attribute: d.path.as_ref().filter(|p| !p.is_root()).map(path),
    }
}

pub fn diagnostics(d: &Diagnostics) -> Vec<pb::Diagnostic> {
    d.iter().map(diagnostic).collect()
}

/// Decodes a DynamicValue from Terraform (msgpack normally, JSON if that is what was sent).
/// An absent or empty value is null.
pub fn decode_dynamic(
    v: Option<&pb::DynamicValue>,
    ty: &Type,
    what: &str,
) -> Result<Value, Diagnostics> {
    let Some(v) = v else { return Ok(Value::Null) };
    let r = if !v.msgpack.is_empty() {
        msgpack::decode(&v.msgpack, ty)
    } else if !v.json.is_empty() {
        super::json::decode(&v.json, ty)
    } else {
        return Ok(Value::Null);
    };
    r.map_err(|e| {
        Diagnostic::error(
            format!("Invalid {what} from Terraform"),
            format!("could not decode the {what}: {e}"),
        )
        .into()
    })
}

/// Encodes a value for Terraform as msgpack. A failure here is a provider bug (a resource
/// returned a value that does not match its schema), reported as such.
pub fn encode_dynamic(v: &Value, ty: &Type, what: &str) -> Result<pb::DynamicValue, Diagnostics> {
    msgpack::encode(v, ty)
        .map(|msgpack| pb::DynamicValue {
            msgpack,
            json: Vec::new(),
        })
        .map_err(|e| {
            Diagnostic::error(
                "Provider produced an invalid value",
                format!("the {what} does not match the schema ({e}); this is a bug in terraform-provider-joiner"),
            )
            .into()
        })
}

/// The paths of any unknown values left inside `v` (a provider bug after apply or read).
pub fn unknown_paths(v: &Value) -> Vec<AttributePath> {
    fn walk(v: &Value, at: AttributePath, out: &mut Vec<AttributePath>) {
        match v {
            Value::Unknown => out.push(at),
            Value::List(items) | Value::Tuple(items) => {
                for (i, x) in items.iter().enumerate() {
                    walk(x, at.clone().index(i as i64), out);
                }
            }
            Value::Set(items) => {
                for x in items {
                    walk(x, at.clone(), out);
                }
            }
            Value::Map(m) => {
                for (k, x) in m {
                    walk(x, at.clone().key(k), out);
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    walk(x, at.clone().attr(k), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, AttributePath::root(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_conversion_keeps_flags_and_types() {
        let s = Schema::new(2)
            .attribute(Attribute::string("name").required().force_new())
            .attribute(
                Attribute::string("secret")
                    .optional()
                    .sensitive()
                    .description("a `secret`"),
            )
            .attribute(Attribute::nested(
                "rules",
                Nesting::List,
                vec![Attribute::string("id").required()],
            ))
            .block(NestedBlock::single(
                "timeouts",
                Block::new().attribute(Attribute::string("create")),
            ));
        let p = schema(&s);
        assert_eq!(p.version, 2);
        let b = p.block.unwrap();
        assert_eq!(b.attributes[0].r#type, b"\"string\"".to_vec());
        assert!(b.attributes[0].required && !b.attributes[0].optional);
        assert!(b.attributes[1].sensitive);
        assert_eq!(
            b.attributes[1].description_kind,
            pb::StringKind::Markdown as i32
        );
        let nested = b.attributes[2].nested_type.as_ref().unwrap();
        assert_eq!(nested.nesting, pb::schema::object::NestingMode::List as i32);
        assert!(b.attributes[2].r#type.is_empty());
        assert_eq!(
            b.block_types[0].nesting,
            pb::schema::nested_block::NestingMode::Single as i32
        );
    }

    #[test]
    fn diagnostics_carry_paths() {
        use pb::attribute_path::step::Selector;
        let d = Diagnostic::error_at(AttributePath::new("tags").key("a"), "s", "d");
        let p = diagnostic(&d);
        assert_eq!(p.severity, pb::diagnostic::Severity::Error as i32);
        let steps = p.attribute.unwrap().steps;
        assert_eq!(
            steps[0].selector,
            Some(Selector::AttributeName("tags".into()))
        );
        assert_eq!(
            steps[1].selector,
            Some(Selector::ElementKeyString("a".into()))
        );
    }

    #[test]
    fn finds_leftover_unknowns() {
        let v = Value::object([("a", Value::List(vec![Value::Null, Value::Unknown]))]);
        assert_eq!(unknown_paths(&v)[0].to_string(), "a[1]");
    }
}
