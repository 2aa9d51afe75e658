//! Schemas: what a provider, resource or data source accepts and returns.
//!
//! Beyond what Terraform's wire schema carries, an [`Attribute`] here also records
//! behaviour the server applies for every resource, so resource files stay declarative:
//! - `force_new()`: changing the attribute plans a replacement;
//! - `default(v)`: an optional+computed attribute takes `v` when the configuration omits it;
//! - `validate(f)`: checks run at validate/plan time, reported at the attribute's path.

use super::diagnostics::{Diagnostic, Diagnostics};
use super::value::{AttributePath, Type, Value};
use std::fmt;
use std::sync::Arc;

/// Checks one known, non-null attribute value; `Err` is the detail shown to the user and
/// should say what is allowed.
pub type Validator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

#[derive(Clone, Debug, Default)]
pub struct Schema {
    /// Bumped when the state layout changes; see `Resource::upgrade_state`.
    pub version: i64,
    pub block: Block,
}

impl Schema {
    pub fn new(version: i64) -> Self {
        Schema {
            version,
            block: Block::default(),
        }
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.block.description = d.into();
        self
    }
    pub fn attribute(mut self, a: Attribute) -> Self {
        self.block.attributes.push(a);
        self
    }
    pub fn block(mut self, b: NestedBlock) -> Self {
        self.block.blocks.push(b);
        self
    }
    pub fn implied_type(&self) -> Type {
        self.block.implied_type()
    }
    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.block.attributes.iter().find(|a| a.name == name)
    }
}

#[derive(Clone, Debug, Default)]
pub struct Block {
    pub attributes: Vec<Attribute>,
    pub blocks: Vec<NestedBlock>,
    pub description: String,
    pub deprecated: bool,
}

impl Block {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn attribute(mut self, a: Attribute) -> Self {
        self.attributes.push(a);
        self
    }
    pub fn block(mut self, b: NestedBlock) -> Self {
        self.blocks.push(b);
        self
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = d.into();
        self
    }
    /// The object type Terraform derives from the block.
    pub fn implied_type(&self) -> Type {
        let mut attrs = std::collections::BTreeMap::new();
        for a in &self.attributes {
            attrs.insert(a.name.clone(), a.value_type());
        }
        for b in &self.blocks {
            attrs.insert(b.type_name.clone(), b.value_type());
        }
        Type::Object(attrs)
    }
}

/// How a block or nested attribute's objects are collected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nesting {
    /// At most one object; null when absent.
    Single,
    List,
    Set,
    Map,
    /// Blocks only: exactly one object, never null (attributes take their defaults).
    Group,
}

#[derive(Clone, Debug)]
pub enum AttributeType {
    Typed(Type),
    /// Protocol 6 nested attributes (`attr = { ... }` syntax).
    Nested {
        nesting: Nesting,
        attributes: Vec<Attribute>,
    },
}

#[derive(Clone)]
pub struct Attribute {
    pub name: String,
    pub ty: AttributeType,
    pub description: String,
    pub required: bool,
    pub optional: bool,
    pub computed: bool,
    pub sensitive: bool,
    pub deprecated: bool,
    pub force_new: bool,
    pub default: Option<Value>,
    pub validators: Vec<Validator>,
}

impl fmt::Debug for Attribute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attribute")
            .field("name", &self.name)
            .field("ty", &self.ty)
            .field("required", &self.required)
            .field("optional", &self.optional)
            .field("computed", &self.computed)
            .field("sensitive", &self.sensitive)
            .field("force_new", &self.force_new)
            .field("default", &self.default)
            .field("validators", &self.validators.len())
            .finish()
    }
}

impl Attribute {
    /// A new attribute; it is optional until you say otherwise.
    pub fn new(name: impl Into<String>, ty: Type) -> Self {
        Attribute {
            name: name.into(),
            ty: AttributeType::Typed(ty),
            description: String::new(),
            required: false,
            optional: true,
            computed: false,
            sensitive: false,
            deprecated: false,
            force_new: false,
            default: None,
            validators: Vec::new(),
        }
    }
    pub fn string(name: impl Into<String>) -> Self {
        Self::new(name, Type::String)
    }
    pub fn number(name: impl Into<String>) -> Self {
        Self::new(name, Type::Number)
    }
    pub fn bool(name: impl Into<String>) -> Self {
        Self::new(name, Type::Bool)
    }
    /// `map(string)`, e.g. tags.
    pub fn string_map(name: impl Into<String>) -> Self {
        Self::new(name, Type::map(Type::String))
    }
    pub fn string_list(name: impl Into<String>) -> Self {
        Self::new(name, Type::list(Type::String))
    }
    pub fn string_set(name: impl Into<String>) -> Self {
        Self::new(name, Type::set(Type::String))
    }
    /// A nested attribute: `name = { ... }` (Single) or `name = [{ ... }]` (List/Set) or a
    /// map of objects. `Nesting::Group` is not allowed here.
    pub fn nested(name: impl Into<String>, nesting: Nesting, attributes: Vec<Attribute>) -> Self {
        assert!(
            nesting != Nesting::Group,
            "nested attributes cannot use Group nesting"
        );
        Attribute {
            ty: AttributeType::Nested {
                nesting,
                attributes,
            },
            ..Self::new(name, Type::Dynamic)
        }
    }

    pub fn required(mut self) -> Self {
        self.required = true;
        self.optional = false;
        self.computed = false;
        self
    }
    pub fn optional(mut self) -> Self {
        self.required = false;
        self.optional = true;
        self
    }
    /// Set by the provider only (an output).
    pub fn computed(mut self) -> Self {
        self.required = false;
        self.optional = false;
        self.computed = true;
        self
    }
    /// Optional, and the provider fills it in when the user does not.
    pub fn optional_computed(mut self) -> Self {
        self.required = false;
        self.optional = true;
        self.computed = true;
        self
    }
    pub fn sensitive(mut self) -> Self {
        self.sensitive = true;
        self
    }
    pub fn deprecated(mut self) -> Self {
        self.deprecated = true;
        self
    }
    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = d.into();
        self
    }
    /// Changing this attribute replaces the object.
    pub fn force_new(mut self) -> Self {
        self.force_new = true;
        self
    }
    /// Value used when the configuration leaves the attribute null. Makes it optional+computed.
    pub fn default(mut self, v: impl Into<Value>) -> Self {
        self.default = Some(v.into());
        self.optional_computed()
    }
    pub fn validate(
        mut self,
        f: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.validators.push(Arc::new(f));
        self
    }

    pub fn value_type(&self) -> Type {
        match &self.ty {
            AttributeType::Typed(t) => t.clone(),
            AttributeType::Nested {
                nesting,
                attributes,
            } => {
                let obj = Type::Object(
                    attributes
                        .iter()
                        .map(|a| (a.name.clone(), a.value_type()))
                        .collect(),
                );
                match nesting {
                    Nesting::Single | Nesting::Group => obj,
                    Nesting::List => Type::list(obj),
                    Nesting::Set => Type::set(obj),
                    Nesting::Map => Type::map(obj),
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
pub struct NestedBlock {
    pub type_name: String,
    pub block: Block,
    pub nesting: Nesting,
    pub min_items: i64,
    pub max_items: i64,
}

impl NestedBlock {
    pub fn new(type_name: impl Into<String>, nesting: Nesting, block: Block) -> Self {
        NestedBlock {
            type_name: type_name.into(),
            block,
            nesting,
            min_items: 0,
            max_items: 0,
        }
    }
    pub fn single(type_name: impl Into<String>, block: Block) -> Self {
        Self::new(type_name, Nesting::Single, block)
    }
    pub fn list(type_name: impl Into<String>, block: Block) -> Self {
        Self::new(type_name, Nesting::List, block)
    }
    pub fn set(type_name: impl Into<String>, block: Block) -> Self {
        Self::new(type_name, Nesting::Set, block)
    }
    pub fn min_items(mut self, n: i64) -> Self {
        self.min_items = n;
        self
    }
    pub fn max_items(mut self, n: i64) -> Self {
        self.max_items = n;
        self
    }
    pub fn value_type(&self) -> Type {
        let obj = self.block.implied_type();
        match self.nesting {
            Nesting::Single | Nesting::Group => obj,
            Nesting::List => Type::list(obj),
            Nesting::Set => Type::set(obj),
            Nesting::Map => Type::map(obj),
        }
    }
}

/// Runs every attribute validator in `block` against `value`, recursing into nested
/// attributes and blocks, and reports failures at the attribute's full path. Unknown and null
/// values are skipped: they are checked again when known.
pub fn run_validators(block: &Block, value: &Value, at: &AttributePath, diags: &mut Diagnostics) {
    for a in &block.attributes {
        let v = value.get(&a.name);
        let path = at.clone().attr(&a.name);
        if v.is_null() || v.is_unknown() {
            continue;
        }
        for check in &a.validators {
            if let Err(msg) = check(v) {
                diags.push(Diagnostic::error_at(
                    path.clone(),
                    format!("Invalid value for \"{}\"", a.name),
                    msg,
                ));
            }
        }
        if let AttributeType::Nested {
            nesting,
            attributes,
        } = &a.ty
        {
            let inner = Block {
                attributes: attributes.clone(),
                ..Block::default()
            };
            for_each_nested(*nesting, v, &path, |elem, p| {
                run_validators(&inner, elem, &p, diags)
            });
        }
    }
    for b in &block.blocks {
        let v = value.get(&b.type_name);
        let path = at.clone().attr(&b.type_name);
        for_each_nested(b.nesting, v, &path, |elem, p| {
            run_validators(&b.block, elem, &p, diags)
        });
    }
}

fn for_each_nested(
    nesting: Nesting,
    v: &Value,
    path: &AttributePath,
    mut f: impl FnMut(&Value, AttributePath),
) {
    match (nesting, v) {
        (Nesting::Single | Nesting::Group, Value::Object(_)) => f(v, path.clone()),
        (Nesting::List, Value::List(items)) => {
            for (i, item) in items.iter().enumerate() {
                f(item, path.clone().index(i as i64));
            }
        }
        // Set elements have no address Terraform can show; point at the set itself.
        (Nesting::Set, Value::Set(items)) => {
            for item in items {
                f(item, path.clone());
            }
        }
        (Nesting::Map, Value::Map(items)) => {
            for (k, item) in items {
                f(item, path.clone().key(k));
            }
        }
        _ => {}
    }
}

/// Ready-made validators. Each message says what is allowed.
pub mod validators {
    use super::Value;

    /// String length in characters, inclusive bounds.
    pub fn string_length(
        min: usize,
        max: usize,
    ) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
        move |v| {
            let n = v.as_str().map(|s| s.chars().count()).unwrap_or(0);
            if n < min || n > max {
                Err(format!(
                    "must be {min} to {max} characters long, got {n} characters"
                ))
            } else {
                Ok(())
            }
        }
    }

    /// Every character satisfies `allowed`; `what` describes the allowed set for the message.
    pub fn string_chars(
        what: &'static str,
        allowed: fn(char) -> bool,
    ) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
        move |v| match v.as_str().and_then(|s| s.chars().find(|c| !allowed(*c))) {
            Some(c) => Err(format!("may contain only {what}; found {c:?}")),
            None => Ok(()),
        }
    }

    /// A whole number within inclusive bounds.
    pub fn int_between(min: i64, max: i64) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
        move |v| match v.as_i64() {
            Some(i) if (min..=max).contains(&i) => Ok(()),
            Some(i) => Err(format!("must be between {min} and {max}, got {i}")),
            None => Err(format!(
                "must be a whole number between {min} and {max}, got {}",
                v.as_number().map(|n| n.to_string()).unwrap_or_default()
            )),
        }
    }

    /// One of a fixed set of strings.
    pub fn one_of(
        allowed: &'static [&'static str],
    ) -> impl Fn(&Value) -> Result<(), String> + Send + Sync {
        move |v| match v.as_str() {
            Some(s) if allowed.contains(&s) => Ok(()),
            other => Err(format!(
                "must be one of {}, got {:?}",
                allowed.join(", "),
                other.unwrap_or_default()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::new(0)
            .attribute(
                Attribute::string("name")
                    .required()
                    .validate(validators::string_length(1, 5)),
            )
            .attribute(
                Attribute::number("n")
                    .default(3)
                    .validate(validators::int_between(1, 9)),
            )
            .block(NestedBlock::list(
                "rule",
                Block::new()
                    .attribute(Attribute::string("kind").validate(validators::one_of(&["a", "b"]))),
            ))
    }

    #[test]
    fn implied_type_includes_blocks() {
        let t = schema().implied_type();
        assert_eq!(
            t,
            Type::object([
                ("name", Type::String),
                ("n", Type::Number),
                ("rule", Type::list(Type::object([("kind", Type::String)]))),
            ])
        );
    }

    #[test]
    fn validators_report_full_paths_and_skip_unknowns() {
        let s = schema();
        let cfg = Value::object([
            ("name", Value::string("toolong")),
            ("n", Value::Unknown),
            (
                "rule",
                Value::List(vec![
                    Value::object([("kind", "a".into())]),
                    Value::object([("kind", "z".into())]),
                ]),
            ),
        ]);
        let mut d = Diagnostics::new();
        run_validators(&s.block, &cfg, &AttributePath::root(), &mut d);
        let paths: Vec<String> = d
            .iter()
            .map(|d| d.path.clone().unwrap().to_string())
            .collect();
        assert_eq!(paths, vec!["name", "rule[1].kind"]);
        assert!(d.items[0].detail.contains("1 to 5 characters"));
    }
}
