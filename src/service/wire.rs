//! The service-mode wire protocol: requests from a client, responses from the daemon.
//!
//! One message per packet (see [`super::sock`]), at most [`MAX_MESSAGE`] bytes:
//! `u16 tag`, then the fields in order, little-endian; strings and lists carry a `u32`
//! length that is checked against what remains before anything is allocated. Model
//! files and shared memory travel as descriptors beside the bytes, never inside them.
//! Decoding untrusted bytes never panics: every malformed message is a [`WireError`].

use crate::runtime::{CtrlParams, ElemType, Quant, Roi, TensorDesc, TensorLayout};

/// Protocol version exchanged in `Hello`; a daemon refuses other versions.
pub const PROTOCOL_VERSION: u32 = 2;
/// Largest message in bytes.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Length of a session token.
pub const TOKEN_LEN: usize = 16;

/// Why bytes are not a valid message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed service message: {0}")]
pub struct WireError(pub String);

type WResult<T> = std::result::Result<T, WireError>;

/// A range of shared memory the client registered (`MapMemory`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufRef {
    /// Region id from `Response::Region`.
    pub region: u64,
    /// Offset of the first byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// A model of a loaded pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelRef {
    /// Pack id from `Response::Models`.
    pub pack: u64,
    /// Index of the model in the pack.
    pub index: u32,
}

/// One model of a task: its planes and outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartRef {
    /// The model.
    pub model: ModelRef,
    /// Planes of each input.
    pub inputs: Vec<Vec<BufRef>>,
    /// Each output's memory.
    pub outputs: Vec<BufRef>,
}

/// An NV12 frame for ROI inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef {
    /// Y plane.
    pub y: BufRef,
    /// UV plane.
    pub uv: BufRef,
    /// Width, height, Y stride, UV stride.
    pub dims: [u32; 4],
}

/// What one loaded model looks like to a client.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInfo {
    /// Model name.
    pub name: String,
    /// Inputs.
    pub inputs: Vec<TensorDesc>,
    /// Outputs.
    pub outputs: Vec<TensorDesc>,
    /// The compiler's latency estimate in µs.
    pub estimate_us: u64,
}

/// A client's request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// First message on every connection; `token` joins the caller's existing session.
    Hello {
        version: u32,
        token: Option<[u8; TOKEN_LEN]>,
    },
    /// Load the model files passed as `count` descriptors (compiled or ONNX) as one pack.
    LoadModels { count: u32 },
    /// Release a pack.
    ReleaseModels { pack: u64 },
    /// Map the shared memory passed as one descriptor (`len` bytes).
    MapMemory { len: u64 },
    /// Unmap a region (tasks using it keep it alive until they end).
    UnmapMemory { region: u64 },
    /// Submit a task of one or more models. Its end is stored in end slot `slot`;
    /// `reservation` (0 = none) is the slot of the assembly it completes; the ended tasks
    /// in `forget` are released first.
    Submit {
        parts: Vec<PartRef>,
        ctrl: CtrlParams,
        slot: u32,
        reservation: u64,
        forget: Vec<u64>,
    },
    /// Submit ROI inference of one model on an NV12 frame.
    SubmitRoi {
        model: ModelRef,
        frame: FrameRef,
        rois: Vec<Roi>,
        outputs: Vec<BufRef>,
        ctrl: CtrlParams,
        slot: u32,
        forget: Vec<u64>,
    },
    /// Wait for a task (`timeout_ms` 0 = no limit).
    Wait { task: u64, timeout_ms: u64 },
    /// Release a task.
    Release { task: u64 },
    /// Daemon status as JSON.
    Status,
    /// Release tasks that have ended (the client saw their ends, so nothing can still
    /// touch their memory).
    Forget { tasks: Vec<u64> },
    /// Reserve room under the client's task limit for a task being assembled (`more`).
    Reserve,
    /// Give back a reservation whose task will never be submitted.
    Unreserve { reservation: u64 },
}

/// The daemon's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// Session joined or created; a new session comes with its end slots (`slots` of
    /// them) as a descriptor.
    Hello {
        token: [u8; TOKEN_LEN],
        client: u64,
        slots: u32,
    },
    /// A pack was loaded.
    Models { pack: u64, models: Vec<ModelInfo> },
    /// A region was mapped.
    Region { region: u64 },
    /// A task was submitted.
    Task { task: u64 },
    /// Room for a task being assembled was reserved.
    Reserved { reservation: u64 },
    /// The request succeeded (a task ended well, a release happened, ...).
    Ok,
    /// Status JSON.
    Status { json: String },
    /// The request failed with this hbDNN code.
    Error { code: i32, detail: String },
}

/// Appends fields to a message.
#[derive(Debug, Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f32(&mut self, v: f32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(n as u32);
    }
    fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn buf(&mut self, b: &BufRef) {
        self.u64(b.region);
        self.u64(b.offset);
        self.u64(b.len);
    }
    fn model(&mut self, m: &ModelRef) {
        self.u64(m.pack);
        self.u32(m.index);
    }
    fn ctrl(&mut self, c: &CtrlParams) {
        self.u32(c.core_mask);
        self.u8(c.priority);
        self.i64(c.custom_id);
    }
    fn i32s(&mut self, v: &[i32]) {
        self.len(v.len());
        v.iter().for_each(|&x| self.i32(x));
    }
    fn u64s(&mut self, v: &[u64]) {
        self.len(v.len());
        v.iter().for_each(|&x| self.u64(x));
    }
    fn desc(&mut self, d: &TensorDesc) {
        self.str(&d.name);
        self.i32s(&d.valid_shape);
        self.i32s(&d.aligned_shape);
        self.i32(d.layout as i32);
        self.i32(d.elem as i32);
        match &d.quant {
            Quant::None => self.u8(0),
            Quant::Scale {
                axis,
                scale,
                zero_point,
            } => {
                self.u8(1);
                self.i32(*axis);
                self.len(scale.len());
                scale.iter().for_each(|&s| self.f32(s));
                self.len(zero_point.len());
                zero_point.iter().for_each(|&z| self.u8(z as u8));
            }
        }
        self.u64(d.aligned_byte_size as u64);
        self.i32s(&d.stride);
    }
}

/// Reads fields from a message, bounds-checked.
#[derive(Debug)]
pub struct Dec<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Dec<'a> {
    /// A reader over `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Dec { b, at: 0 }
    }
    fn take(&mut self, n: usize) -> WResult<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| WireError(format!("truncated at byte {}", self.at)))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn arr<const N: usize>(&mut self) -> WResult<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> WResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> WResult<u16> {
        Ok(u16::from_le_bytes(self.arr()?))
    }
    fn u32(&mut self) -> WResult<u32> {
        Ok(u32::from_le_bytes(self.arr()?))
    }
    fn i32(&mut self) -> WResult<i32> {
        Ok(i32::from_le_bytes(self.arr()?))
    }
    fn u64(&mut self) -> WResult<u64> {
        Ok(u64::from_le_bytes(self.arr()?))
    }
    fn i64(&mut self) -> WResult<i64> {
        Ok(i64::from_le_bytes(self.arr()?))
    }
    fn f32(&mut self) -> WResult<f32> {
        Ok(f32::from_le_bytes(self.arr()?))
    }
    /// A list length, checked against the bytes left (each element takes ≥ `min` bytes).
    fn len(&mut self, min: usize) -> WResult<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min.max(1)) > self.b.len() - self.at {
            return Err(WireError(format!("list of {n} longer than the message")));
        }
        Ok(n)
    }
    fn str(&mut self) -> WResult<String> {
        let n = self.len(1)?;
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| WireError("bad UTF-8".into()))
    }
    fn buf(&mut self) -> WResult<BufRef> {
        Ok(BufRef {
            region: self.u64()?,
            offset: self.u64()?,
            len: self.u64()?,
        })
    }
    fn bufs(&mut self) -> WResult<Vec<BufRef>> {
        let n = self.len(24)?;
        (0..n).map(|_| self.buf()).collect()
    }
    fn model(&mut self) -> WResult<ModelRef> {
        Ok(ModelRef {
            pack: self.u64()?,
            index: self.u32()?,
        })
    }
    fn ctrl(&mut self) -> WResult<CtrlParams> {
        Ok(CtrlParams {
            core_mask: self.u32()?,
            priority: self.u8()?,
            custom_id: self.i64()?,
        })
    }
    fn i32s(&mut self) -> WResult<Vec<i32>> {
        let n = self.len(4)?;
        (0..n).map(|_| self.i32()).collect()
    }
    fn u64s(&mut self) -> WResult<Vec<u64>> {
        let n = self.len(8)?;
        (0..n).map(|_| self.u64()).collect()
    }
    fn desc(&mut self) -> WResult<TensorDesc> {
        let name = self.str()?;
        let valid_shape = self.i32s()?;
        let aligned_shape = self.i32s()?;
        let layout = layout_of(self.i32()?)?;
        let elem = elem_of(self.i32()?)?;
        let quant = match self.u8()? {
            0 => Quant::None,
            1 => {
                let axis = self.i32()?;
                let n = self.len(4)?;
                let scale = (0..n).map(|_| self.f32()).collect::<WResult<_>>()?;
                let n = self.len(1)?;
                let zero_point = (0..n)
                    .map(|_| self.u8().map(|b| b as i8))
                    .collect::<WResult<_>>()?;
                Quant::Scale {
                    axis,
                    scale,
                    zero_point,
                }
            }
            t => return Err(WireError(format!("quantisation tag {t}"))),
        };
        let aligned_byte_size =
            usize::try_from(self.u64()?).map_err(|_| WireError("byte size out of range".into()))?;
        let stride = self.i32s()?;
        Ok(TensorDesc {
            name,
            valid_shape,
            aligned_shape,
            layout,
            elem,
            quant,
            aligned_byte_size,
            stride,
        })
    }
    fn end(&self) -> WResult<()> {
        if self.at == self.b.len() {
            Ok(())
        } else {
            Err(WireError(format!(
                "{} trailing bytes",
                self.b.len() - self.at
            )))
        }
    }
}

fn layout_of(v: i32) -> WResult<TensorLayout> {
    Ok(match v {
        0 => TensorLayout::Nhwc,
        2 => TensorLayout::Nchw,
        255 => TensorLayout::None,
        _ => return Err(WireError(format!("layout {v}"))),
    })
}

fn elem_of(v: i32) -> WResult<ElemType> {
    use ElemType::*;
    Ok(match v {
        0 => ImgY,
        1 => ImgNv12,
        2 => ImgNv12Separate,
        3 => ImgYuv444,
        4 => ImgRgb,
        5 => ImgBgr,
        8 => S8,
        9 => U8,
        11 => S16,
        13 => F32,
        14 => S32,
        17 => S64,
        _ => return Err(WireError(format!("element type {v}"))),
    })
}

impl Request {
    /// The message bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Request::Hello { version, token } => {
                e.u16(1);
                e.u32(*version);
                match token {
                    Some(t) => {
                        e.u8(1);
                        e.0.extend_from_slice(t);
                    }
                    None => e.u8(0),
                }
            }
            Request::LoadModels { count } => {
                e.u16(2);
                e.u32(*count);
            }
            Request::ReleaseModels { pack } => {
                e.u16(3);
                e.u64(*pack);
            }
            Request::MapMemory { len } => {
                e.u16(4);
                e.u64(*len);
            }
            Request::UnmapMemory { region } => {
                e.u16(5);
                e.u64(*region);
            }
            Request::Submit {
                parts,
                ctrl,
                slot,
                reservation,
                forget,
            } => {
                e.u16(6);
                e.ctrl(ctrl);
                e.u32(*slot);
                e.u64(*reservation);
                e.u64s(forget);
                e.len(parts.len());
                for p in parts {
                    e.model(&p.model);
                    e.len(p.inputs.len());
                    for planes in &p.inputs {
                        e.len(planes.len());
                        planes.iter().for_each(|b| e.buf(b));
                    }
                    e.len(p.outputs.len());
                    p.outputs.iter().for_each(|b| e.buf(b));
                }
            }
            Request::SubmitRoi {
                model,
                frame,
                rois,
                outputs,
                ctrl,
                slot,
                forget,
            } => {
                e.u16(7);
                e.ctrl(ctrl);
                e.u32(*slot);
                e.u64s(forget);
                e.model(model);
                e.buf(&frame.y);
                e.buf(&frame.uv);
                frame.dims.iter().for_each(|&d| e.u32(d));
                e.len(rois.len());
                for r in rois {
                    e.i32(r.left);
                    e.i32(r.top);
                    e.i32(r.right);
                    e.i32(r.bottom);
                }
                e.len(outputs.len());
                outputs.iter().for_each(|b| e.buf(b));
            }
            Request::Wait { task, timeout_ms } => {
                e.u16(8);
                e.u64(*task);
                e.u64(*timeout_ms);
            }
            Request::Release { task } => {
                e.u16(9);
                e.u64(*task);
            }
            Request::Status => e.u16(10),
            Request::Forget { tasks } => {
                e.u16(11);
                e.u64s(tasks);
            }
            Request::Reserve => e.u16(12),
            Request::Unreserve { reservation } => {
                e.u16(13);
                e.u64(*reservation);
            }
        }
        e.0
    }

    /// Parses a message (untrusted bytes).
    pub fn decode(b: &[u8]) -> WResult<Request> {
        let mut d = Dec::new(b);
        let r = match d.u16()? {
            1 => {
                let version = d.u32()?;
                let token = match d.u8()? {
                    0 => None,
                    1 => Some(d.arr()?),
                    t => return Err(WireError(format!("token flag {t}"))),
                };
                Request::Hello { version, token }
            }
            2 => Request::LoadModels { count: d.u32()? },
            3 => Request::ReleaseModels { pack: d.u64()? },
            4 => Request::MapMemory { len: d.u64()? },
            5 => Request::UnmapMemory { region: d.u64()? },
            6 => {
                let ctrl = d.ctrl()?;
                let slot = d.u32()?;
                let reservation = d.u64()?;
                let forget = d.u64s()?;
                let n = d.len(12)?;
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    let model = d.model()?;
                    let ni = d.len(4)?;
                    let inputs = (0..ni).map(|_| d.bufs()).collect::<WResult<_>>()?;
                    let outputs = d.bufs()?;
                    parts.push(PartRef {
                        model,
                        inputs,
                        outputs,
                    });
                }
                Request::Submit {
                    parts,
                    ctrl,
                    slot,
                    reservation,
                    forget,
                }
            }
            7 => {
                let ctrl = d.ctrl()?;
                let slot = d.u32()?;
                let forget = d.u64s()?;
                let model = d.model()?;
                let y = d.buf()?;
                let uv = d.buf()?;
                let dims = [d.u32()?, d.u32()?, d.u32()?, d.u32()?];
                let n = d.len(16)?;
                let rois = (0..n)
                    .map(|_| {
                        Ok(Roi {
                            left: d.i32()?,
                            top: d.i32()?,
                            right: d.i32()?,
                            bottom: d.i32()?,
                        })
                    })
                    .collect::<WResult<_>>()?;
                let outputs = d.bufs()?;
                Request::SubmitRoi {
                    model,
                    frame: FrameRef { y, uv, dims },
                    rois,
                    outputs,
                    ctrl,
                    slot,
                    forget,
                }
            }
            8 => Request::Wait {
                task: d.u64()?,
                timeout_ms: d.u64()?,
            },
            9 => Request::Release { task: d.u64()? },
            10 => Request::Status,
            11 => Request::Forget { tasks: d.u64s()? },
            12 => Request::Reserve,
            13 => Request::Unreserve {
                reservation: d.u64()?,
            },
            t => return Err(WireError(format!("request tag {t}"))),
        };
        d.end()?;
        Ok(r)
    }
}

impl Response {
    /// The message bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Response::Hello {
                token,
                client,
                slots,
            } => {
                e.u16(101);
                e.0.extend_from_slice(token);
                e.u64(*client);
                e.u32(*slots);
            }
            Response::Models { pack, models } => {
                e.u16(102);
                e.u64(*pack);
                e.len(models.len());
                for m in models {
                    e.str(&m.name);
                    e.len(m.inputs.len());
                    m.inputs.iter().for_each(|d| e.desc(d));
                    e.len(m.outputs.len());
                    m.outputs.iter().for_each(|d| e.desc(d));
                    e.u64(m.estimate_us);
                }
            }
            Response::Region { region } => {
                e.u16(103);
                e.u64(*region);
            }
            Response::Task { task } => {
                e.u16(104);
                e.u64(*task);
            }
            Response::Reserved { reservation } => {
                e.u16(108);
                e.u64(*reservation);
            }
            Response::Ok => e.u16(105),
            Response::Status { json } => {
                e.u16(106);
                e.str(json);
            }
            Response::Error { code, detail } => {
                e.u16(107);
                e.i32(*code);
                e.str(detail);
            }
        }
        e.0
    }

    /// Parses a message (from the daemon; still checked).
    pub fn decode(b: &[u8]) -> WResult<Response> {
        let mut d = Dec::new(b);
        let r = match d.u16()? {
            101 => Response::Hello {
                token: d.arr()?,
                client: d.u64()?,
                slots: d.u32()?,
            },
            102 => {
                let pack = d.u64()?;
                let n = d.len(16)?;
                let mut models = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = d.str()?;
                    let ni = d.len(8)?;
                    let inputs = (0..ni).map(|_| d.desc()).collect::<WResult<_>>()?;
                    let no = d.len(8)?;
                    let outputs = (0..no).map(|_| d.desc()).collect::<WResult<_>>()?;
                    models.push(ModelInfo {
                        name,
                        inputs,
                        outputs,
                        estimate_us: d.u64()?,
                    });
                }
                Response::Models { pack, models }
            }
            103 => Response::Region { region: d.u64()? },
            104 => Response::Task { task: d.u64()? },
            108 => Response::Reserved {
                reservation: d.u64()?,
            },
            105 => Response::Ok,
            106 => Response::Status { json: d.str()? },
            107 => Response::Error {
                code: d.i32()?,
                detail: d.str()?,
            },
            t => return Err(WireError(format!("response tag {t}"))),
        };
        d.end()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc() -> TensorDesc {
        TensorDesc {
            name: "x".into(),
            valid_shape: vec![1, 3, 4, 4],
            aligned_shape: vec![1, 3, 4, 4],
            layout: TensorLayout::Nchw,
            elem: ElemType::F32,
            quant: Quant::Scale {
                axis: 1,
                scale: vec![0.5, 0.25, 2.0],
                zero_point: vec![0, -1, 3],
            },
            aligned_byte_size: 192,
            stride: vec![192, 64, 16, 4],
        }
    }

    fn requests() -> Vec<Request> {
        let b = BufRef {
            region: 3,
            offset: 64,
            len: 192,
        };
        let ctrl = CtrlParams {
            core_mask: 2,
            priority: 255,
            custom_id: -7,
        };
        vec![
            Request::Hello {
                version: 1,
                token: None,
            },
            Request::Hello {
                version: 1,
                token: Some([9; TOKEN_LEN]),
            },
            Request::LoadModels { count: 2 },
            Request::ReleaseModels { pack: 5 },
            Request::MapMemory { len: 4096 },
            Request::UnmapMemory { region: 2 },
            Request::Submit {
                parts: vec![PartRef {
                    model: ModelRef { pack: 1, index: 0 },
                    inputs: vec![vec![b], vec![b, b]],
                    outputs: vec![b],
                }],
                ctrl,
                slot: 3,
                reservation: 9,
                forget: vec![1, 2],
            },
            Request::SubmitRoi {
                model: ModelRef { pack: 1, index: 1 },
                frame: FrameRef {
                    y: b,
                    uv: b,
                    dims: [64, 48, 64, 64],
                },
                rois: vec![Roi {
                    left: 0,
                    top: 1,
                    right: 31,
                    bottom: 30,
                }],
                outputs: vec![b],
                ctrl,
                slot: 0,
                forget: vec![],
            },
            Request::Wait {
                task: 4,
                timeout_ms: 0,
            },
            Request::Release { task: 4 },
            Request::Status,
            Request::Forget { tasks: vec![4, 5] },
            Request::Reserve,
            Request::Unreserve { reservation: 2 },
        ]
    }

    fn responses() -> Vec<Response> {
        vec![
            Response::Hello {
                token: [1; TOKEN_LEN],
                client: 7,
                slots: 256,
            },
            Response::Models {
                pack: 3,
                models: vec![ModelInfo {
                    name: "m".into(),
                    inputs: vec![desc()],
                    outputs: vec![desc(), desc()],
                    estimate_us: 1234,
                }],
            },
            Response::Region { region: 8 },
            Response::Task { task: 9 },
            Response::Reserved { reservation: 4 },
            Response::Ok,
            Response::Status { json: "{}".into() },
            Response::Error {
                code: -6000001,
                detail: "bad".into(),
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for r in requests() {
            assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        }
        for r in responses() {
            assert_eq!(Response::decode(&r.encode()).unwrap(), r);
        }
    }

    #[test]
    fn every_truncation_and_extension_is_an_error() {
        for r in requests() {
            let b = r.encode();
            for n in 0..b.len() {
                assert!(Request::decode(&b[..n]).is_err(), "{r:?} cut at {n}");
            }
            let mut long = b.clone();
            long.push(0);
            assert!(Request::decode(&long).is_err());
        }
        for r in responses() {
            let b = r.encode();
            for n in 0..b.len() {
                assert!(Response::decode(&b[..n]).is_err(), "{r:?} cut at {n}");
            }
        }
    }

    #[test]
    fn huge_declared_lengths_allocate_nothing() {
        // A Submit claiming 2^32-1 parts in a 35-byte message.
        let mut e = Enc::default();
        e.u16(6);
        e.ctrl(&CtrlParams::default());
        e.u32(0);
        e.u64(0);
        e.u32(0);
        e.u32(u32::MAX);
        let err = Request::decode(&e.0).unwrap_err();
        assert!(err.0.contains("longer than the message"), "{err}");
        assert!(Request::decode(&[0xff, 0xff]).is_err());
    }
}
