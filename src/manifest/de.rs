//! serde over [`Node`]: the typed model is deserialized from the positioned
//! tree, and every error carries the position of the value it is about.
//! [`Spanned`] lets the model keep positions for checks made after loading.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde::Deserialize;

use super::node::{Node, Pos, Value};
use crate::suggest::nearest;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeError {
    pub pos: Option<Pos>,
    pub message: String,
    pub hint: Option<String>,
}

impl fmt::Display for DeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DeError {}

impl de::Error for DeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DeError {
            pos: None,
            message: msg.to_string(),
            hint: None,
        }
    }

    fn missing_field(field: &'static str) -> Self {
        DeError {
            pos: None,
            message: format!("missing key `{field}`"),
            hint: None,
        }
    }

    fn unknown_field(field: &str, expected: &'static [&'static str]) -> Self {
        let hint = match nearest(field, expected) {
            Some(n) => format!("did you mean `{n}`?"),
            None if expected.is_empty() => "this table takes no keys".to_string(),
            None => format!("the keys here are: {}", expected.join(", ")),
        };
        DeError {
            pos: None,
            message: format!("unknown key `{field}`"),
            hint: Some(hint),
        }
    }

    fn unknown_variant(variant: &str, expected: &'static [&'static str]) -> Self {
        let hint = match nearest(variant, expected) {
            Some(n) => format!("did you mean `{n}`?"),
            None => format!("expected one of: {}", expected.join(", ")),
        };
        DeError {
            pos: None,
            message: format!("unknown value `{variant}`"),
            hint: Some(hint),
        }
    }
}

fn at<T>(pos: Pos, r: Result<T, DeError>) -> Result<T, DeError> {
    r.map_err(|mut e| {
        e.pos.get_or_insert(pos);
        e
    })
}

/// Deserializes a `T` from a node.
pub fn from_node<'de, T: Deserialize<'de>>(node: &Node) -> Result<T, DeError> {
    T::deserialize(NodeDe(node))
}

pub struct NodeDe<'a>(pub &'a Node);

const SPANNED: &str = "$composer::Spanned";
const SPANNED_FIELDS: &[&str] = &["$line", "$column", "$value"];

impl<'de> Deserializer<'de> for NodeDe<'_> {
    type Error = DeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        let node = self.0;
        at(
            node.pos,
            match &node.value {
                Value::Null => visitor.visit_unit(),
                Value::Bool(b) => visitor.visit_bool(*b),
                Value::Int(i) => visitor.visit_i64(*i),
                Value::Float(f) => visitor.visit_f64(*f),
                Value::Str(s) => visitor.visit_str(s),
                Value::Seq(items) => visitor.visit_seq(Seq {
                    items: items.iter(),
                }),
                Value::Map(entries) => visitor.visit_map(Map {
                    entries: entries.iter(),
                    value: None,
                }),
            },
        )
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, DeError> {
        match self.0.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        if name == SPANNED {
            return visitor.visit_map(SpannedAccess {
                node: self.0,
                next: 0,
            });
        }
        let _ = fields;
        match &self.0.value {
            Value::Map(_) => self.deserialize_any(visitor),
            _ => Err(DeError {
                pos: Some(self.0.pos),
                message: format!("expected a table, found {}", self.0.describe()),
                hint: None,
            }),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        let node = self.0;
        let r = match &node.value {
            Value::Str(s) => visitor.visit_enum(s.as_str().into_deserializer()),
            Value::Map(entries) if entries.len() == 1 => visitor.visit_enum(Enum {
                key: &entries[0].0,
                value: &entries[0].1,
            }),
            _ => Err(DeError {
                pos: Some(node.pos),
                message: format!(
                    "expected one of {}, found {}",
                    variants.join(", "),
                    node.describe()
                ),
                hint: None,
            }),
        };
        at(node.pos, r)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, DeError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

struct Seq<'a> {
    items: std::slice::Iter<'a, Node>,
}

impl<'de> SeqAccess<'de> for Seq<'_> {
    type Error = DeError;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, DeError> {
        match self.items.next() {
            Some(n) => at(n.pos, seed.deserialize(NodeDe(n))).map(Some),
            None => Ok(None),
        }
    }
}

struct Map<'a> {
    entries: std::slice::Iter<'a, (Node, Node)>,
    value: Option<&'a Node>,
}

impl<'de> MapAccess<'de> for Map<'_> {
    type Error = DeError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match self.entries.next() {
            Some((k, v)) => {
                self.value = Some(v);
                at(k.pos, seed.deserialize(NodeDe(k))).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let v = self
            .value
            .take()
            .expect("next_value_seed after next_key_seed");
        at(v.pos, seed.deserialize(NodeDe(v)))
    }
}

struct Enum<'a> {
    key: &'a Node,
    value: &'a Node,
}

impl<'de, 'a> EnumAccess<'de> for Enum<'a> {
    type Error = DeError;
    type Variant = NodeDe<'a>;
    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), DeError> {
        let v = at(self.key.pos, seed.deserialize(NodeDe(self.key)))?;
        Ok((v, NodeDe(self.value)))
    }
}

impl<'de> VariantAccess<'de> for NodeDe<'_> {
    type Error = DeError;
    fn unit_variant(self) -> Result<(), DeError> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, DeError> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, DeError> {
        self.deserialize_any(visitor)
    }
}

struct SpannedAccess<'a> {
    node: &'a Node,
    next: usize,
}

impl<'de> MapAccess<'de> for SpannedAccess<'_> {
    type Error = DeError;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, DeError> {
        match SPANNED_FIELDS.get(self.next) {
            Some(k) => seed.deserialize((*k).into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, DeError> {
        let i = self.next;
        self.next += 1;
        match i {
            0 => seed.deserialize(self.node.pos.line.into_deserializer()),
            1 => seed.deserialize(self.node.pos.column.into_deserializer()),
            _ => seed.deserialize(NodeDe(self.node)),
        }
    }
}

/// A value and the position it was written at.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Spanned<T> {
    pub pos: Pos,
    pub value: T,
}

impl<T> Spanned<T> {
    pub fn new(pos: Pos, value: T) -> Self {
        Spanned { pos, value }
    }
}

impl<T> std::ops::Deref for Spanned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Spanned<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Spanned<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Spanned<T>, A::Error> {
                let mut pos = Pos::default();
                let mut value = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "$line" => pos.line = map.next_value()?,
                        "$column" => pos.column = map.next_value()?,
                        _ => value = Some(map.next_value()?),
                    }
                }
                let value = value.ok_or_else(|| de::Error::missing_field("$value"))?;
                Ok(Spanned { pos, value })
            }
        }
        d.deserialize_struct(SPANNED, SPANNED_FIELDS, V(PhantomData))
    }
}

impl<T: schemars::JsonSchema> schemars::JsonSchema for Spanned<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::super::node::toml_doc;
    use super::*;

    #[derive(Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct T {
        name: Spanned<String>,
        #[serde(default)]
        size: Option<u32>,
    }

    #[test]
    fn spans_and_errors() {
        let n = toml_doc::parse("name = \"x\"\nsize = 5\n").unwrap();
        let t: T = from_node(&n).unwrap();
        assert_eq!(t.name.pos, Pos { line: 1, column: 8 });
        assert_eq!(t.size, Some(5));

        let n = toml_doc::parse("name = \"x\"\nsiz = 5\n").unwrap();
        let e = from_node::<T>(&n).unwrap_err();
        assert_eq!(e.pos, Some(Pos { line: 2, column: 1 }));
        assert_eq!(e.hint.as_deref(), Some("did you mean `size`?"));

        let n = toml_doc::parse("name = \"x\"\nsize = -1\n").unwrap();
        let e = from_node::<T>(&n).unwrap_err();
        assert_eq!(e.pos, Some(Pos { line: 2, column: 8 }));

        let n = toml_doc::parse("size = 1\n").unwrap();
        let e = from_node::<T>(&n).unwrap_err();
        assert!(e.message.contains("name"), "{}", e.message);
        assert_eq!(e.pos, Some(Pos { line: 1, column: 1 }));
    }
}
