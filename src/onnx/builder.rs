//! Building ONNX models in Rust: a small `ModelProto` builder for tests, benchmarks and
//! examples across the crate (e.g. scheduling tests that chain `ai.vnpu.test::Spin`
//! nodes, with cargo feature `test-ops`), so no Python or checked-in `.onnx` file is
//! needed.
//!
//! Invariants: the built model imports the default opset given to
//! [`ModelBuilder::new`] (and, with feature `test-ops`, the test domain `ai.vnpu.test`
//! version 1); tensors are stored as
//! little-endian `raw_data`; nothing is validated here (the importer does that), so
//! tests can also build deliberately broken models.

use prost::Message;

use super::proto::{
    attr_type, tensor_shape_proto::Dimension, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
#[cfg(feature = "test-ops")]
use super::TEST_DOMAIN;
use crate::ir::{DType, Tensor, TensorData};

/// Builds a `ModelProto` step by step.
#[derive(Debug, Clone)]
pub struct ModelBuilder {
    model: ModelProto,
}

impl ModelBuilder {
    /// An empty model whose graph is named `name`, importing default opset `opset`.
    pub fn new(name: &str, opset: i64) -> ModelBuilder {
        ModelBuilder {
            model: ModelProto {
                ir_version: 8,
                producer_name: "vnpu".into(),
                opset_import: Vec::from([
                    OperatorSetIdProto {
                        domain: String::new(),
                        version: opset,
                    },
                    #[cfg(feature = "test-ops")]
                    OperatorSetIdProto {
                        domain: TEST_DOMAIN.into(),
                        version: 1,
                    },
                ]),
                graph: Some(GraphProto {
                    name: name.into(),
                    ..GraphProto::default()
                }),
                ..ModelProto::default()
            },
        }
    }

    fn graph(&mut self) -> &mut GraphProto {
        self.model.graph.get_or_insert_with(GraphProto::default)
    }

    /// Adds a graph input with a static shape.
    pub fn input(self, name: &str, dtype: DType, shape: &[usize]) -> ModelBuilder {
        let dims: Vec<Option<usize>> = shape.iter().copied().map(Some).collect();
        self.input_dynamic(name, dtype, &dims)
    }

    /// Adds a graph input; `None` dims are symbolic (`dim_param` `"d<index>"`).
    pub fn input_dynamic(
        mut self,
        name: &str,
        dtype: DType,
        dims: &[Option<usize>],
    ) -> ModelBuilder {
        let vi = value_info(name, Some(dtype), Some(dims));
        self.graph().input.push(vi);
        self
    }

    /// Adds an initializer (a constant weight).
    pub fn initializer(mut self, name: &str, t: &Tensor) -> ModelBuilder {
        let tp = tensor_proto(name, t);
        self.graph().initializer.push(tp);
        self
    }

    /// Adds a default-domain node.
    pub fn node(
        self,
        op_type: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> ModelBuilder {
        self.node_in("", op_type, name, inputs, outputs, attrs)
    }

    /// Adds a node of operator domain `domain` (e.g. the test domain `ai.vnpu.test`).
    pub fn node_in(
        mut self,
        domain: &str,
        op_type: &str,
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> ModelBuilder {
        let n = node_proto(domain, op_type, name, inputs, outputs, attrs);
        self.graph().node.push(n);
        self
    }

    /// Adds a graph output (type left to the importer's inference).
    pub fn output(mut self, name: &str) -> ModelBuilder {
        let vi = value_info(name, None, None);
        self.graph().output.push(vi);
        self
    }

    /// The model message.
    pub fn build(self) -> ModelProto {
        self.model
    }

    /// The encoded `.onnx` bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.model.encode_to_vec()
    }
}

/// A `NodeProto` of operator domain `domain` (empty for the default domain).
pub fn node_proto(
    domain: &str,
    op_type: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        op_type: op_type.into(),
        domain: domain.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..NodeProto::default()
    }
}

/// A `ValueInfoProto`; `dims` entries that are `None` become `dim_param` `"d<index>"`.
pub fn value_info(
    name: &str,
    dtype: Option<DType>,
    dims: Option<&[Option<usize>]>,
) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .enumerate()
            .map(|(i, d)| Dimension {
                dim_value: d.map(|v| v as i64),
                dim_param: d.is_none().then(|| format!("d{i}")),
                ..Dimension::default()
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: dtype.map(|dt| TypeProto {
            tensor_type: Some(type_proto::Tensor {
                elem_type: dt.onnx_code(),
                shape,
            }),
            ..TypeProto::default()
        }),
        ..ValueInfoProto::default()
    }
}

/// An IR tensor as a `TensorProto` with little-endian `raw_data`.
pub fn tensor_proto(name: &str, t: &Tensor) -> TensorProto {
    let raw_data: Vec<u8> = match &t.data {
        TensorData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        TensorData::U8(v) | TensorData::Bool(v) => v.clone(),
        TensorData::I8(v) => v.iter().map(|&x| x as u8).collect(),
        TensorData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        TensorData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        TensorData::Mapped { .. } => t.bytes().to_vec(),
    };
    TensorProto {
        name: name.into(),
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: t.dtype().onnx_code(),
        raw_data,
        ..TensorProto::default()
    }
}

/// Attribute constructors.
pub mod attr {
    use super::*;

    fn base(name: &str, ty: i32) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            r#type: ty,
            ..AttributeProto::default()
        }
    }

    /// An `INT` attribute.
    pub fn int(name: &str, v: i64) -> AttributeProto {
        AttributeProto {
            i: v,
            ..base(name, attr_type::INT)
        }
    }

    /// A `FLOAT` attribute.
    pub fn float(name: &str, v: f32) -> AttributeProto {
        AttributeProto {
            f: v,
            ..base(name, attr_type::FLOAT)
        }
    }

    /// A `STRING` attribute.
    pub fn string(name: &str, v: &str) -> AttributeProto {
        AttributeProto {
            s: v.as_bytes().to_vec(),
            ..base(name, attr_type::STRING)
        }
    }

    /// An `INTS` attribute.
    pub fn ints(name: &str, v: &[i64]) -> AttributeProto {
        AttributeProto {
            ints: v.to_vec(),
            ..base(name, attr_type::INTS)
        }
    }

    /// A `FLOATS` attribute.
    pub fn floats(name: &str, v: &[f32]) -> AttributeProto {
        AttributeProto {
            floats: v.to_vec(),
            ..base(name, attr_type::FLOATS)
        }
    }

    /// A `STRINGS` attribute.
    pub fn strings(name: &str, v: &[&str]) -> AttributeProto {
        AttributeProto {
            strings: v.iter().map(|s| s.as_bytes().to_vec()).collect(),
            ..base(name, attr_type::STRINGS)
        }
    }

    /// A `TENSOR` attribute.
    pub fn tensor(name: &str, t: &Tensor) -> AttributeProto {
        AttributeProto {
            t: Some(tensor_proto("", t)),
            ..base(name, attr_type::TENSOR)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx::{import_model, ImportOptions};

    #[cfg(feature = "test-ops")]
    #[test]
    fn spin_chain_round_trips_through_the_importer() {
        use crate::ir::Op;
        let bytes = ModelBuilder::new("spin3", 17)
            .input("x", DType::F32, &[1, 4])
            .node_in(
                TEST_DOMAIN,
                "Spin",
                "s0",
                &["x"],
                &["a"],
                vec![attr::int("micros", 100)],
            )
            .node_in(
                TEST_DOMAIN,
                "Spin",
                "s1",
                &["a"],
                &["b"],
                vec![attr::int("micros", 200)],
            )
            .node("Add", "add", &["b", "k"], &["y"], vec![])
            .initializer("k", &Tensor::from_f32(vec![4], vec![1.0; 4]))
            .output("y")
            .to_bytes();
        let g = import_model(&bytes, &ImportOptions::default()).expect("imports");
        assert_eq!(g.name, "spin3");
        let ops: Vec<&Op> = g.nodes.iter().map(|n| &n.op).collect();
        assert_eq!(
            ops[..2],
            [&Op::Spin { micros: 100 }, &Op::Spin { micros: 200 }]
        );
        assert_eq!(g.shape(g.outputs[0]), Some(&[1, 4][..]));
    }

    #[test]
    fn every_tensor_type_and_attribute_kind_encodes() {
        let tensors = [
            Tensor::from_f32(vec![2], vec![1.5, -2.0]),
            Tensor::from_i64(vec![], vec![-7]),
            Tensor::new(vec![2], TensorData::I32(vec![3, -4])),
            Tensor::new(vec![2], TensorData::I8(vec![-1, 2])),
            Tensor::new(vec![1], TensorData::U8(vec![200])),
            Tensor::new(vec![2], TensorData::Bool(vec![1, 0])),
        ];
        let mut b = ModelBuilder::new("t", 13).input("x", DType::F32, &[1]);
        for (i, t) in tensors.iter().enumerate() {
            b = b
                .node(
                    "Constant",
                    &format!("c{i}"),
                    &[],
                    &[&format!("v{i}")],
                    vec![attr::tensor("value", t)],
                )
                .output(&format!("v{i}"));
        }
        let g = import_model(&b.to_bytes(), &ImportOptions::default()).expect("imports");
        for (i, t) in tensors.iter().enumerate() {
            let v = g.value(g.outputs[i]);
            assert_eq!(v.konst.as_deref(), Some(t), "tensor {i}");
        }
        let a = [
            attr::float("f", 0.5),
            attr::string("s", "x"),
            attr::ints("is", &[1]),
            attr::floats("fs", &[1.0]),
            attr::strings("ss", &["a"]),
        ];
        let types: Vec<i32> = a.iter().map(|x| x.r#type).collect();
        assert_eq!(
            types,
            [
                attr_type::FLOAT,
                attr_type::STRING,
                attr_type::INTS,
                attr_type::FLOATS,
                attr_type::STRINGS
            ]
        );
    }
}
