//! Typed access to the attributes of one ONNX node, with defaults and validation.
//!
//! Invariant: every attribute the converter reads (or explicitly ignores) is marked as
//! used; [`Attrs::finish`] rejects any attribute left unread, so an attribute we do not
//! understand is never silently dropped.

use std::cell::RefCell;
use std::collections::HashSet;

use super::proto::{attr_type, AttributeProto, TensorProto};
use crate::{Error, Result};

/// The attributes of one node, looked up by name.
pub(crate) struct Attrs<'a> {
    node: &'a str,
    op: &'a str,
    list: &'a [AttributeProto],
    used: RefCell<HashSet<&'a str>>,
}

impl<'a> Attrs<'a> {
    /// Wraps the attribute list of node `node` of type `op`.
    pub(crate) fn new(node: &'a str, op: &'a str, list: &'a [AttributeProto]) -> Result<Self> {
        let mut seen = HashSet::new();
        for a in list {
            if !seen.insert(a.name.as_str()) {
                return Err(Error::BadAttribute {
                    node: node.into(),
                    op: op.into(),
                    attr: a.name.clone(),
                    reason: "given more than once".into(),
                });
            }
        }
        Ok(Attrs {
            node,
            op,
            list,
            used: RefCell::new(HashSet::new()),
        })
    }

    /// A `BadAttribute` error for attribute `attr` of this node.
    pub(crate) fn err(&self, attr: &str, reason: impl Into<String>) -> Error {
        Error::BadAttribute {
            node: self.node.into(),
            op: self.op.into(),
            attr: attr.into(),
            reason: reason.into(),
        }
    }

    /// Whether the attribute is present (does not mark it used).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.list.iter().any(|a| a.name == name)
    }

    fn get(&self, name: &str, want: i32) -> Result<Option<&'a AttributeProto>> {
        let Some(a) = self.list.iter().find(|a| a.name == name) else {
            return Ok(None);
        };
        self.used.borrow_mut().insert(a.name.as_str());
        if !a.ref_attr_name.is_empty() {
            return Err(self.err(name, "function attribute references are not supported"));
        }
        if a.r#type != attr_type::UNDEFINED && a.r#type != want {
            return Err(self.err(
                name,
                format!("has attribute type {} where {} is expected", a.r#type, want),
            ));
        }
        Ok(Some(a))
    }

    /// Marks attributes as read without interpreting them (documented no-ops).
    pub(crate) fn ignore(&self, names: &[&str]) {
        for a in self.list {
            if names.contains(&a.name.as_str()) {
                self.used.borrow_mut().insert(a.name.as_str());
            }
        }
    }

    /// An optional integer.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>> {
        Ok(self.get(name, attr_type::INT)?.map(|a| a.i))
    }

    /// An integer with a default.
    pub(crate) fn int_or(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self.int(name)?.unwrap_or(default))
    }

    /// A boolean stored as an integer 0/1.
    pub(crate) fn bool_or(&self, name: &str, default: bool) -> Result<bool> {
        match self.int(name)? {
            None => Ok(default),
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(v) => Err(self.err(name, format!("must be 0 or 1, got {v}"))),
        }
    }

    /// A required integer.
    pub(crate) fn int_req(&self, name: &str) -> Result<i64> {
        self.int(name)?
            .ok_or_else(|| self.err(name, "required attribute is missing"))
    }

    /// A strictly positive integer, as usize.
    pub(crate) fn positive(&self, name: &str, v: i64) -> Result<usize> {
        if v <= 0 {
            return Err(self.err(name, format!("must be positive, got {v}")));
        }
        usize::try_from(v).map_err(|_| self.err(name, format!("{v} is too large")))
    }

    /// An optional float.
    pub(crate) fn float(&self, name: &str) -> Result<Option<f32>> {
        Ok(self.get(name, attr_type::FLOAT)?.map(|a| a.f))
    }

    /// A float with a default.
    pub(crate) fn float_or(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self.float(name)?.unwrap_or(default))
    }

    /// An optional UTF-8 string.
    pub(crate) fn string(&self, name: &str) -> Result<Option<String>> {
        match self.get(name, attr_type::STRING)? {
            None => Ok(None),
            Some(a) => String::from_utf8(a.s.clone())
                .map(Some)
                .map_err(|_| self.err(name, "is not valid UTF-8")),
        }
    }

    /// A string with a default.
    pub(crate) fn string_or(&self, name: &str, default: &str) -> Result<String> {
        Ok(self.string(name)?.unwrap_or_else(|| default.to_string()))
    }

    /// An optional integer list.
    pub(crate) fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self.get(name, attr_type::INTS)?.map(|a| a.ints.clone()))
    }

    /// An optional float list.
    pub(crate) fn floats(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self.get(name, attr_type::FLOATS)?.map(|a| a.floats.clone()))
    }

    /// An optional string list.
    pub(crate) fn strings(&self, name: &str) -> Result<Option<Vec<String>>> {
        match self.get(name, attr_type::STRINGS)? {
            None => Ok(None),
            Some(a) => a
                .strings
                .iter()
                .map(|s| {
                    String::from_utf8(s.clone()).map_err(|_| self.err(name, "is not valid UTF-8"))
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
        }
    }

    /// An optional tensor.
    pub(crate) fn tensor(&self, name: &str) -> Result<Option<&'a TensorProto>> {
        match self.get(name, attr_type::TENSOR)? {
            None => Ok(None),
            Some(a) => {
                a.t.as_ref()
                    .map(Some)
                    .ok_or_else(|| self.err(name, "tensor attribute without a tensor"))
            }
        }
    }

    /// Fails on the first attribute that was neither read nor ignored.
    pub(crate) fn finish(&self) -> Result<()> {
        let used = self.used.borrow();
        match self.list.iter().find(|a| !used.contains(a.name.as_str())) {
            None => Ok(()),
            Some(a) => Err(self.err(&a.name, format!("not a supported attribute of {}", self.op))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int_attr(name: &str, v: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: attr_type::INT,
            i: v,
            ..Default::default()
        }
    }

    #[test]
    fn defaults_types_and_leftovers() {
        let list = vec![
            int_attr("axis", -1),
            int_attr("keepdims", 2),
            AttributeProto {
                name: "mode".into(),
                r#type: attr_type::STRING,
                s: b"edge".to_vec(),
                ..Default::default()
            },
            int_attr("bogus", 1),
        ];
        let a = Attrs::new("n", "Op", &list).expect("unique names");
        assert_eq!(a.int_or("axis", 0).expect("int"), -1);
        assert_eq!(a.int_or("missing", 7).expect("default"), 7);
        assert!(a.bool_or("keepdims", true).is_err());
        assert_eq!(a.string_or("mode", "constant").expect("string"), "edge");
        // Reading a string attribute as a float is a type error naming the attribute.
        let e = a.float("mode").expect_err("type mismatch");
        assert!(e.to_string().contains("'mode'"), "{e}");
        let e = a.finish().expect_err("bogus left unread");
        assert!(e.to_string().contains("'bogus'"), "{e}");
        a.ignore(&["bogus"]);
        assert!(a.finish().is_ok());
    }

    #[test]
    fn duplicate_attribute_is_rejected() {
        let list = vec![int_attr("axis", 0), int_attr("axis", 1)];
        assert!(Attrs::new("n", "Op", &list).is_err());
    }
}
